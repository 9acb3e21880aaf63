// SPDX-License-Identifier: Apache-2.0
// The spool of a forward-only section that feeds others: its output rows,
// one per (sample, epoch), kept in <run_dir>/spool/<section>-dp<r>.h5 with
// the commit records in a SampleIndex database of the rank's own
// (<section>-dp<r>.sqlite), reused across resumes and epochs (a frozen
// section's output never changes). Rows it holds are read back; the others
// are computed and added.
// Runtime-internal (torch). May call: runtime/section_runner, runtime/device_staging, datalayer,
// datasets (SampleSource), base, libtorch. Thread safety: one thread.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "base/status.h"
#include "datalayer/activation_spool.h"
#include "datalayer/sample_index.h"
#include "datasets/sample_source.h"
#include "runtime/device_staging.h"
#include "runtime/section_runner.h"

namespace maestro::runtime {

class OutputSpool {
 public:
  // The spool of section `section_name`'s replica `replica` under `run_dir`.
  static StatusOr<std::unique_ptr<OutputSpool>> Open(const std::string& run_dir, const std::string& section_name,
                                                     int replica);

  // The rows of `data`'s samples at `epoch`: (B, runner.OutputRowShape()...)
  // fp32 in host memory (pinned when `staging` streams to a GPU), from the
  // spool where it has them, else computed by `runner` (the samples'
  // payloads from `samples`; on its device, copied to the host through
  // `staging` when given) and spooled. `computed_samples` (when given): the
  // micro-batch of the samples it computed (no samples when all were spooled).
  StatusOr<torch::Tensor> Rows(const MicroBatchData& data, int64_t epoch, SectionRunner& runner,
                               const datasets::SampleSource& samples, TransferStaging* staging = nullptr,
                               MicroBatchData* computed_samples = nullptr);
  // A model-parallel section's owner (docs/run_ahead.md): the rows of
  // `sample_ids` at `epoch` are looked up first (Lookup: the hits read into
  // `rows`, (B, row_shape...) fp32 on the host, `missing` the positions of
  // the others, ascending), the replica computes the missing ones on every
  // rank, and Fill copies them in and spools them.
  struct Looked {
    torch::Tensor rows;
    std::vector<int64_t> missing;
  };
  StatusOr<Looked> Lookup(const std::vector<int64_t>& sample_ids, int64_t epoch, const std::vector<int64_t>& row_shape,
                          TransferStaging* staging = nullptr);
  // `computed`: (looked.missing.size(), row_shape...) on any device and dtype.
  Status Fill(Looked& looked, const std::vector<int64_t>& sample_ids, int64_t epoch, const torch::Tensor& computed,
              TransferStaging* staging = nullptr);
  // Makes the rows spooled so far durable (at a checkpoint).
  Status Commit() { return spool_->Commit(); }

  int64_t hits() const { return hits_; }
  int64_t computed() const { return computed_; }

 private:
  OutputSpool() = default;
  std::unique_ptr<datalayer::SampleIndex> index_;
  std::unique_ptr<datalayer::ActivationSpool> spool_;
  int64_t hits_ = 0, computed_ = 0;
};

}  // namespace maestro::runtime
