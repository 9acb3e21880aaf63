// SPDX-License-Identifier: Apache-2.0
// The spool of a forward-only section that feeds others: its output rows,
// one per sample, kept on disk so that they are computed once and read back
// in later epochs, after a resume, and by any rank of any layout (docs/
// datalayer.md, "The runtime's spools"). Files live in one folder per
// section and identity, <run_dir>/spool/<section>-<codec>-<identity>/
// (a hash of the teacher, the data and the form): each writing rank
// (a DP replica) writes its own HDF5 file and commit records
// (e<epoch>-w<r>of<n>-s<start>.h5 / .sqlite), one per epoch of each start;
// at an epoch change it commits and seals it (closed, then a .sealed marker
// with its row count). Every rank indexes every sealed file of the folder
// (Refresh), whoever wrote it: rows are keyed by sample id, not by the
// writer. Files a dead start left unsealed are recovered (repaired as
// ActivationSpool::Open does, then sealed) by replica 0 at Open. Rows are
// kept compact (SpoolRowCodec: plan/teacher_rows.h): values in the plan's
// spool_dtype, or a KD teacher's packed top-K or sampled rows; every row
// handed on has been through the codec, so a row computed now and the same
// row read back later are equal.
// Runtime-internal (torch). May call: runtime/section_runner, runtime/device_staging, datalayer,
// datasets (SampleSource), plan, base, libtorch. Thread safety: one thread.
#pragma once

#include <torch/torch.h>

#include <cstddef>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
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
  // `run_dir`, its disk plan::SpoolBudgetPerWriter. Replica 0 recovers the
  // files an earlier start left unsealed; the caller then waits for every
  // replica of the section (a barrier) and calls Refresh(). `reuse_sealed`
  // false: Refresh indexes nothing, so only the rows of this epoch's own
  // file are served (runtime/train_options.h reuse_spools). `writes` false:
  // a reader (a fused component's TP peer of the replica's writer): it
  // recovers nothing, serves the sealed files' rows, and the rows it is
  // handed go through the codec (so they equal the writer's) but not to disk.
  static StatusOr<std::unique_ptr<OutputSpool>> Open(const std::string& run_dir, const plan::Plan& plan, int section,
                                                     int replica, bool reuse_sealed = true, bool writes = true);

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
  // Makes the rows spooled so far durable (at a checkpoint, a step end).
  Status Commit();
  // A new epoch: commits and seals this writer's file; its next rows go to
  // a file of `epoch`. Then the caller waits for every replica and Refresh()es.
  Status BeginEpoch(int64_t epoch);
  // Indexes the sealed files of the folder not indexed yet (any writer).
  Status Refresh();
  // Commits and seals this writer's file mid-epoch (the offline pass's end),
  // so that every replica reads its rows after the caller's barrier and
  // Refresh; later rows of the epoch go to a new file (a new start token).
  Status Seal();

  int64_t hits() const { return hits_; }
  int64_t computed() const { return computed_; }
  const std::string& folder() const { return folder_; }

 private:
  OutputSpool() = default;
  // Reads the spooled row of `sample_id` into `slot` (row_shape fp32); false on a miss.
  StatusOr<bool> ReadInto(int64_t sample_id, int64_t epoch, torch::Tensor slot);
  // Stores `row` (row_shape fp32 host) and writes into `slot` what a later read gives back.
  Status Store(int64_t sample_id, int64_t epoch, const torch::Tensor& row, torch::Tensor slot);
  // This writer's file of writer_epoch_, opened at its first row.
  Status OpenWriter();
  // Commits, closes and marks sealed this writer's file.
  Status SealWriter();
  // Replica 0 at Open: every unsealed file of the folder (a dead start's).
  Status RecoverUnsealed();

  std::string folder_;
  std::string start_;  // this start's token in its file names
  int replica_ = 0, replicas_ = 1;
  int64_t writer_epoch_ = 0;
  bool reuse_sealed_ = true;
  bool writes_ = true;
  int64_t share_bytes_ = 0;  // the section's share of the spool disk, all replicas
  datalayer::SpoolOptions options_;
  std::unique_ptr<datalayer::SampleIndex> writer_index_;
  std::unique_ptr<datalayer::ActivationSpool> writer_;
  std::vector<std::unique_ptr<datalayer::ActivationSpool>> sealed_;
  std::unordered_map<int64_t, size_t> sealed_row_;  // sample id -> its sealed_ file (the latest indexed)
  std::set<std::string> indexed_;                   // sealed files' names in sealed_
  SpoolRowCodec codec_;
  datalayer::SpoolRow read_row_;  // ReadInto's buffer, reused row after row
  int64_t hits_ = 0, computed_ = 0;
};

}  // namespace maestro::runtime
