// SPDX-License-Identifier: Apache-2.0
#include "compiler/run_ahead.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace maestro::compiler {

namespace {

// True when forward-only section `i` sends its rows to a training section.
bool FeedsTraining(const Workload& work, size_t i) {
  for (const EdgeWork& e : work.edges) {
    if (e.from == static_cast<int>(i) && work.sections[static_cast<size_t>(e.to)].trains()) return true;
  }
  return false;
}

// What the runtime support lacks for section `i` to run `run_ahead` > 0 ahead ("" = nothing).
bool HasUpstream(const Workload& work, size_t i) {
  for (const EdgeWork& e : work.edges) {
    if (e.to == static_cast<int>(i)) return true;
  }
  return false;
}

std::string MissingSupport(const RuntimeSupport& support, const Workload& work, const Assignment& a, size_t i) {
  if (!support.run_ahead) return "run-ahead";
  const plan::ParallelConfig& c = a.sections[i].cost.config;
  if ((c.tp > 1 || c.pp > 1) && !support.run_ahead_model_parallel) {
    return fmt::format("run-ahead with TP={} PP={}", c.tp, c.pp);
  }
  if (c.cp > 1 && !support.run_ahead_context_parallel) return fmt::format("run-ahead with CP={}", c.cp);
  // The runtime's model-parallel run-ahead computes rows from the samples
  // alone (plan/runtime_support.h CheckRunAheadRuns).
  if ((c.tp > 1 || c.pp > 1 || c.cp > 1) && HasUpstream(work, i)) {
    return fmt::format("run-ahead with TP={} PP={} CP={} of a section with upstream sections", c.tp, c.pp, c.cp);
  }
  // An EP section keeps no spool (plan/runtime_support.h CheckRunAheadRuns).
  if (c.ep > 1) return fmt::format("run-ahead with EP={}", c.ep);
  return "";
}

// Global batches ahead that run section `i` without a fill per step: 1, or
// for a pipeline the runtime streams, enough that the batches after the
// next one hold PP - 1 micro-batches of a replica (its last stage's lag).
int BatchesAheadFor(const Workload& work, const Assignment& a, size_t i) {
  const SectionCost& cost = a.sections[i].cost;
  if (work.sections[i].pipeline_streams_ahead < 2 || cost.config.pp <= 1) return 1;
  const int per_step = std::max(1, static_cast<int>(std::floor(cost.microbatches)));
  return std::min(work.sections[i].pipeline_streams_ahead, 1 + (cost.config.pp - 1 + per_step - 1) / per_step);
}

}  // namespace

void MarkPipelineStreams(const Spec& spec, const RuntimeSupport& support, Workload* work) {
  const bool streams = support.run_ahead && support.run_ahead_model_parallel && support.run_ahead_stream;
  for (size_t i = 0; i < work->sections.size(); ++i) {
    SectionWork& s = work->sections[i];
    const int pin = i < spec.sections.size() ? spec.sections[i].run_ahead : -1;
    const bool eligible = streams && !s.trains() && FeedsTraining(*work, i) && !HasUpstream(*work, i);
    s.pipeline_streams_ahead = !eligible || (pin >= 0 && pin < 2) ? 0 : pin >= 2 ? pin : plan::kMaxRunAhead;
  }
}

std::string ChooseRunAhead(const Spec& spec, const CostModel& model, const Workload& work, const PlannerOptions& po,
                           const SimulationSettings& settings, Assignment* a) {
  std::string log;
  std::vector<size_t> candidates;
  for (size_t i = 0; i < work.sections.size() && i < a->sections.size(); ++i) {
    SectionChoice& choice = a->sections[i];
    choice.run_ahead = 0;
    if (work.sections[i].trains()) continue;
    const int pin = i < spec.sections.size() ? spec.sections[i].run_ahead : -1;
    if (pin >= 0) {
      choice.run_ahead = pin;
      const std::string missing = pin > 0 ? MissingSupport(po.support, work, *a, i) : "";
      if (!missing.empty() && choice.planner_only.find(missing) == std::string::npos) {
        choice.planner_only += (choice.planner_only.empty() ? "" : ", ") + missing;
      }
      log += fmt::format("  section '{}': run_ahead = {} (pinned in the spec){}\n", work.sections[i].name, pin,
                         missing.empty() ? "" : "; planner-only: the runtime lacks " + missing);
      continue;
    }
    if (!FeedsTraining(work, i)) continue;
    const std::string missing = MissingSupport(po.support, work, *a, i);
    if (!missing.empty()) {
      log += fmt::format("  section '{}': no run-ahead (the runtime lacks {})\n", work.sections[i].name, missing);
      continue;
    }
    candidates.push_back(i);
  }
  if (candidates.empty()) return log;
  const SimulatedStep before = SimulateSectioned(model, work, *a, settings);
  Assignment trial = *a;
  for (size_t i : candidates) trial.sections[i].run_ahead = BatchesAheadFor(work, *a, i);
  const SimulatedStep after = SimulateSectioned(model, work, trial, settings);
  std::string names, batches;
  for (size_t i : candidates) {
    names += (names.empty() ? "'" : ", '") + work.sections[i].name + "'";
    const int k = trial.sections[i].run_ahead;
    batches += fmt::format("{}run_ahead = {}{}", batches.empty() ? "" : ", ", k,
                           k > 1 ? " (its pipeline streams from one step into the next: no fill per step)" : "");
  }
  if (!before.ok || !after.ok) {
    log += fmt::format("  section(s) {}: no run-ahead (the plan could not be simulated: {})\n", names,
                       before.ok ? after.error : before.error);
    return log;
  }
  if (after.step_seconds < before.step_seconds * (1.0 - kRefinementTolerance)) {
    *a = std::move(trial);
    log += fmt::format(
        "  section(s) {}: {}: the training sections find this step's rows ready (computed during the "
        "previous step), the simulated step {:.4g} s -> {:.4g} s\n",
        names, batches, before.step_seconds, after.step_seconds);
  } else {
    log +=
        fmt::format("  section(s) {}: no run-ahead: the simulated step {:.4g} s -> {:.4g} s is not {:.1f}% shorter\n",
                    names, before.step_seconds, after.step_seconds, 100 * kRefinementTolerance);
  }
  return log;
}

}  // namespace maestro::compiler
