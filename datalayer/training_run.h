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
// Checkpoint() is TakeCheckpoint() then CommitTaken(): the first on the
// loop's thread, the second on any one thread, while the loop goes on (an
// asynchronous save's commit, off the step loop: runtime/checkpoint_writer.h).
//
// May call: SampleIndex, ActivationSpool, CheckpointStore, Env.
// Thread safety: one thread at a time, but for CommitTaken: one commit at a
// time, on any thread, while another calls everything else but Checkpoint,
// checkpoints() and Resume (it owns a SQLite connection of its own and the
// CheckpointStore; the loop's thread keeps index(), the spools, the
// pending steps).
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
  // Checkpoint()'s two halves. TakeCheckpoint (the loop's thread): every
  // spool committed, the pending steps up to state.step taken out (the later
  // ones stay pending), epoch and next_step set. CommitTaken (see Thread
  // safety): the checkpoint durable (a sharded one: its metadata), the index
  // transaction, then the checkpoints before the last N removed (those after
  // this one are left: the next may be in the writing). An error of either
  // leaves the previous commit point intact; Checkpoint() puts the steps
  // back in pending on an error of CommitTaken.
  struct TakenCheckpoint {
    CheckpointData state;
    std::vector<StepRecord> steps;
    int64_t steps_per_epoch = 0;
  };
  StatusOr<TakenCheckpoint> TakeCheckpoint(CheckpointData state);
  Status CommitTaken(const TakenCheckpoint& taken);
  // Commits every spool without a checkpoint (a preempted step that is
  // abandoned keeps the teacher outputs it already computed).
  Status CommitSpools();

 private:
  TrainingRun(RunOptions options, Env* env) : options_(std::move(options)), env_(env) {}
  RunOptions options_;
  Env* env_;
  std::unique_ptr<SampleIndex> index_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  std::unique_ptr<SampleIndex> committer_;                // CommitTaken's connection, opened by its first call
  std::vector<std::unique_ptr<ActivationSpool>> spools_;  // destroyed before index_
  std::vector<StepRecord> pending_;
  int64_t next_step_ = 0;
  bool resumed_ = false;
};

}  // namespace maestro::datalayer
