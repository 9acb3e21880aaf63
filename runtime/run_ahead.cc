// SPDX-License-Identifier: Apache-2.0
#include "runtime/run_ahead.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/checks.h"

namespace maestro::runtime {

int MostRunAhead(const plan::Plan& plan) {
  int most = 0;
  for (const auto& s : plan.sections) most = std::max(most, s.run_ahead);
  return most;
}

std::vector<int64_t> PackRowsToCompute(const std::vector<std::vector<int64_t>>& positions) {
  std::vector<int64_t> wire{static_cast<int64_t>(positions.size())};
  for (const auto& p : positions) {
    wire.push_back(static_cast<int64_t>(p.size()));
    wire.insert(wire.end(), p.begin(), p.end());
  }
  return wire;
}

StatusOr<std::vector<std::vector<int64_t>>> UnpackRowsToCompute(const std::vector<int64_t>& wire) {
  size_t at = 0;
  const auto next = [&]() -> StatusOr<int64_t> {
    if (at >= wire.size()) return Status::Internal("run-ahead: the shared set of rows to compute is truncated");
    return wire[at++];
  };
  std::vector<std::vector<int64_t>> positions;
  MAESTRO_ASSIGN_OR_RETURN(const int64_t micro_batches, next());
  for (int64_t m = 0; m < micro_batches; ++m) {
    MAESTRO_ASSIGN_OR_RETURN(const int64_t n, next());
    std::vector<int64_t> p;
    for (int64_t i = 0; i < n; ++i) {
      MAESTRO_ASSIGN_OR_RETURN(const int64_t pos, next());
      p.push_back(pos);
    }
    positions.push_back(std::move(p));
  }
  if (at != wire.size()) return Status::Internal("run-ahead: the shared set of rows to compute has trailing values");
  return positions;
}

RunAhead::RunAhead(const plan::Plan& plan, int section, int replica,
                   std::shared_ptr<const scheduler::SectionCostModel> costs, int stage, int stages)
    : plan_(plan),
      section_(section),
      replica_(replica),
      batches_(plan.sections[static_cast<size_t>(section)].run_ahead),
      costs_(std::move(costs)),
      stage_(stage),
      stages_(std::max(stages, 1)),
      bound_rows_(static_cast<int64_t>(batches_) * plan.data.global_batch) {}

int64_t RunAhead::rows_ahead() const {
  int64_t rows = 0;
  for (const auto& [step, n] : rows_by_step_) rows += n;
  return rows;
}

Status RunAhead::ComputeThrough(int64_t end_seq, const ComputeRows& compute, const std::function<void()>& between) {
  while (!pending_.empty() && pending_.front().seq < end_seq) {
    const AheadItem item = std::move(pending_.front());
    pending_.pop_front();
    MAESTRO_RETURN_IF_ERROR(compute(item, item.seq < received_end_));
    computed_end_ = item.seq + 1;
    received_end_ = std::max(received_end_, computed_end_);
    if (between) between();
  }
  return Status::Ok();
}

Status RunAhead::ComputeAhead(int64_t step, const std::vector<StepBatch>& ahead, const ComputeRows& compute,
                              const std::function<void()>& between, const BeforeStep& before_step,
                              const ReceiveInput& receive) {
  // The step in flight and those before it are no longer ahead.
  rows_by_step_.erase(rows_by_step_.begin(), rows_by_step_.upper_bound(step));
  step_begin_.erase(step_begin_.begin(), step_begin_.upper_bound(step));
  for (const StepBatch& batch : ahead) {
    if (batch.step <= step || batch.step > step + batches_) {
      return Status::Internal(
          fmt::format("run-ahead: step {} is not among the {} after step {}", batch.step, batches_, step));
    }
    if (batch.step <= last_step_ahead_) continue;  // appended during an earlier step
    scheduler::Problem problem;
    MAESTRO_ASSIGN_OR_RETURN(const auto schedule, ScheduleOfBatch(plan_, costs_, batch, &problem));
    const int rank_index = schedule.RankIndex(section_, replica_);
    if (rank_index < 0) {
      return Status::Internal(
          fmt::format("the schedule of step {} has no program for section {} dp {}", batch.step, section_, replica_));
    }
    const scheduler::RankProgram& program = schedule.ranks[static_cast<size_t>(rank_index)];
    std::vector<std::vector<int64_t>> micro_batches;
    for (const scheduler::Op& op : program.ops) {
      if (op.kind != scheduler::OpKind::kForward) continue;
      const auto& ids = program.micro_batches[static_cast<size_t>(op.micro_batch)].sample_ids;
      micro_batches.emplace_back(ids.begin(), ids.end());
    }
    std::vector<std::vector<int64_t>> positions;
    if (before_step) {
      MAESTRO_ASSIGN_OR_RETURN(positions, before_step(micro_batches, batch.epoch));
      if (positions.size() != micro_batches.size()) {
        return Status::Internal(fmt::format("run-ahead: step {} has {} micro-batches but {} sets of rows to compute",
                                            batch.step, micro_batches.size(), positions.size()));
      }
    }
    int64_t rows = 0;
    step_begin_[batch.step] = next_seq_;
    for (size_t m = 0; m < micro_batches.size(); ++m) {
      AheadItem item;
      item.seq = next_seq_++;
      item.step = batch.step;
      item.index = static_cast<int>(m);
      item.epoch = batch.epoch;
      item.sample_ids = std::move(micro_batches[m]);
      if (before_step) {
        item.positions = std::move(positions[m]);
      } else {
        for (size_t p = 0; p < item.sample_ids.size(); ++p) item.positions.push_back(static_cast<int64_t>(p));
      }
      rows += static_cast<int64_t>(item.sample_ids.size());
      pending_.push_back(std::move(item));
    }
    rows_by_step_[batch.step] = rows;
    last_step_ahead_ = batch.step;
    ++steps_computed_;
    most_rows_ahead_ = std::max(most_rows_ahead_, rows_ahead());
    if (most_rows_ahead_ > bound_rows_) {
      return Status::Internal(fmt::format("run-ahead holds {} rows ahead, more than its bound of {} ({} batches)",
                                          most_rows_ahead_, bound_rows_, batches_));
    }
  }
  // How far each stage computes (the class comment): the lag of stage j is
  // min(j, L), L the micro-batches after step+1's last (at most P - 1).
  const int64_t end = next_seq_;
  // The first seq of a step after step+1 (every micro-batch before it is due by the next step).
  const auto later = step_begin_.upper_bound(step + 1);
  const int64_t due = later == step_begin_.end() ? end : later->second;
  const int64_t lag_limit = std::min<int64_t>(stages_ - 1, end - due);
  const auto lag_of = [&](int stage) { return std::min<int64_t>(stage, lag_limit); };
  MAESTRO_RETURN_IF_ERROR(ComputeThrough(end - lag_of(stage_), compute, between));
  if (stage_ > 0) {
    // The inputs the previous stage sent during this call and this stage
    // computes in the next one: received now, so no send stays in flight.
    const int64_t previous_end = end - lag_of(stage_ - 1);
    for (const AheadItem& item : pending_) {
      if (item.seq >= previous_end) break;
      if (item.seq < received_end_) continue;
      if (!receive) return Status::Internal("run-ahead: a pipeline stage without a way to receive its inputs");
      MAESTRO_RETURN_IF_ERROR(receive(item));
      received_end_ = item.seq + 1;
    }
  }
  carried_ += static_cast<int64_t>(pending_.size());
  if (stage_ == stages_ - 1 && !pending_.empty() && pending_.front().step <= step + 1) {
    return Status::Internal(
        fmt::format("run-ahead: step {}'s rows are not all computed after step {}", pending_.front().step, step));
  }
  return Status::Ok();
}

Status RunAhead::Flush(const ComputeRows& compute, const std::function<void()>& between) {
  return ComputeThrough(next_seq_, compute, between);
}

}  // namespace maestro::runtime
