// SPDX-License-Identifier: Apache-2.0
// RankLoop (runtime/rank_loop.h): setup and resume, batch -> schedule ->
// dispatch this rank's ops (forward, backward, optimizer), checkpoints and
// the run. Its other rooms: executor_run_ahead.cc, executor_pipeline.cc,
// executor_expert_lockstep.cc (see executor.h).
#include "runtime/executor.h"

#include "plan/runtime_support.h"
#include "plan/teacher_rows.h"
#include "runtime/evaluation.h"
#include "runtime/rank_loop.h"
#include "runtime/section_optimizer.h"

namespace maestro::runtime {

namespace {

using executor_internal::Clock;
using executor_internal::SecondsSince;

// Whether frozen sections' rows are read back across epochs: the plan's
// choice over the job, unless the run says no (--no-spool-reuse).
bool ReusesSpools(const plan::Plan& plan, const TrainOptions& options) {
  return plan.spool_reuse && options.reuse_spools;
}

}  // namespace

namespace executor_internal {

Status RankLoop::Setup() {
  torch::set_num_threads(ThreadsPerRank());
  MAESTRO_RETURN_IF_ERROR(plan::CheckPlanRuns(plan_));  // what the runtime refuses, by name
  modality_names_ = scheduler::ModalityNamesOf(plan_);
  costs_ = RuntimeCostModel(plan_);
  MAESTRO_ASSIGN_OR_RETURN(samples_, OpenPlanDataset(plan_));
  if (plan_.data.on_bad_sample == "skip") reporter_.SetSkippedSamples(samples_->SkippedSamples());
  MAESTRO_RETURN_IF_ERROR(Resume());
  MAESTRO_ASSIGN_OR_RETURN(signal_, datalayer::PreemptionSignal::Install());

  // A forward-only section that feeds others keeps its outputs in a spool
  // (plan::KeepsSpool says which); a model-parallel one on the rank that
  // sends downstream (its peers compute the rows it lacks with it).
  const bool model_parallel = TpSize() > 1 || CpSize() > 1 || pipeline_ != nullptr;
  const int run_ahead = plan_.sections[static_cast<size_t>(section_)].run_ahead;
  if (plan::KeepsSpool(plan_, section_)) {
    model_parallel_spool_ = model_parallel;
    if (!model_parallel || SpoolOwner()) {
      MAESTRO_ASSIGN_OR_RETURN(
          spool_, OutputSpool::Open(options_.run_dir, plan_, section_, replica_, ReusesSpools(plan_, options_)));
    }
    if (run_ahead > 0) {
      run_ahead_ = std::make_unique<RunAhead>(plan_, section_, replica_, costs_, pipeline_ ? pipeline_->stage() : 0,
                                              pipeline_ ? pipeline_->stages() : 1);
    }
  }
  MAESTRO_RETURN_IF_ERROR(OpenComponentSpools());
  MAESTRO_RETURN_IF_ERROR(RefreshSpoolsTogether());
  last_checkpoint_ = Clock::now();  // checkpoint_minutes count training, not the build or the resume
  return Status::Ok();
}

// Rank 0 owns the run directory and says whether the run resumes; then every
// rank builds its section (a resumed training section skips its initial
// weights) and rank 0 sends each training rank its state.
Status RankLoop::Resume() {
  std::optional<datalayer::CheckpointData> resumed;
  Status rank0_status;
  if (Rank0()) {
    auto run = OpenPlanRun(plan_, *samples_, options_.run_dir);
    if (run.ok()) {
      run_ = std::move(*run);
      auto state = run_->Resume();
      if (state.ok()) {
        resumed = std::move(*state);
      } else {
        rank0_status = state.status();
      }
    } else {
      rank0_status = run.status();
    }
    reporter_.Open(options_.run_dir);
  }
  MAESTRO_ASSIGN_OR_RETURN(const bool resuming,
                           ShareResumeDecision(place_, comms_.world(), rank0_status, resumed.has_value()));
  RunnerOptions runner_options;
  runner_options.resuming = resuming;
  runner_options.device = TorchDevice(compute_);
  runner_options.precision = compute_.precision;
  if (TpSize() > 1) {
    tp_reducer_ = std::make_unique<GroupReducer>(comms_.group(plan::GroupKind::kTP));
    runner_options.tensor_parallel = tp_reducer_.get();
  }
  const auto& section = plan_.sections[static_cast<size_t>(section_)];
  if (CpSize() > 1) runner_options.context_parallel = &comms_.group(plan::GroupKind::kCP);
  if (section.config.pp > 1) {
    pipeline_ = std::make_unique<PipelineGroup>(comms_.group(plan::GroupKind::kPP), &blocked_seconds_);
    runner_options.pipeline = pipeline_.get();
  }
  if (section.config.ep > 1) {
    ep_exchange_ = std::make_unique<GroupExpertExchange>(comms_.group(plan::GroupKind::kEP));
    runner_options.expert_parallel = ep_exchange_.get();
  }
  const bool zero1 = OptimizerShardedOverDp(section);
  runner_options.build_optimizer = !zero1;
  memory_.MarkBaseline();  // libtorch, MPI, the plan, the data and (rank 0) the run's index: no model yet
  MAESTRO_ASSIGN_OR_RETURN(runner_, SectionRunner::Create(plan_, section_, runner_options));
  // A stage runs ahead of the program (1F1B) only when no upstream section
  // trains: that one may wait for our input gradients before its next
  // forward (runtime/parallel/pipeline_stages.h).
  pipeline_run_ahead_ = std::none_of(runner_->in_edges().begin(), runner_->in_edges().end(),
                                     [&](int e) { return EdgeProducerTrains(plan_, e); });
  if (zero1) {
    for (SectionRunner* mine : runner_->CheckpointedRunners()) {
      const auto& component = mine->section_plan();
      launcher::Backend* tp = TpSize() > 1 ? &comms_.group(plan::GroupKind::kTP) : nullptr;
      // Not stage 0's encoders in a pipelined fused section: they live on one stage.
      launcher::Backend* pp = mine->Staged() ? &comms_.group(plan::GroupKind::kPP) : nullptr;
      const std::string what = CpSize() > 1
                                   ? fmt::format("section '{}' dp {} cp {}", component.name, replica_, place_.coords.cp)
                                   : fmt::format("section '{}' dp {}", component.name, replica_);
      if (ep_exchange_) {  // the routed experts sharded over their expert-DP group
        MAESTRO_ASSIGN_OR_RETURN(
            auto shard, DistributedOptimizer::CreateWithExperts(
                            mine->Parameters(), mine->ParametersShardedOverTp(), mine->ParametersOfRoutedExperts(),
                            comms_.group(plan::GroupKind::kDPxCP), comms_.group(plan::GroupKind::kExpertDP),
                            comms_.group(plan::GroupKind::kEP), tp, component.optimizer, what, pp,
                            mine->ParametersCountedInNorm()));
        sharded_optimizers_.push_back(std::move(shard));
        continue;
      }
      MAESTRO_ASSIGN_OR_RETURN(
          auto shard, DistributedOptimizer::Create(mine->Parameters(), mine->ParametersShardedOverTp(),
                                                   comms_.group(plan::GroupKind::kDPxCP), tp, component.optimizer, what,
                                                   pp, mine->ParametersCountedInNorm()));
      sharded_optimizers_.push_back(std::move(shard));
    }
  }
  launcher::Backend& sync = comms_.group(plan::GroupKind::kDPxCP);
  if (runner_->trains() && sync.group().size() > 1) {  // docs/gradient_sync.md
    int64_t buckets = 0;
    std::string how = "all-reduce";
    if (zero1) {
      for (const auto& shard : sharded_optimizers_) buckets += shard->reduce_scatter_buckets();
      how = fmt::format("reduce-scatter + all-gather (ZeRO-1: AdamW sharded {} ways)", sync.group().size());
    } else {
      int64_t elements = 0;
      for (const auto& p : runner_->Parameters()) elements += p.numel();
      buckets = GradientBucketCount(elements, GradientBucketBytes());
    }
    Log(LogLevel::kInfo,
        "section '{}' tp {} cp {} dp {}: gradient sync over {} ranks (dp x cp): {}, {} bucket{} of at most {} bytes",
        section.name, place_.coords.tp, place_.coords.cp, place_.coords.dp, sync.group().size(), how, buckets,
        buckets == 1 ? "" : "s", GradientBucketBytes());
  }
  resumed_ = resuming;
  if (!resuming) return Status::Ok();
  return ShareResumedState(plan_, place_, comms_.world(), resumed, *runner_, Shards(), options_.run_dir);
}

Status RankLoop::Forward(int mb_index) {
  auto& state = states_[static_cast<size_t>(mb_index)];
  const std::vector<int64_t> ids = MicroBatchIds(mb_index);
  if (model_parallel_spool_) {
    const int64_t start_us = WallMicros();
    MAESTRO_ASSIGN_OR_RETURN(
        auto rows, ForwardRowsToCompute(mb_index, ids, rows_to_compute_[static_cast<size_t>(mb_index)], current_epoch_,
                                        spool_ ? &looked_[static_cast<size_t>(mb_index)] : nullptr));
    if (spool_) {
      MAESTRO_RETURN_IF_ERROR(edges_.SendRows(mb_index, ids, rows, runner_->out_edges()));
      looked_[static_cast<size_t>(mb_index)] = OutputSpool::Looked();  // the sends keep what they need
    }
    trace_.Add(fmt::format("F{}", mb_index), start_us, static_cast<int>(ids.size()),
               static_cast<int>(rows_to_compute_[static_cast<size_t>(mb_index)].size()));
    return Status::Ok();
  }
  MAESTRO_RETURN_IF_ERROR(edges_.ReceiveRows(mb_index, ids, runner_->in_edges(), runner_->trains(), &state.inputs));
  if (pipeline_ && !pipeline_->first()) {
    MAESTRO_RETURN_IF_ERROR(ReceiveFromPreviousStage(mb_index, static_cast<int64_t>(ids.size())));
  }

  const auto start = Clock::now();        // busy = compute, not the wait for inputs
  const int64_t start_us = WallMicros();  // so is the op in the trace
  MAESTRO_ASSIGN_OR_RETURN(state.data, LoadMicroBatch(*samples_, ids, datasets::Split::kTrain,
                                                      MediaPartsOf(plan_.sections[static_cast<size_t>(section_)])));
  int computed = -1;  // the trace's: -1, every sample (no spool)
  if (spool_) {
    const int64_t computed_before = spool_->computed();
    MicroBatchData computed_samples;
    MAESTRO_ASSIGN_OR_RETURN(
        state.out.rows, spool_->Rows(state.data, current_epoch_, *runner_, *samples_, &staging_, &computed_samples));
    CountWork(computed_samples);
    computed = static_cast<int>(spool_->computed() - computed_before);
  } else if (state.stage_input.defined()) {
    std::map<int, torch::Tensor> inputs = state.inputs;
    inputs[kPipelineInput] = state.stage_input;
    if (state.stage_teacher_input.defined()) inputs[kPipelineTeacherInput] = state.stage_teacher_input;
    MAESTRO_ASSIGN_OR_RETURN(state.out, runner_->Forward(state.data, inputs));
    CountWork(state.data);
  } else {
    MAESTRO_ASSIGN_OR_RETURN(state.out, runner_->Forward(state.data, state.inputs));
    CountWork(state.data);
  }
  loss_sum_ += state.out.loss_sum;
  loss_samples_ += state.out.loss_samples;
  answers_ += state.out.answers;
  answers_right_ += state.out.answers_right;
  busy_seconds_ += SecondsSince(start);

  if (pipeline_ && !pipeline_->last()) {
    MAESTRO_RETURN_IF_ERROR(SendToNextStage(mb_index));
  } else {
    MAESTRO_RETURN_IF_ERROR(edges_.SendRows(mb_index, ids, state.out.rows, runner_->out_edges()));
  }
  trace_.Add(fmt::format("F{}", mb_index), start_us, static_cast<int>(ids.size()), computed);
  return Status::Ok();
}

void RankLoop::CountWork(const MicroBatchData& data) {
  if (!CountsWork() || data.sample_ids.empty()) return;
  std::vector<SampleWorkItems> samples(data.sample_ids.size());
  size_t first_grid = 0;
  for (size_t b = 0; b < samples.size(); ++b) {
    samples[b].media = MediaOf(data, b);
    if (!data.image_grids.empty()) {  // native resolution: the sample's items' grids
      const auto count = static_cast<size_t>(samples[b].media.images);
      samples[b].grids.assign(data.image_grids.begin() + static_cast<std::ptrdiff_t>(first_grid),
                              data.image_grids.begin() + static_cast<std::ptrdiff_t>(first_grid + count));
      first_grid += count;
    }
    samples[b].real_tokens = RealTokensOf(*samples_, data.sample_ids[b], plan_.data.seq_len);
  }
  const std::vector<SectionWork> work = WorkOfSamples(plan_, section_, samples);
  work_.resize(work.size());
  for (size_t k = 0; k < work.size(); ++k) work_[k] += work[k];
}

Status RankLoop::Backward(int mb_index) {
  int64_t start_us = WallMicros();
  auto& state = states_[static_cast<size_t>(mb_index)];
  const std::vector<int64_t> ids = MicroBatchIds(mb_index);
  if (pipeline_ && !pipeline_->last()) {
    // The gradient of this stage's activation comes from the next stage.
    const auto& rows = state.out.rows;
    MAESTRO_ASSIGN_OR_RETURN(auto grad, pipeline_->ReceiveGradientFromBelow(mb_index, rows.sizes(), rows.device()));
    const auto start = Clock::now();
    start_us = WallMicros();
    // A MoE stage's own load-balancing loss joins the activation's gradient.
    if (state.out.loss.defined()) {
      torch::autograd::backward({rows, state.out.loss},
                                {grad.to(rows.scalar_type()), torch::ones_like(state.out.loss)});
    } else if (rows.requires_grad()) {
      torch::autograd::backward({rows}, {grad.to(rows.scalar_type())});
    }
    busy_seconds_ += SecondsSince(start);
  } else if (runner_->is_sink()) {
    const auto start = Clock::now();
    if (state.out.loss.defined()) state.out.loss.backward();
    busy_seconds_ += SecondsSince(start);
  } else {
    bool any = false;
    MAESTRO_ASSIGN_OR_RETURN(auto grad,
                             edges_.ReceiveGradients(mb_index, ids, state.out.rows, runner_->out_edges(), &any));
    const auto start = Clock::now();
    start_us = WallMicros();  // the trace shows compute, not the wait for gradients
    // EP: the backward runs the MoE exchanges even without a gradient.
    if (any || ep_exchange_) {
      torch::autograd::backward({state.out.rows}, {grad.defined() ? grad : torch::zeros_like(state.out.rows)});
    }
    busy_seconds_ += SecondsSince(start);
  }
  MAESTRO_RETURN_IF_ERROR(edges_.SendInputGradients(mb_index, ids, state.inputs));
  if (pipeline_ && !pipeline_->first()) {
    const auto& x = state.stage_input;
    MAESTRO_RETURN_IF_ERROR(pipeline_->SendGradientUp(mb_index, x.grad().defined() ? x.grad() : torch::zeros_like(x)));
  }
  state = MicroBatchState();  // frees the graph and activations
  trace_.Add(fmt::format("B{}", mb_index), start_us, static_cast<int>(ids.size()));
  return Status::Ok();
}

Status RankLoop::OptimizerStep(int64_t step) {
  runner_->EnsureGradients();
  MAESTRO_RETURN_IF_ERROR(SumTiedEmbeddingGradient());
  // The gradient sync spans DP x CP (docs/gradient_sync.md): CP ranks hold
  // the same parameters, each the gradient of its share of the sequence.
  if (!sharded_optimizers_.empty()) return ShardedOptimizerStep(step);
  if (ep_exchange_) {
    // Routed experts over the ranks holding the same experts, the rest over
    // DP (no CP: plan/runtime_support.h refuses CP with EP).
    std::vector<torch::Tensor> dense, routed;
    const std::vector<bool> is_routed = runner_->ParametersOfRoutedExperts();
    const std::vector<torch::Tensor> params = runner_->Parameters();
    for (size_t i = 0; i < params.size(); ++i) (is_routed[i] ? routed : dense).push_back(params[i]);
    MAESTRO_RETURN_IF_ERROR(AllReduceGradients(comms_.group(plan::GroupKind::kDP), dense, &blocked_seconds_));
    if (!routed.empty()) {
      MAESTRO_RETURN_IF_ERROR(AllReduceGradients(comms_.group(plan::GroupKind::kExpertDP), routed, &blocked_seconds_));
    }
  } else {
    MAESTRO_RETURN_IF_ERROR(
        AllReduceGradients(comms_.group(plan::GroupKind::kDPxCP), runner_->Parameters(), &blocked_seconds_));
  }
  // The trace's "O" is the optimizer's compute: the DP all-reduce above is
  // mostly the wait for the slowest replica, a barrier the simulator models
  // as such (scheduler/simulator.h), not a cost of the step.
  const int64_t start_us = WallMicros();
  const auto start = Clock::now();
  runner_->OptimizerStep(step);
  busy_seconds_ += SecondsSince(start);
  trace_.Add("O", start_us, 0);
  return Status::Ok();
}

// ZeRO-1: reduce-scatter (blocked), the shard's norm and AdamW (the trace's
// "O"; the norm's two scalar all-reduces count as blocked), all-gather
// (blocked).
Status RankLoop::ShardedOptimizerStep(int64_t step) {
  const std::vector<SectionRunner*> mine = runner_->CheckpointedRunners();
  for (size_t k = 0; k < sharded_optimizers_.size(); ++k) {
    DistributedOptimizer& shard = *sharded_optimizers_[k];
    MAESTRO_RETURN_IF_ERROR(shard.ReduceScatterGradients(&blocked_seconds_));
    const int64_t start_us = WallMicros();
    const auto start = Clock::now();
    const double blocked_before = blocked_seconds_;
    const auto& optimizer = mine[k]->section_plan().optimizer;
    MAESTRO_RETURN_IF_ERROR(
        shard.StepShard(LearningRate(optimizer, step, plan_.data.steps), &blocked_seconds_).status());
    busy_seconds_ += std::max(0.0, SecondsSince(start) - (blocked_seconds_ - blocked_before));
    trace_.Add("O", start_us, 0);
    MAESTRO_RETURN_IF_ERROR(shard.GatherParameters(&blocked_seconds_));
  }
  runner_->WeightsChanged();  // bf16 casts of the old weights are stale
  return Status::Ok();
}

Status RankLoop::RunStep(const StepBatch& batch) {
  if (Rank0() && MostRunAhead(plan_) > 0 && program_ != nullptr) {
    previous_step_ = current_step_;
    previous_problem_ = std::move(problem_);
    previous_schedule_ = std::move(schedule_);
    program_ = nullptr;
  }
  current_step_ = batch.step;
  // The spool serves committed rows only: a new epoch reads the last one's
  // (run-ahead commits at every step; checkpoints commit too).
  if (batch.epoch != current_epoch_) {
    // Every spool's file of the last epoch sealed, on every replica, before
    // any reads the new epoch's rows (output_spool.h).
    MAESTRO_RETURN_IF_ERROR(CommitSpools());
    if (spool_) MAESTRO_RETURN_IF_ERROR(spool_->BeginEpoch(batch.epoch));
    for (auto& [name, spool] : component_spools_) MAESTRO_RETURN_IF_ERROR(spool->BeginEpoch(batch.epoch));
    MAESTRO_RETURN_IF_ERROR(RefreshSpoolsTogether());
  }
  current_epoch_ = batch.epoch;
  if (fused_ != nullptr) fused_->SetEpoch(batch.epoch);
  trace_.set_step(batch.step);
  MAESTRO_ASSIGN_OR_RETURN(schedule_, ScheduleOfBatch(plan_, costs_, batch, &problem_));
  MAESTRO_ASSIGN_OR_RETURN(auto transfers, scheduler::ImpliedTransfers(problem_, schedule_));
  const int rank_index = schedule_.RankIndex(section_, replica_);
  if (rank_index < 0)
    return Status::Internal(fmt::format("the schedule has no program for section {} dp {}", section_, replica_));
  program_ = &schedule_.ranks[static_cast<size_t>(rank_index)];
  MAESTRO_RETURN_IF_ERROR(edges_.PlanStep(batch.step, std::move(transfers)));

  states_.assign(program_->micro_batches.size(), MicroBatchState());
  if (model_parallel_spool_) {
    std::vector<std::vector<int64_t>> micro_batches;
    for (size_t m = 0; m < program_->micro_batches.size(); ++m)
      micro_batches.push_back(MicroBatchIds(static_cast<int>(m)));
    MAESTRO_RETURN_IF_ERROR(ShareRowsToCompute(micro_batches, batch.epoch, &rows_to_compute_, &looked_));
  }
  std::vector<scheduler::Op> ops = OpsInStageOrder(*program_);
  // EP: the group's passes run together first; the optimizer op stays.
  if (ep_exchange_) MAESTRO_RETURN_IF_ERROR(RunExpertLockstep(&ops));
  for (const auto& op : ops) {
    switch (op.kind) {
      case scheduler::OpKind::kForward: MAESTRO_RETURN_IF_ERROR(Forward(op.micro_batch)); break;
      case scheduler::OpKind::kBackward: MAESTRO_RETURN_IF_ERROR(Backward(op.micro_batch)); break;
      case scheduler::OpKind::kOptimizer: MAESTRO_RETURN_IF_ERROR(OptimizerStep(batch.step)); break;
    }
  }
  // A training section that received no sample still steps (zero gradient).
  if (runner_->trains() && std::none_of(program_->ops.begin(), program_->ops.end(), [](const scheduler::Op& op) {
        return op.kind == scheduler::OpKind::kOptimizer;
      })) {
    MAESTRO_RETURN_IF_ERROR(OptimizerStep(batch.step));
  }
  if (pipeline_) MAESTRO_RETURN_IF_ERROR(pipeline_->Drain());
  MAESTRO_RETURN_IF_ERROR(ComputeAhead(&batch));
  return edges_.DrainSends();
}

// A fused section's frozen components keep spools where their expanded
// sections would (plan::KeepsSpool on the expanded plan;
// runtime/fused_section.h); none without reuse (TrainOptions::reuse_spools).
Status RankLoop::OpenComponentSpools() {
  fused_ = dynamic_cast<FusedSectionRunner*>(runner_.get());
  if (fused_ == nullptr || !ReusesSpools(plan_, options_)) return Status::Ok();
  const plan::Plan& expanded = fused_->expanded();
  for (const auto& component : plan_.sections[static_cast<size_t>(section_)].components) {
    const int k = expanded.section_index(component.name);
    if (k < 0 || !plan::KeepsSpool(expanded, k)) continue;
    // TP rank 0 of each replica writes; its TP peers read the same files
    // and agree with it on the rows to compute (FusedSectionRunner).
    MAESTRO_ASSIGN_OR_RETURN(auto spool, OutputSpool::Open(options_.run_dir, expanded, k, replica_,
                                                           /*reuse_sealed=*/true, place_.coords.tp == 0));
    fused_->UseSpool(k, spool.get());
    component_spools_.emplace_back(component.name, std::move(spool));
  }
  return Status::Ok();
}

// The ranks that keep a spool are one DP group per section (a
// model-parallel section's owners share their TP, CP and PP coordinates):
// once all have sealed (or recovered) their files, each indexes them all.
Status RankLoop::RefreshSpoolsTogether() {
  if (!spool_ && component_spools_.empty()) return Status::Ok();
  MAESTRO_RETURN_IF_ERROR(Wait(comms_.group(plan::GroupKind::kDP).Barrier()));
  // A fused component's TP peers read what the writers (TP rank 0 of every
  // replica, past the barrier above) sealed.
  if (!component_spools_.empty() && TpSize() > 1) {
    MAESTRO_RETURN_IF_ERROR(Wait(comms_.group(plan::GroupKind::kTP).Barrier()));
  }
  if (spool_) MAESTRO_RETURN_IF_ERROR(spool_->Refresh());
  for (auto& [name, spool] : component_spools_) MAESTRO_RETURN_IF_ERROR(spool->Refresh());
  return Status::Ok();
}

Status RankLoop::CommitSpools() {
  if (spool_) MAESTRO_RETURN_IF_ERROR(spool_->Commit());
  for (auto& [name, spool] : component_spools_) MAESTRO_RETURN_IF_ERROR(spool->Commit());
  return Status::Ok();
}

// The spool's rows and every training section's state after step `step`
// (runtime/checkpointing.h).
Status RankLoop::Checkpoint(int64_t step) {
  const int64_t start_us = WallMicros();
  const auto t0 = Clock::now();
  MAESTRO_RETURN_IF_ERROR(CommitSpools());
  MAESTRO_RETURN_IF_ERROR(WaitForCommit());  // a background one commits first
  MAESTRO_RETURN_IF_ERROR(
      WriteCheckpoint(plan_, place_, comms_.world(), *runner_, Shards(), run_.get(), options_.run_dir, step));
  trace_.Add("checkpoint", start_us, 0);
  last_checkpoint_ = Clock::now();
  const double seconds = SecondsSince(t0);
  if (Rank0()) reporter_.ReportCheckpoint(step, step, /*async=*/false, seconds, seconds);
  return Status::Ok();
}

// The step loop pays for the snapshot only; the write runs on.
Status RankLoop::StartBackgroundCheckpoint(int64_t step) {
  if (writing_) return Status::Internal("a background checkpoint started with another in flight");
  const int64_t start_us = WallMicros();
  const auto t0 = Clock::now();
  MAESTRO_ASSIGN_OR_RETURN(writing_, StartCheckpoint(plan_, place_, *runner_, Shards(), options_.run_dir, step));
  writing_snapshot_seconds_ = SecondsSince(t0);
  trace_.Add("checkpoint_snapshot", start_us, 0);
  last_checkpoint_ = Clock::now();
  return Status::Ok();
}

Status RankLoop::FinishBackgroundCheckpoint(int64_t after_step) {
  const int64_t start_us = WallMicros();
  const auto t0 = Clock::now();
  // The spool's rows so far are durable before rank 0 commits (as in Checkpoint).
  MAESTRO_RETURN_IF_ERROR(CommitSpools());
  std::unique_ptr<BackgroundRankWrite> write = std::move(writing_);
  MAESTRO_RETURN_IF_ERROR(WaitForCommit());  // commits go in step order
  MAESTRO_ASSIGN_OR_RETURN(committing_, FinishCheckpoint(plan_, place_, comms_.world(), *write, run_.get()));
  trace_.Add("checkpoint_commit", start_us, 0);
  if (Rank0()) {
    reporter_.ReportCheckpoint(write->step(), after_step, /*async=*/true, writing_snapshot_seconds_ + SecondsSince(t0),
                               write->write_seconds(), writing_snapshot_seconds_);
  }
  return Status::Ok();
}

Status RankLoop::WaitForCommit() {
  if (!committing_) return Status::Ok();
  std::unique_ptr<BackgroundCommit> commit = std::move(committing_);
  return commit->Wait();
}

Status RankLoop::FinishStep(const StepBatch& batch, Clock::time_point step_start, StepEnd* end) {
  RankStepStats mine;
  mine.counts_loss = place_.coords.tp == 0;  // every TP rank computes the same loss: count it once
  mine.loss_sum = loss_sum_;
  mine.loss_samples = loss_samples_;
  mine.answers = answers_;
  mine.answers_right = answers_right_;
  mine.stop_requested = signal_->requested();
  mine.checkpoint_writing = writing_ != nullptr && !writing_->done();
  mine.checkpoint_due =
      Rank0() && plan_.checkpoint_minutes > 0 && SecondsSince(last_checkpoint_) >= 60.0 * plan_.checkpoint_minutes;
  mine.busy_seconds = busy_seconds_;
  // Framework time: neither compute nor blocked on a peer (data loading,
  // scheduling, bookkeeping), up to the end of this rank's last op.
  mine.framework_seconds = std::max(0.0, SecondsSince(step_start) - busy_seconds_ - blocked_seconds_);
  mine.work = std::move(work_);
  work_.clear();
  MAESTRO_ASSIGN_OR_RETURN(auto totals, SumStepStats(comms_.world(), plan_, section_, mine));
  const double step_seconds = SecondsSince(step_start);  // every rank's work of the step is in
  loss_sum_ = 0;
  loss_samples_ = answers_ = answers_right_ = 0;
  busy_seconds_ = 0;
  blocked_seconds_ = 0;
  end->stop = totals.stop;
  end->checkpoint_due = totals.checkpoint_due;
  end->checkpoint_writing = totals.checkpoint_writing;
  last_loss_ = totals.MeanLoss();
  if (!Rank0()) return Status::Ok();
  MAESTRO_RETURN_IF_ERROR(run_->StepDone({batch.step, batch.ids, scheduler::ScheduleToJson(schedule_)}));
  reporter_.Report(batch.step, batch.epoch, batch.ids.size(), last_loss_, totals, step_seconds);
  return Status::Ok();
}

// Rank 0 evaluates the last checkpoint (the loop writes one at its last step).
Status RankLoop::EvaluateCaptionsAtEnd(TrainSummary* summary) {
  const auto t0 = Clock::now();
  MAESTRO_ASSIGN_OR_RETURN(summary->caption_accuracy,
                           EvaluateRunCaptions(plan_, options_.run_dir, options_.eval_samples, compute_));
  std::fprintf(stderr, "caption accuracy on the Fashion-MNIST test split: %.2f%% (%.1f s)\n",
               100.0 * summary->caption_accuracy, SecondsSince(t0));
  reporter_.ReportEval("caption_accuracy", summary->caption_accuracy);
  return Status::Ok();
}

// Rank 0: the sink decoder's loss on the held-out split ([data]
// test_corpus, or the demo text's held-out chunks: EvaluatesHeldOut), from
// the last checkpoint; <run_dir>/eval.json.
Status RankLoop::EvaluateHeldOutAtEnd(TrainSummary* summary) {
  const auto t0 = Clock::now();
  MAESTRO_ASSIGN_OR_RETURN(auto result, EvaluateRunHeldOut(plan_, options_.run_dir, options_.eval_samples, compute_));
  summary->heldout_loss = result.loss;
  std::printf("%s\n", HeldOutLine(result).c_str());
  std::fflush(stdout);
  Log(LogLevel::kInfo, "held-out loss of section '{}' on {} in {:.1f} s; {}/eval.json", result.section,
      HeldOutSplitName(plan_), SecondsSince(t0), options_.run_dir);
  reporter_.ReportEval("heldout_loss", result.loss);
  return Status::Ok();
}

// Each spool's hits and rows computed over the start, and the run-ahead's
// figures (tests and docs read these lines).
void RankLoop::LogSpoolCounts() const {
  for (const auto& [name, spool] : component_spools_) {
    // A TP peer's line names it: it reads the writer's rows and computes with it.
    const std::string peer = place_.coords.tp == 0 ? "" : fmt::format(" tp {}", place_.coords.tp);
    Log(LogLevel::kInfo, "section '{}' dp {}{}: component '{}': spool hits {}, computed {}",
        plan_.sections[static_cast<size_t>(section_)].name, replica_, peer, name, spool->hits(), spool->computed());
  }
  if (spool_) {
    Log(LogLevel::kInfo, "section '{}' dp {}: spool hits {}, computed {}",
        plan_.sections[static_cast<size_t>(section_)].name, replica_, spool_->hits(), spool_->computed());
    if (run_ahead_) {
      Log(LogLevel::kInfo,
          "section '{}' dp {}: ran ahead by {} batch(es): {} step(s) computed ahead, at most {} rows "
          "ahead (bound {})",
          plan_.sections[static_cast<size_t>(section_)].name, replica_, run_ahead_->batches(),
          run_ahead_->steps_computed_ahead(), run_ahead_->most_rows_ahead(), run_ahead_->bound_rows());
    }
  }
}

StatusOr<TrainSummary> RankLoop::Run() {
  MAESTRO_RETURN_IF_ERROR(Setup());
  MAESTRO_ASSIGN_OR_RETURN(const bool stopped_in_pass, RunOfflineSpoolPass());
  TrainSummary summary;
  summary.preempted = stopped_in_pass;
  bool first = true;
  int64_t steps_this_start = 0;
  while (!stopped_in_pass) {
    const auto t0 = Clock::now();
    MAESTRO_ASSIGN_OR_RETURN(
        auto batch, ShareNextBatch(comms_.world(), Rank0() ? run_.get() : nullptr, total_steps_, modality_names_,
                                   &blocked_seconds_, MostRunAhead(plan_), &ahead_));
    if (batch.step < 0) break;  // done
    if (first) {
      summary.first_step = batch.step;
      first = false;
    }
    MAESTRO_RETURN_IF_ERROR(RunStep(batch));
    memory_.MarkStepEnd();
    StepEnd end;
    MAESTRO_RETURN_IF_ERROR(FinishStep(batch, t0, &end));
    ++steps_this_start;
    ++summary.steps_done;
    bool stop = end.stop;
    if (options_.stop_after_steps >= 0 && steps_this_start >= options_.stop_after_steps) stop = true;
    const bool last = batch.step + 1 >= total_steps_;
    const bool due =
        end.checkpoint_due || (plan_.checkpoint_every > 0 && (batch.step + 1) % plan_.checkpoint_every == 0);
    // A background write is committed once every rank's file is durable;
    // a new checkpoint, a stop or the end wait for it first (every rank
    // decides alike: FinishStep's sum).
    if (writing_ && (!end.checkpoint_writing || stop || last || due)) {
      MAESTRO_RETURN_IF_ERROR(FinishBackgroundCheckpoint(batch.step));
    }
    if (stop || last) {
      // The stream's micro-batches a pipelined replica carries into the next
      // step are computed now when the run ends here (every rank of the
      // replica decided alike: FinishStep's sum), so a resume finds them.
      MAESTRO_RETURN_IF_ERROR(ComputeAhead(nullptr));
      MAESTRO_RETURN_IF_ERROR(Checkpoint(batch.step));
      memory_.MarkCheckpointEnd();
    } else if (due && plan_.checkpoint_async) {
      MAESTRO_RETURN_IF_ERROR(StartBackgroundCheckpoint(batch.step));
    } else if (due) {
      MAESTRO_RETURN_IF_ERROR(Checkpoint(batch.step));
      memory_.MarkCheckpointEnd();
    }
    if (stop && !last) {
      summary.preempted = true;
      if (Rank0()) {
        std::fprintf(stderr, "maestro: stopped after step %lld (checkpoint written); run again to resume\n",
                     static_cast<long long>(batch.step));
      }
      break;
    }
  }
  // Every path out of the loop commits a background write first; should one
  // remain, it is committed (every rank holds one alike) rather than lost.
  if (writing_) MAESTRO_RETURN_IF_ERROR(FinishBackgroundCheckpoint(writing_->step()));
  MAESTRO_RETURN_IF_ERROR(WaitForCommit());
  // Zero steps asked of a fresh run: its initial weights, for `maestro export`.
  if (total_steps_ == 0 && !resumed_) {
    MAESTRO_RETURN_IF_ERROR(WriteInitialWeights(plan_, place_, comms_.world(), *runner_, Shards(), options_.run_dir));
    if (Rank0()) {
      std::fprintf(stderr, "maestro: zero steps: initial weights written to %s\n",
                   InitialWeightsDir(options_.run_dir).c_str());
    }
  }
  summary.final_loss = last_loss_;
  // Every rank's memory, before the evaluation builds models of its own.
  MAESTRO_ASSIGN_OR_RETURN(auto memory,
                           GatherRankMemory(comms_.world(), plan_.world_size(), place_.world_rank, memory_.Result()));
  if (Rank0()) reporter_.ReportMemory(memory);
  MAESTRO_ASSIGN_OR_RETURN(
      auto events, WriteTrace(comms_.world(), plan_, section_, place_.world_rank, options_.run_dir, trace_.events()));
  if (Rank0()) {
    // Under run-ahead the step before the last is the steady state: it
    // computes the next batch's rows ahead; the last computes none. (The
    // first step of a start computes its own rows and the next ones, so
    // that step is drawn only when no other ran before the last.)
    const bool steady = previous_step_ >= 0 && steps_this_start >= 3;
    MAESTRO_RETURN_IF_ERROR(WriteTimelines(plan_, steady ? previous_problem_ : problem_,
                                           steady ? previous_schedule_ : schedule_,
                                           steady ? previous_step_ : current_step_, events, options_.run_dir));
  }
  if (CpSize() > 1) {
    const ContextParallelTokenCounts& counts = ContextParallelTokensOfThisProcess();
    Log(LogLevel::kInfo, "section '{}' tp {} cp {} dp {}: context parallel: held {} of {} tokens (+{} padding)",
        plan_.sections[static_cast<size_t>(section_)].name, place_.coords.tp, place_.coords.cp, replica_, counts.mine,
        counts.total, counts.padding);
  }
  if (run_ahead_ && pipeline_) {
    Log(LogLevel::kInfo,
        "section '{}' dp {} stage {}: carried {} micro-batch(es) across step boundaries (run-ahead stream)",
        plan_.sections[static_cast<size_t>(section_)].name, replica_, pipeline_->stage(),
        run_ahead_->carried_micro_batches());
  }
  LogSpoolCounts();
  if (!summary.preempted && options_.evaluate && Rank0() && run_->next_step() > 0 && samples_->HasCaptionAnswers()) {
    MAESTRO_RETURN_IF_ERROR(EvaluateCaptionsAtEnd(&summary));
  }
  if (!summary.preempted && options_.evaluate && Rank0() && run_->next_step() > 0 && EvaluatesHeldOut(plan_)) {
    MAESTRO_RETURN_IF_ERROR(EvaluateHeldOutAtEnd(&summary));
  }
  return summary;
}

}  // namespace executor_internal

int ThreadsPerRank() {
  if (const char* v = std::getenv("MAESTRO_THREADS_PER_RANK")) {
    const int n = std::atoi(v);
    if (n > 0) return n;
  }
  int local = 1;
  for (const char* key : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (const char* v = std::getenv(key)) {
      local = std::max(1, std::atoi(v));
      break;
    }
  }
  const int cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  return std::max(1, cores / local);
}

namespace {

// This rank's device and precision (device_choice.h), made current.
StatusOr<ComputePlacement> ChooseRankCompute(const plan::Plan& plan, const launcher::RankPlace& place,
                                             const TrainOptions& options) {
  const auto& section = plan.sections[static_cast<size_t>(place.coords.section)];
  ComputeFacts facts;
  facts.gpus_per_task = section.placement.gpus_per_task;
  facts.local_gpu = place.local_gpu;
  facts.local_rank = place.local_rank;
  facts.cuda_devices = CudaDeviceCount();
  MAESTRO_ASSIGN_OR_RETURN(auto compute, ChooseCompute(options.device, options.precision, facts));
  UseDevice(compute);
  // Said when it is not the CPU default (fp32), warned when a GPU plan falls back.
  const LogLevel level = !compute.note.empty()                                     ? LogLevel::kWarn
                         : compute.cuda() || compute.precision != Precision::kFp32 ? LogLevel::kInfo
                                                                                   : LogLevel::kDebug;
  Log(level, "rank {} (section '{}'): computes on {}{}{}", place.world_rank, section.name, compute.ToString(),
      compute.note.empty() ? "" : ": ", compute.note);
  return compute;
}

}  // namespace

StatusOr<TrainSummary> RunTraining(const plan::Plan& plan, const launcher::RankPlace& place,
                                   launcher::Communicators& comms, const TrainOptions& options) {
  try {
    MAESTRO_ASSIGN_OR_RETURN(const auto compute, ChooseRankCompute(plan, place, options));
    executor_internal::RankLoop loop(plan, place, comms, options, compute);
    return loop.Run();
  } catch (const c10::Error& e) {
    return Status::Internal(fmt::format("rank {}: torch: {}", place.world_rank, e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Status::Internal(fmt::format("rank {}: {}", place.world_rank, e.what()));
  }
}

}  // namespace maestro::runtime
