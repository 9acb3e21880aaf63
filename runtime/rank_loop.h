// SPDX-License-Identifier: Apache-2.0
// RankLoop, the executor's per-rank step loop (runtime/executor.h), as a
// class the executor's own files share. Private: include only from them:
// runtime/executor.cc (setup, resume, the step's ops, checkpoints, the run),
// runtime/executor_run_ahead.cc (a frozen section computing the next
// batches' rows: runtime/run_ahead.h, docs/run_ahead.md),
// runtime/executor_pipeline.cc (the hooks between pipeline stages) and
// runtime/executor_expert_lockstep.cc (an EP group's passes together).
// Every include any of them needs is here, once.
// May call: what runtime/executor.cc may. Thread safety: one thread.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "base/log.h"
#include "datalayer/preemption.h"
#include "datalayer/training_run.h"
#include "runtime/checkpoint_writer.h"
#include "runtime/checkpointing.h"
#include "runtime/collectives.h"
#include "runtime/cost_model.h"
#include "runtime/device_staging.h"
#include "runtime/edge_exchange.h"
#include "runtime/fused_section.h"
#include "runtime/output_spool.h"
#include "runtime/parallel/data_parallel.h"
#include "runtime/parallel/distributed_optimizer.h"
#include "runtime/parallel/expert_parallel.h"
#include "runtime/parallel/pipeline_parallel.h"
#include "runtime/parallel/pipeline_stages.h"
#include "runtime/parallel/tensor_parallel.h"
#include "runtime/parallel/vit_context_parallel.h"
#include "runtime/plan_data.h"
#include "runtime/run_ahead.h"
#include "runtime/section_runner.h"
#include "runtime/section_work.h"
#include "runtime/step_batch.h"
#include "runtime/step_metrics.h"
#include "runtime/timeline.h"
#include "runtime/torch_call.h"
#include "runtime/trace.h"
#include "runtime/train_options.h"
#include "scheduler/problem.h"
#include "scheduler/scheduler.h"

namespace maestro::runtime::executor_internal {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

class RankLoop {
 public:
  RankLoop(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Communicators& comms,
           const TrainOptions& options, const ComputePlacement& compute)
      : plan_(plan),
        place_(place),
        comms_(comms),
        options_(options),
        section_(place.coords.section),
        replica_(place.coords.dp),
        total_steps_(options.steps >= 0 ? options.steps : plan.data.steps),
        reporter_(plan, options.progress, total_steps_),
        trace_(total_steps_),
        memory_(place.coords.section),
        compute_(compute),
        staging_(TorchDevice(compute)),
        edges_(plan, place, comms, &blocked_seconds_, &staging_) {}

  StatusOr<TrainSummary> Run();

