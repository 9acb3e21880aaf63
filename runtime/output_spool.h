// SPDX-License-Identifier: Apache-2.0
// The spool of a forward-only section that feeds others: its output rows,
// one per (sample, epoch), kept in <run_dir>/spool/<section>-<codec>-dp<r>.h5
// with the commit records in a SampleIndex database of the rank's own
// (<section>-<codec>-dp<r>.sqlite), reused across resumes and epochs (a
// frozen section's output never changes). Rows it holds are read back; the
// others are computed and added. Rows are kept compact (SpoolRowCodec:
// plan/teacher_rows.h): values in the plan's spool_dtype, or a KD teacher's
// packed top-K or sampled rows; every row handed on has been through the
// codec, so a row computed now and the same row read back later are equal.
// Runtime-internal (torch). May call: runtime/section_runner, runtime/device_staging, datalayer,
// datasets (SampleSource), plan, base, libtorch. Thread safety: one thread.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "datalayer/activation_spool.h"
#include "datalayer/sample_index.h"
#include "datasets/sample_source.h"
#include "plan/teacher_rows.h"
#include "runtime/device_staging.h"
#include "runtime/section_runner.h"

namespace maestro::runtime {

// How a section's rows are stored: as values of a 16- or 32-bit float type
// (hidden states, encoders' embeddings), or packed bytes of a KD teacher's
// top-K rows (K values in the value type, then K int32 ids, a position) or
// sampled rows (n int32 ids a position, then one fp32 entropy a position).
class SpoolRowCodec {
 public:
  static SpoolRowCodec For(const plan::Plan& plan, int section);
  // "bf16", "f32", "topk128-bf16", "sampled16": part of the file's name, so a
  // spool written under another codec is never read as this one.
  std::string name() const;
  datalayer::DType dtype() const;
  // row: (L, W) fp32, contiguous, host -> the bytes the spool stores and their dims.
  std::vector<std::byte> Encode(const torch::Tensor& row, std::vector<int64_t>* dims) const;
  // Stored bytes -> `row` (L, W) fp32 host. False (row untouched) when their size is not a row's.
  bool Decode(const std::vector<std::byte>& bytes, torch::Tensor row) const;

 private:
  plan::TeacherRowsForm form_ = plan::TeacherRowsForm::kHidden;  // kHidden: plain values
  torch::ScalarType values_ = torch::kBFloat16;
  int64_t k_ = 0;  // top-K: K; sampled: draws
};

class OutputSpool {
 public:
  // The spool of section `section`'s replica `replica` of `plan` under
  // `run_dir`, its budget plan::SpoolBudgetPerWriter.
  static StatusOr<std::unique_ptr<OutputSpool>> Open(const std::string& run_dir, const plan::Plan& plan, int section,
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
  const datalayer::SpoolStats& stats() const { return spool_->stats(); }

 private:
  OutputSpool() = default;
  // Reads the spooled row of `sample_id` into `slot` (row_shape fp32); false on a miss.
  StatusOr<bool> ReadInto(int64_t sample_id, int64_t epoch, torch::Tensor slot);
  // Stores `row` (row_shape fp32 host) and writes into `slot` what a later read gives back.
  Status Store(int64_t sample_id, int64_t epoch, const torch::Tensor& row, torch::Tensor slot);

  std::unique_ptr<datalayer::SampleIndex> index_;
  std::unique_ptr<datalayer::ActivationSpool> spool_;
  SpoolRowCodec codec_;
  int64_t hits_ = 0, computed_ = 0;
};

}  // namespace maestro::runtime
