// SPDX-License-Identifier: Apache-2.0
// One rank's file of a sharded checkpoint, written in the background
// (plan.checkpoint_async; docs/datalayer.md "Asynchronous save"): the step
// boundary pays for the snapshot of the rank's pieces in host memory
// (CollectRankPieces with PieceMemory::kOwnCopy: pinned copies on a GPU);
// a thread writes them (datalayer::WriteRankShard: tmp, fsync, rename)
// while training changes the state. The commit is
// runtime/checkpointing.h FinishCheckpoint's, at a later step boundary:
// there rank 0 takes the steps the checkpoint holds and a BackgroundCommit
// makes it durable (metadata, index transaction, pruning) on a thread of
// its own, while the next steps run.
//
// Owns: the snapshot, the commit, their threads. May call:
// runtime/checkpoint_slices (RankPieces), datalayer (WriteRankShard,
// TrainingRun::CommitTaken, Env), base.
// Thread safety: the owner calls everything from one thread; each thread
// touches only what it was given and its own result.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "datalayer/env.h"
#include "datalayer/sharded_checkpoint.h"
#include "datalayer/training_run.h"
#include "runtime/checkpoint_slices.h"

namespace maestro::runtime {

class BackgroundRankWrite {
 public:
  // Starts writing `pieces` (a snapshot: PieceMemory::kOwnCopy) as rank
  // `rank`'s file of the checkpoint directory `dir` of step `step`, on a
  // new thread, through `env` (which must outlive the write).
  BackgroundRankWrite(RankPieces pieces, std::string dir, int rank, int64_t step, datalayer::Env* env);
  ~BackgroundRankWrite();  // waits for the thread
  BackgroundRankWrite(const BackgroundRankWrite&) = delete;
  BackgroundRankWrite& operator=(const BackgroundRankWrite&) = delete;

  int64_t step() const { return step_; }
  const std::string& dir() const { return dir_; }
  // The snapshot's size (bytes of the rank's pieces).
  int64_t bytes() const { return bytes_; }
  // The counters of the snapshot (AdamW step counts).
  const std::map<std::string, int64_t>& counters() const { return counters_; }
  // The thread has finished (the file is durable, or the write failed).
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Waits for the thread; the records of the rank's pieces, or the write's
  // error. Frees the snapshot. Call once.
  StatusOr<std::vector<datalayer::SliceRecord>> Wait();
  // Seconds the thread took to write and sync the file (valid after Wait).
  double write_seconds() const { return write_seconds_; }

 private:
  RankPieces pieces_;
  std::string dir_;
  int rank_;
  int64_t step_;
  int64_t bytes_ = 0;
  std::map<std::string, int64_t> counters_;
  StatusOr<std::vector<datalayer::SliceRecord>> result_;
  double write_seconds_ = 0.0;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// Rank 0's commit of an asynchronous checkpoint (its steps already taken
// from the run: TrainingRun::TakeCheckpoint) on a thread of its own:
// TrainingRun::CommitTaken. The run must outlive it; one at a time (the next
// checkpoint, a stop and the end of the run Wait for it first).
class BackgroundCommit {
 public:
  BackgroundCommit(datalayer::TrainingRun* run, datalayer::TrainingRun::TakenCheckpoint taken);
  ~BackgroundCommit();  // waits for the thread
  BackgroundCommit(const BackgroundCommit&) = delete;
  BackgroundCommit& operator=(const BackgroundCommit&) = delete;

  int64_t step() const { return step_; }
  // Waits for the commit; its error, naming the step. Call once.
  Status Wait();

 private:
  int64_t step_;
  datalayer::TrainingRun::TakenCheckpoint taken_;
  Status result_;
  std::thread thread_;
};

}  // namespace maestro::runtime