 private:
  Status Setup();
  Status Resume();
  Status RunStep(const StepBatch& batch);
  // `batch` null: the run stops; every micro-batch appended is computed.
  Status ComputeAhead(const StepBatch* batch);
  Status ComputeAheadItem(const AheadItem& item, bool input_received);
  Status ReceiveAheadInput(const AheadItem& item);
  // Such a section's stage > 0: micro-batch `mb`'s activation (samples, T, C) from the previous stage.
  StatusOr<torch::Tensor> ReceiveFrozenStageInput(int mb, int64_t samples);
  // A model-parallel forward-only section with a spool (docs/run_ahead.md):
  // the positions of each of `micro_batches` (sample ids) whose rows the
  // owner's spool lacks, the same on every rank of the replica; on the owner
  // the rows it has go to *looked (null: not kept).
  Status ShareRowsToCompute(const std::vector<std::vector<int64_t>>& micro_batches, int64_t epoch,
                            std::vector<std::vector<int64_t>>* positions, std::vector<OutputSpool::Looked>* looked);
  // Micro-batch `mb` (sample ids `ids`, tag index `mb` between stages) of
  // such a section: only the samples at `positions` go through the stages;
  // the owner returns the whole micro-batch's rows (B, row...) from `looked`
  // filled with them (spooled), the other ranks an undefined tensor.
  // `received`: a later stage's input (positions.size(), T, C) received
  // earlier (undefined: received here, ReceiveFrozenStageInput).
  StatusOr<torch::Tensor> ForwardRowsToCompute(int mb, const std::vector<int64_t>& ids,
                                               const std::vector<int64_t>& positions, int64_t epoch,
                                               OutputSpool::Looked* looked,
                                               const torch::Tensor& received = torch::Tensor());
  bool SpoolOwner() const {
    return place_.coords.tp == 0 && place_.coords.cp == 0 && (!pipeline_ || pipeline_->last());
  }
  Status Forward(int mb_index);
  Status Backward(int mb_index);
  // Adds the work of the samples of `data` this rank computed
  // (runtime/section_work.h) to work_ when this rank counts its replica's
  // work: TP rank 0, CP rank 0 (for the whole sequence) and the first
  // pipeline stage (for the whole model); its TP, CP and PP peers run the
  // same samples. Each DP (and EP) replica counts its own samples.
  void CountWork(const MicroBatchData& data);
  bool CountsWork() const {
    return place_.coords.tp == 0 && place_.coords.cp == 0 && (!pipeline_ || pipeline_->first());
  }
  // EP lockstep (executor_expert_lockstep.cc): runs `ops`' forwards and
  // backwards merged with the EP group's (LockstepOps), leaving the
  // optimizer op in *ops; an empty micro-batch's MoE exchanges.
  Status RunExpertLockstep(std::vector<scheduler::Op>* ops);
  Status ForwardNoTokens(int slot);
  Status BackwardNoTokens(int slot);
  // Pipeline stages (pp > 1; executor_pipeline.cc): `program`'s ops in this
  // stage's order (runtime/parallel/pipeline_stages.h StageOrder; a rank
  // without PP: as they are), and the hooks of Forward and Backward between
  // this stage and its neighbours.
  std::vector<scheduler::Op> OpsInStageOrder(const scheduler::RankProgram& program) const;
  Status ReceiveFromPreviousStage(int mb_index, int64_t samples);
  Status SendToNextStage(int mb_index);
  Status SumTiedEmbeddingGradient();
  Status OptimizerStep(int64_t step);
  Status ShardedOptimizerStep(int64_t step);
  // The checkpoint after step `step`: written at once (Checkpoint), or
  // started in the background (StartBackgroundCheckpoint: plan.
  // checkpoint_async) and committed at a later step end (FinishBackground-
  // Checkpoint, collective; `after_step`: the step that just ended).
  Status Checkpoint(int64_t step);
  Status StartBackgroundCheckpoint(int64_t step);
  Status FinishBackgroundCheckpoint(int64_t after_step);
  // Rank 0: waits for committing_ (a no-op without one); its error.
  Status WaitForCommit();
  // A fused section's frozen components' spools (executor.cc), and every
  // spool of this rank made durable.
  Status OpenComponentSpools();
  // plan.offline_spool_pass (executor_offline_pass.cc): before a fresh job's
  // first step, this replica's share of the train split through the frozen
  // components into their spools, then every file sealed and indexed. True
  // when a preemption signal stopped it (its rows committed, no step run).
  StatusOr<bool> RunOfflineSpoolPass();
  StatusOr<bool> AnyRankSignalled();  // a sum over the world: every rank calls it alike
  Status CommitSpools();
  void LogSpoolCounts() const;
  Status RefreshSpoolsTogether();
  // What every rank learns at a step's end (FinishStep's sum): `stop`: some
  // rank was signalled; `checkpoint_due`: rank 0 found plan.
  // checkpoint_minutes passed since the start or the last checkpoint;
  // `checkpoint_writing`: some rank's background write has not finished.
  struct StepEnd {
    bool stop = false, checkpoint_due = false, checkpoint_writing = false;
  };
  Status FinishStep(const StepBatch& batch, Clock::time_point step_start, StepEnd* end);
  Status EvaluateCaptionsAtEnd(TrainSummary* summary);
  Status EvaluateHeldOutAtEnd(TrainSummary* summary);
  bool Rank0() const { return place_.world_rank == 0; }
  int TpSize() const { return plan_.sections[static_cast<size_t>(section_)].config.tp; }
  int EpSize() const { return plan_.sections[static_cast<size_t>(section_)].config.ep; }
  int CpSize() const { return plan_.sections[static_cast<size_t>(section_)].config.cp; }
  // The sample ids of micro-batch `mb_index` of this rank's program, in order.
  std::vector<int64_t> MicroBatchIds(int mb_index) const {
    const auto& ids = program_->micro_batches[static_cast<size_t>(mb_index)].sample_ids;
    return std::vector<int64_t>(ids.begin(), ids.end());
  }

  const plan::Plan& plan_;
  const launcher::RankPlace& place_;
  launcher::Communicators& comms_;
  TrainOptions options_;
  int section_, replica_;
  int64_t total_steps_;
  bool resumed_ = false;  // the run resumed from a checkpoint
  std::vector<std::string> modality_names_;
  std::shared_ptr<const scheduler::SectionCostModel> costs_;

