// SPDX-License-Identifier: Apache-2.0
// RankLoop's run-ahead members (runtime/rank_loop.h): a forward-only section
// computes the rows of the batches after the one in flight into its spool
// (runtime/run_ahead.h); a model-parallel replica's ranks agree on the rows
// to compute (ShareRowsToCompute) and its pipeline stages stream across
// steps (docs/run_ahead.md).
#include "runtime/rank_loop.h"

namespace maestro::runtime::executor_internal {

// Each item is an op of the trace, A<index>, with the rows it computed.
Status RankLoop::ComputeAheadItem(const AheadItem& item, bool input_received) {
  const int64_t start_us = WallMicros();
  const int samples = static_cast<int>(item.sample_ids.size());
  if (!model_parallel_spool_) {
    MicroBatchData data;
    data.sample_ids = item.sample_ids;  // the spool loads the payloads of the rows it lacks
    const int64_t computed_before = spool_->computed();
    MicroBatchData computed_samples;
    MAESTRO_RETURN_IF_ERROR(spool_->Rows(data, item.epoch, *runner_, *samples_, &staging_, &computed_samples).status());
    CountWork(computed_samples);
    trace_.Add(fmt::format("A{}", item.index), start_us, samples,
               static_cast<int>(spool_->computed() - computed_before));
    return Status::Ok();
  }
  std::optional<OutputSpool::Looked> looked;
  if (spool_) {
    // The owner: only the rows to compute are filled and spooled; the
    // others are in the spool already and are not read here.
    looked.emplace();
    looked->missing = item.positions;
    std::vector<int64_t> shape{static_cast<int64_t>(item.sample_ids.size())};
    const auto row = runner_->OutputRowShape();
    shape.insert(shape.end(), row.begin(), row.end());
    looked->rows = torch::empty(shape, torch::kFloat32);
  }
  torch::Tensor received;
  if (input_received) {
    const auto it = held_stage_inputs_.find(item.seq);
    if (it != held_stage_inputs_.end()) {
      received = std::move(it->second);
      held_stage_inputs_.erase(it);
    } else if (!item.positions.empty() && pipeline_ && !pipeline_->first()) {
      return Status::Internal(fmt::format("run-ahead: stage {} holds no input for micro-batch {} of step {}",
                                          pipeline_->stage(), item.index, item.step));
    }
  }
  MAESTRO_RETURN_IF_ERROR(ForwardRowsToCompute(item.index, item.sample_ids, item.positions, item.epoch,
                                               looked ? &*looked : nullptr, received)
                              .status());
  trace_.Add(fmt::format("A{}", item.index), start_us, samples, static_cast<int>(item.positions.size()));
  return Status::Ok();
}

// A later stage's input of `item` from the previous stage, held until the
// next run-ahead computes it (runtime/run_ahead.h: no send crosses a step).
Status RankLoop::ReceiveAheadInput(const AheadItem& item) {
  if (item.positions.empty() || !pipeline_ || pipeline_->first()) return Status::Ok();
  MAESTRO_ASSIGN_OR_RETURN(held_stage_inputs_[item.seq],
                           ReceiveFrozenStageInput(item.index, static_cast<int64_t>(item.positions.size())));
  return Status::Ok();
}

StatusOr<torch::Tensor> RankLoop::ReceiveFrozenStageInput(int mb, int64_t samples) {
  const auto& s = plan_.sections[static_cast<size_t>(section_)];
  return pipeline_->ReceiveFromAbove(mb, PipelineGroup::Part::kActivation,
                                     {samples, plan_.data.seq_len, s.model.hidden}, TorchDevice(compute_));
}

// Run-ahead (runtime/run_ahead.h): the rows of the next batches into the
// spool, while this step's sends are in flight and the training sections
// finish the step. `batch` null: the run stops after this step, and every
// micro-batch appended is computed (a pipelined replica's stages otherwise
// carry the stream's last ones into the next step).
Status RankLoop::ComputeAhead(const StepBatch* batch) {
  if (!run_ahead_) return Status::Ok();
  const auto start = Clock::now();
  // Never past the epoch's end: the next epoch's rows are other replicas'
  // (in files sealed only at the epoch change: computed again here) or, with
  // no reuse, never read back (the epoch change seals this file). Its first
  // step reads or computes its own rows, as a start's first step does.
  std::vector<StepBatch> ahead;
  if (batch != nullptr) {
    for (const StepBatch& b : ahead_) {
      if (b.epoch == batch->epoch) ahead.push_back(b);
    }
  }
  const auto compute = [&](const AheadItem& item, bool received) { return ComputeAheadItem(item, received); };
  const auto between = [&] { edges_.PollSends(); };
  if (batch == nullptr) {
    MAESTRO_RETURN_IF_ERROR(run_ahead_->Flush(compute, between));
  } else if (model_parallel_spool_) {
    // Every rank of the replica computes the rows the owner's spool lacks.
    const auto share = [&](const std::vector<std::vector<int64_t>>& micro_batches,
                           int64_t epoch) -> StatusOr<std::vector<std::vector<int64_t>>> {
      std::vector<std::vector<int64_t>> positions;
      MAESTRO_RETURN_IF_ERROR(ShareRowsToCompute(micro_batches, epoch, &positions, nullptr));
      return positions;
    };
    const auto receive = [&](const AheadItem& item) { return ReceiveAheadInput(item); };
    MAESTRO_RETURN_IF_ERROR(run_ahead_->ComputeAhead(batch->step, ahead, compute, between, share, receive));
  } else {
    MAESTRO_RETURN_IF_ERROR(run_ahead_->ComputeAhead(batch->step, ahead, compute, between));
  }
  // The trace's "ahead" op: what follows the items (their A ops; the trace's
  // ops never nest).
  const int64_t start_us = WallMicros();
  if (pipeline_) MAESTRO_RETURN_IF_ERROR(pipeline_->Drain());
  // The spool serves committed rows only: commit (at this step boundary, a
  // no-op when every row was there) so the next step reads them back, and
  // a kill loses none of them.
  if (spool_) MAESTRO_RETURN_IF_ERROR(spool_->Commit());
  busy_seconds_ += SecondsSince(start);
  trace_.Add("ahead", start_us, 0);
  return Status::Ok();
}

// Owner: which rows the spool lacks; then the CP group of the TP rank 0s
// (CP rank 0 is the owner's), the last stage's TP group, then each PP group
// from the last stage (docs/run_ahead.md). The broadcasts wait with the
// groups' timeouts.
Status RankLoop::ShareRowsToCompute(const std::vector<std::vector<int64_t>>& micro_batches, int64_t epoch,
                                    std::vector<std::vector<int64_t>>* positions,
                                    std::vector<OutputSpool::Looked>* looked) {
  positions->clear();
  if (looked != nullptr) looked->clear();
  if (spool_) {
    const auto row = runner_->OutputRowShape();
    for (const auto& ids : micro_batches) {
      MAESTRO_ASSIGN_OR_RETURN(auto found, spool_->Lookup(ids, epoch, row, &staging_));
      positions->push_back(found.missing);
      if (looked != nullptr) looked->push_back(std::move(found));
    }
  }
  std::vector<int64_t> wire = PackRowsToCompute(*positions);
  // A group's broadcast on its backend's device (fp64 carries these small integers exactly).
  const auto broadcast = [&](launcher::Backend& group, int root) -> Status {
    if (group.device() == launcher::Device::kCpu) {
      int64_t n = static_cast<int64_t>(wire.size());
      MAESTRO_RETURN_IF_ERROR(
          TimedWait(group.Broadcast(launcher::Buffer{&n, 1, launcher::DType::kI64, launcher::Device::kCpu}, root),
                    &blocked_seconds_));
      wire.resize(static_cast<size_t>(n));
      if (n == 0) return Status::Ok();
      return TimedWait(group.Broadcast(launcher::CpuBuffer(wire), root), &blocked_seconds_);
    }
    auto n = torch::tensor({static_cast<double>(wire.size())}, torch::kFloat64).to(TorchDevice(compute_));
    MAESTRO_RETURN_IF_ERROR(TimedWait(
        group.Broadcast(launcher::Buffer{n.data_ptr(), 1, launcher::DType::kF64, launcher::Device::kCuda}, root),
        &blocked_seconds_));
    std::vector<double> host(wire.begin(), wire.end());
    host.resize(static_cast<size_t>(n.cpu().item<double>()));
    auto values = torch::tensor(host, torch::kFloat64).to(TorchDevice(compute_));
    if (!host.empty()) {
      MAESTRO_RETURN_IF_ERROR(TimedWait(
          group.Broadcast(
              launcher::Buffer{values.data_ptr(), host.size(), launcher::DType::kF64, launcher::Device::kCuda}, root),
          &blocked_seconds_));
    }
    auto back = values.cpu();
    wire.assign(back.data_ptr<double>(), back.data_ptr<double>() + back.numel());
    return Status::Ok();
  };
  const bool last_stage = !pipeline_ || pipeline_->last();
  if (CpSize() > 1 && place_.coords.tp == 0) MAESTRO_RETURN_IF_ERROR(broadcast(comms_.group(plan::GroupKind::kCP), 0));
  if (TpSize() > 1 && last_stage) MAESTRO_RETURN_IF_ERROR(broadcast(comms_.group(plan::GroupKind::kTP), 0));
  if (pipeline_) MAESTRO_RETURN_IF_ERROR(broadcast(comms_.group(plan::GroupKind::kPP), pipeline_->stages() - 1));
  MAESTRO_ASSIGN_OR_RETURN(*positions, UnpackRowsToCompute(wire));
  if (positions->size() != micro_batches.size()) {
    return Status::Internal(fmt::format("section '{}': the rows to compute cover {} micro-batches, the step has {}",
                                        plan_.sections[static_cast<size_t>(section_)].name, positions->size(),
                                        micro_batches.size()));
  }
  return Status::Ok();
}

StatusOr<torch::Tensor> RankLoop::ForwardRowsToCompute(int mb, const std::vector<int64_t>& ids,
                                                       const std::vector<int64_t>& positions, int64_t epoch,
                                                       OutputSpool::Looked* looked, const torch::Tensor& received) {
  std::vector<int64_t> sub;
  for (int64_t p : positions) sub.push_back(ids.at(static_cast<size_t>(p)));
  torch::Tensor computed;
  if (!sub.empty()) {
    std::map<int, torch::Tensor> inputs;  // a frozen section's spooled rows need none but the previous stage's
    if (received.defined()) {
      inputs[kPipelineInput] = received;
    } else if (pipeline_ && !pipeline_->first()) {
      MAESTRO_ASSIGN_OR_RETURN(inputs[kPipelineInput], ReceiveFrozenStageInput(mb, static_cast<int64_t>(sub.size())));
    }
    const auto start = Clock::now();
    MAESTRO_ASSIGN_OR_RETURN(auto data, LoadMicroBatch(*samples_, sub, datasets::Split::kTrain,
                                                       MediaPartsOf(plan_.sections[static_cast<size_t>(section_)])));
    MAESTRO_ASSIGN_OR_RETURN(auto out, runner_->Forward(data, inputs));
    busy_seconds_ += SecondsSince(start);
    CountWork(data);
    computed = out.rows;
    if (pipeline_ && !pipeline_->last()) {
      MAESTRO_RETURN_IF_ERROR(pipeline_->SendDown(mb, PipelineGroup::Part::kActivation, computed.detach()));
    }
  }
  if (looked == nullptr) return torch::Tensor();
  MAESTRO_RETURN_IF_ERROR(spool_->Fill(*looked, ids, epoch, computed, &staging_));
  return looked->rows;
}

}  // namespace maestro::runtime::executor_internal
