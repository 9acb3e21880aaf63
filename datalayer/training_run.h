// SPDX-License-Identifier: Apache-2.0
// TrainingRun: the datalayer of one training run directory, and the order of
// operations that makes resume exact (docs/datalayer.md "Exactly once").
//
//   <run_dir>/index.sqlite        SampleIndex (+ spool commit records)
//   <run_dir>/spool/<name>.h5     one ActivationSpool per forward-only output
//   <run_dir>/checkpoints/        CheckpointStore (ckpt-<step>/: a sharded checkpoint)
//
// The training loop:
//   run = TrainingRun::Open(...); run->index().IngestManifest(...);
//   auto state = run->Resume();            // last committed checkpoint or none
//   while (...) {
//     batch = run->NextBatch();            // the exact next step
//     ... spool->Get / Put, forward, backward, optimizer ...
//     run->StepDone({batch.step, batch.sample_ids, schedule});
//     if (checkpoint due || preemption requested) run->Checkpoint(state bytes);
//   }
// Checkpoint() = every spool's Commit() -> checkpoint file durable
// (tmp, fsync, rename, fsync dir; a sharded checkpoint: every rank's file
// already durable, then its metadata so) -> ONE SQLite transaction: steps done +
// samples consumed + "checkpoint X holds them" -> prune to the last N.
// A crash anywhere before that transaction leaves the previous commit point
// intact: those steps are redone from the previous checkpoint, their samples
// were never marked consumed, and the orphan checkpoint file is ignored.
//
// May call: SampleIndex, ActivationSpool, CheckpointStore, Env.
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "datalayer/activation_spool.h"
#include "datalayer/checkpoint_store.h"
#include "datalayer/env.h"
#include "datalayer/sample_index.h"

namespace maestro::datalayer {

struct RunOptions {
  std::string run_dir;
  uint64_t seed = 0;
  int64_t global_batch_size = 0;
  int keep_last_checkpoints = 2;
};

class TrainingRun {
 public:
  static StatusOr<std::unique_ptr<TrainingRun>> Open(const RunOptions& options, Env* env = Env::Default());
  // <run_dir>/checkpoints: the CheckpointStore's directory.
  static std::string CheckpointsDir(const std::string& run_dir);
  // The directory every rank writes its pieces of step `step`'s sharded
  // checkpoint into, before rank 0's Checkpoint() commits it.
  static std::string ShardedCheckpointDir(const std::string& run_dir, int64_t step);
  ~TrainingRun();

  SampleIndex& index() { return *index_; }
  CheckpointStore& checkpoints() { return *checkpoints_; }
  // Opens the spool <run_dir>/spool/<name>.h5; the run owns it and commits
  // it at every Checkpoint(). The pointer lives as long as the run.
  StatusOr<ActivationSpool*> OpenSpool(const SpoolOptions& options);

  // REQUIRES: the manifest is ingested. Loads the last committed checkpoint
  // (verified; nullopt on a fresh run), removes uncommitted and temporary
  // checkpoint files, and positions the run at the step after it.
  StatusOr<std::optional<CheckpointData>> Resume();
  int64_t next_step() const { return next_step_; }
  // The global batch of next_step().
  StatusOr<GlobalBatch> NextBatch();
  // Records that step next_step() finished (weights updated in memory); it
  // becomes durable, and its samples consumed, at the next Checkpoint().
  Status StepDone(StepRecord record);
  int64_t pending_steps() const { return static_cast<int64_t>(pending_.size()); }
  // REQUIRES: state.step is a pending step (the last one, or an earlier one
  // for an asynchronous save written while later steps ran); the pending
  // steps up to it are committed, the later ones stay pending. The caller
  // fills sections or slices; epoch and next_step are set here. See the
  // order of operations above.
  Status Checkpoint(CheckpointData state);
  // Commits every spool without a checkpoint (a preempted step that is
  // abandoned keeps the teacher outputs it already computed).
  Status CommitSpools();

 private:
  TrainingRun(RunOptions options, Env* env) : options_(std::move(options)), env_(env) {}
  RunOptions options_;
  Env* env_;
  std::unique_ptr<SampleIndex> index_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  std::vector<std::unique_ptr<ActivationSpool>> spools_;  // destroyed before index_
  std::vector<StepRecord> pending_;
  int64_t next_step_ = 0;
  bool resumed_ = false;
};

}  // namespace maestro::datalayer