  std::unique_ptr<datasets::SampleSource> samples_;
  std::unique_ptr<GroupReducer> tp_reducer_;                    // outlives runner_
  std::unique_ptr<PipelineGroup> pipeline_;                     // pp > 1; outlives runner_
  std::unique_ptr<GroupExpertExchange> ep_exchange_;            // ep > 1; outlives runner_
  std::map<int, std::vector<torch::Tensor>> no_token_outputs_;  // EP: empty forwards by slot, awaiting their backward
  bool pipeline_run_ahead_ = false;                             // 1F1B warm-up allowed (StageOrder)
  std::unique_ptr<SectionRunner> runner_;
  // A ZeRO-1 section's AdamW shard (OptimizerShardedOverDp); null otherwise,
  // when the runner's replicated AdamW steps.
  // One per training runner (runner_->CheckpointedRunners(): a fused
  // section's training components), in that order.
  std::vector<std::unique_ptr<DistributedOptimizer>> sharded_optimizers_;
  ShardedOptimizers Shards() const {
    ShardedOptimizers out;
    for (const auto& o : sharded_optimizers_) out.push_back(o.get());
    return out;
  }
  std::unique_ptr<datalayer::TrainingRun> run_;  // rank 0 only
  std::unique_ptr<OutputSpool> spool_;
  // A fused section: its runner, and its frozen components' spools by name.
  FusedSectionRunner* fused_ = nullptr;
  std::vector<std::pair<std::string, std::unique_ptr<OutputSpool>>> component_spools_;
  std::unique_ptr<RunAhead> run_ahead_;  // a forward-only section with run_ahead > 0 (runtime/run_ahead.h)
  // TP or PP > 1 and running ahead: one rank of the replica owns the spool
  // (SpoolOwner) and says which rows every rank computes.
  bool model_parallel_spool_ = false;
  std::vector<std::vector<int64_t>> rows_to_compute_;   // the step in flight: per micro-batch, positions
  std::vector<OutputSpool::Looked> looked_;             // the owner: per micro-batch, the spooled rows
  std::map<int64_t, torch::Tensor> held_stage_inputs_;  // run-ahead: inputs received for a later call, by seq
  std::vector<StepBatch> ahead_;  // the batches after the one in flight (ShareNextBatch's lookahead)
  std::unique_ptr<datalayer::PreemptionSignal> signal_;
  StepReporter reporter_;
  StepTrace trace_;
  RankMemoryTracker memory_;

  // The step in flight.
  int64_t current_step_ = 0;
  int64_t current_epoch_ = 0;
  scheduler::Problem problem_;
  scheduler::Schedule schedule_;
  const scheduler::RankProgram* program_ = nullptr;
  // Rank 0, when a section runs ahead: the step before the one in flight
  // (-1: none yet), its problem and schedule, which the timeline draws: the
  // run's last step computes nothing ahead, the one before it does.
  int64_t previous_step_ = -1;
  scheduler::Problem previous_problem_;
  scheduler::Schedule previous_schedule_;
  struct MicroBatchState {
    MicroBatchData data;
    std::map<int, torch::Tensor> inputs;
    torch::Tensor stage_input;          // pp > 1, not the first stage: the previous stage's activation (B, T, C)
    torch::Tensor stage_teacher_input;  // a fused KD section's: the frozen teacher's (B, T, C_teacher)
    SectionRunner::Output out;
  };
  std::vector<MicroBatchState> states_;
  double busy_seconds_ = 0.0;
  double blocked_seconds_ = 0.0;
  std::vector<SectionWork> work_;  // this step's, per work slot of the section (CountWork)
  ComputePlacement compute_;       // this rank's device and precision (ChooseRankCompute)
  TransferStaging staging_;        // its copies to and from the wire
  EdgeExchange edges_;             // counts into blocked_seconds_
  double loss_sum_ = 0.0;
  int64_t loss_samples_ = 0, answers_ = 0, answers_right_ = 0;
  double last_loss_ = 0.0;
  Clock::time_point last_checkpoint_ = Clock::now();  // or this start's; rank 0's clock decides checkpoint_minutes
  // The background write of this rank's file of a checkpoint not yet
  // committed (plan.checkpoint_async), and the seconds its snapshot took.
  std::unique_ptr<BackgroundRankWrite> writing_;
  double writing_snapshot_seconds_ = 0.0;
  // Rank 0: the commit of the last background checkpoint, running on its
  // thread (declared after run_: destroyed, and joined, before it).
  std::unique_ptr<BackgroundCommit> committing_;
};

}  // namespace maestro::runtime::executor_internal
