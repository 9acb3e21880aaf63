// SPDX-License-Identifier: Apache-2.0
#include "runtime/run_ahead.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/checks.h"

namespace maestro::runtime {

Status CheckRunAheadRuns(const plan::Plan& plan) {
  for (const auto& s : plan.sections) {
    if (s.run_ahead <= 0) continue;
    const bool feeds =
        std::any_of(plan.edges.begin(), plan.edges.end(), [&](const plan::EdgePlan& e) { return e.from == s.name; });
    std::string why;
    if (s.mode != plan::SectionMode::kForward || s.fused()) {
      why = "only a forward-only section that is not fused runs ahead";
    } else if (!feeds) {
      why = "it feeds no other section: nothing waits for its rows";
    } else if (s.config.ep > 1) {
      why = fmt::format("with EP = {} a spool hit would skip an all-to-all its EP peers wait for", s.config.ep);
    } else if ((s.config.tp > 1 || s.config.pp > 1 || s.config.cp > 1) &&
               std::any_of(plan.edges.begin(), plan.edges.end(),
                           [&](const plan::EdgePlan& e) { return e.to == s.name; })) {
      why = fmt::format(
          "with TP = {} PP = {} CP = {} the runtime runs ahead only a section without upstream sections (its "
          "replica computes the rows its spool lacks from the samples alone)",
          s.config.tp, s.config.pp, s.config.cp);
    }
    if (!why.empty()) {
      return Status::FailedPrecondition(fmt::format(
          "section '{}': run_ahead = {} but {}; recompile without `run_ahead` for it (the planner only sets it where "
          "the runtime runs it) or set run_ahead = 0 in plan.json",
          s.name, s.run_ahead, why));
    }
  }
  return Status::Ok();
}

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
                   std::shared_ptr<const scheduler::SectionCostModel> costs)
    : plan_(plan),
      section_(section),
      replica_(replica),
      batches_(plan.sections[static_cast<size_t>(section)].run_ahead),
      costs_(std::move(costs)),
      bound_rows_(static_cast<int64_t>(batches_) * plan.data.global_batch) {}

int64_t RunAhead::rows_ahead() const {
  int64_t rows = 0;
  for (const auto& [step, n] : rows_by_step_) rows += n;
  return rows;
}

Status RunAhead::ComputeAhead(int64_t step, const std::vector<StepBatch>& ahead, const ComputeRows& compute,
                              const std::function<void()>& between, const BeforeStep& before_step) {
  // The step in flight and those before it are no longer ahead.
  rows_by_step_.erase(rows_by_step_.begin(), rows_by_step_.upper_bound(step));
  for (const StepBatch& batch : ahead) {
    if (batch.step <= step || batch.step > step + batches_) {
      return Status::Internal(
          fmt::format("run-ahead: step {} is not among the {} after step {}", batch.step, batches_, step));
    }
    if (batch.step <= last_step_ahead_) continue;  // computed during an earlier step
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
    if (before_step) MAESTRO_RETURN_IF_ERROR(before_step(micro_batches, batch.epoch));
    int64_t rows = 0;
    for (size_t m = 0; m < micro_batches.size(); ++m) {
      MAESTRO_RETURN_IF_ERROR(compute(static_cast<int>(m), micro_batches[m], batch.epoch));
      rows += static_cast<int64_t>(micro_batches[m].size());
      if (between) between();
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
  return Status::Ok();
}

}  // namespace maestro::runtime
