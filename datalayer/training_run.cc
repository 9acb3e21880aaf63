// SPDX-License-Identifier: Apache-2.0
#include "datalayer/training_run.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/checks.h"
#include "base/log.h"

namespace maestro::datalayer {

std::string TrainingRun::CheckpointsDir(const std::string& run_dir) {
  return run_dir + "/checkpoints";
}

std::string TrainingRun::ShardedCheckpointDir(const std::string& run_dir, int64_t step) {
  return CheckpointsDir(run_dir) + "/" + ShardedCheckpointDirName(step);
}

StatusOr<std::unique_ptr<TrainingRun>> TrainingRun::Open(const RunOptions& options, Env* env) {
  if (options.run_dir.empty()) return Status::InvalidArgument("TrainingRun needs a run directory");
  std::unique_ptr<TrainingRun> run(new TrainingRun(options, env));
  MAESTRO_RETURN_IF_ERROR(env->CreateDirs(options.run_dir + "/spool"));
  MAESTRO_ASSIGN_OR_RETURN(run->index_, SampleIndex::Open(options.run_dir + "/index.sqlite", env));
  MAESTRO_ASSIGN_OR_RETURN(run->checkpoints_,
                           CheckpointStore::Open(CheckpointsDir(options.run_dir), options.keep_last_checkpoints, env));
  return run;
}

TrainingRun::~TrainingRun() {
  spools_.clear();
}

StatusOr<ActivationSpool*> TrainingRun::OpenSpool(const SpoolOptions& options) {
  for (const auto& s : spools_) {
    if (s->path() == options_.run_dir + "/spool/" + options.name + ".h5") {
      return Status::AlreadyExists(fmt::format("spool {} is already open", options.name));
    }
  }
  if (options.name.find('/') != std::string::npos) {
    return Status::InvalidArgument(fmt::format("spool name '{}' must not contain '/'", options.name));
  }
  MAESTRO_ASSIGN_OR_RETURN(auto spool, ActivationSpool::Open(options_.run_dir + "/spool/" + options.name + ".h5",
                                                             &index_->db(), options, env_));
  spools_.push_back(std::move(spool));
  return spools_.back().get();
}

StatusOr<std::optional<CheckpointData>> TrainingRun::Resume() {
  MAESTRO_RETURN_IF_ERROR(index_->ConfigureRun(options_.seed, options_.global_batch_size));
  if (index_->NumSamples() == 0) {
    return Status::FailedPrecondition(
        fmt::format("{}: no samples; ingest a manifest before resuming", options_.run_dir));
  }
  MAESTRO_ASSIGN_OR_RETURN(CommitPoint point, index_->LastCommit());
  std::optional<CheckpointData> state;
  if (point.last_step >= 0) {
    auto data = checkpoints_->Read(point.checkpoint_file);
    if (!data.ok()) {
      return data.status().WithContext(fmt::format("resuming {} at step {}", options_.run_dir, point.next_step()));
    }
    if (data->step != point.checkpoint_step) {
      return Status::Corruption(fmt::format("checkpoint {} says step {} but the step log says {}",
                                            point.checkpoint_file, data->step, point.checkpoint_step));
    }
    state = std::move(*data);
  }
  // Checkpoints newer than the commit point were never committed: drop them.
  MAESTRO_ASSIGN_OR_RETURN(std::vector<int64_t> committed, index_->CommittedCheckpoints());
  if (static_cast<int>(committed.size()) > options_.keep_last_checkpoints) {
    committed.erase(committed.begin(), committed.end() - options_.keep_last_checkpoints);
  }
  MAESTRO_RETURN_IF_ERROR(checkpoints_->RemoveAllBut(committed));
  next_step_ = point.next_step();
  pending_.clear();
  resumed_ = true;
  if (point.last_step >= 0) {
    Log(LogLevel::kInfo, "datalayer: resuming {} at step {} from checkpoint {}", options_.run_dir, next_step_,
        point.checkpoint_file);
  }
  return state;
}

StatusOr<GlobalBatch> TrainingRun::NextBatch() {
  if (!resumed_) return Status::FailedPrecondition("TrainingRun::NextBatch before Resume()");
  return index_->BatchForStep(next_step_);
}

Status TrainingRun::StepDone(StepRecord record) {
  if (!resumed_) return Status::FailedPrecondition("TrainingRun::StepDone before Resume()");
  if (record.step != next_step_) {
    return Status::InvalidArgument(
        fmt::format("StepDone for step {} but the run is at step {}", record.step, next_step_));
  }
  pending_.push_back(std::move(record));
  ++next_step_;
  return Status::Ok();
}

Status TrainingRun::CommitSpools() {
  for (auto& spool : spools_) MAESTRO_RETURN_IF_ERROR(spool->Commit());
  return Status::Ok();
}

Status TrainingRun::Checkpoint(CheckpointData state) {
  MAESTRO_ASSIGN_OR_RETURN(TakenCheckpoint taken, TakeCheckpoint(std::move(state)));
  Status committed = CommitTaken(taken);
  // Not committed: the steps stay pending, and a later Checkpoint() may
  // commit them (the previous commit point is intact).
  if (!committed.ok()) pending_.insert(pending_.begin(), taken.steps.begin(), taken.steps.end());
  return committed;
}

StatusOr<TrainingRun::TakenCheckpoint> TrainingRun::TakeCheckpoint(CheckpointData state) {
  if (pending_.empty()) return Status::FailedPrecondition("TrainingRun::Checkpoint with no finished step");
  // The steps the checkpoint holds: the pending ones up to state.step (an
  // asynchronous save commits a step that later finished steps follow).
  auto last = std::find_if(pending_.begin(), pending_.end(), [&](const StepRecord& r) { return r.step == state.step; });
  if (last == pending_.end()) {
    return Status::InvalidArgument(
        fmt::format("checkpoint of step {} but the finished steps not yet committed are {}..{}", state.step,
                    pending_.front().step, pending_.back().step));
  }
  TakenCheckpoint taken;
  taken.steps.assign(pending_.begin(), last + 1);
  taken.steps_per_epoch = index_->StepsPerEpoch();
  state.epoch = state.step / taken.steps_per_epoch;
  state.next_step = state.step + 1;
  taken.state = std::move(state);
  // 1. forward-only outputs durable and recorded.
  MAESTRO_RETURN_IF_ERROR(CommitSpools());
  pending_.erase(pending_.begin(), last + 1);
  return taken;
}

Status TrainingRun::CommitTaken(const TakenCheckpoint& taken) {
  if (!committer_) {
    MAESTRO_ASSIGN_OR_RETURN(
        committer_, SampleIndex::OpenForCommits(options_.run_dir + "/index.sqlite", taken.steps_per_epoch, env_));
  }
  const int64_t step = taken.state.step;
  // 2. the checkpoint file durable under its final name.
  MAESTRO_ASSIGN_OR_RETURN(std::string file, checkpoints_->Write(taken.state));
  // 3. the commit point: steps done + samples consumed + checkpoint, atomically.
  MAESTRO_RETURN_IF_ERROR(committer_->CommitSteps(taken.steps, step, file));
  // 4. keep the last N committed checkpoints; later ones may be in the writing.
  MAESTRO_ASSIGN_OR_RETURN(std::vector<int64_t> committed, committer_->CommittedCheckpoints());
  if (static_cast<int>(committed.size()) > options_.keep_last_checkpoints) {
    committed.erase(committed.begin(), committed.end() - options_.keep_last_checkpoints);
  }
  return checkpoints_->RemoveAllBut(committed, /*spare_after=*/step);
}

}  // namespace maestro::datalayer
