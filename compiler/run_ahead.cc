// SPDX-License-Identifier: Apache-2.0
#include "compiler/run_ahead.h"

#include <fmt/format.h>

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
  // alone (runtime/run_ahead.h CheckRunAheadRuns).
  if ((c.tp > 1 || c.pp > 1 || c.cp > 1) && HasUpstream(work, i)) {
    return fmt::format("run-ahead with TP={} PP={} CP={} of a section with upstream sections", c.tp, c.pp, c.cp);
  }
  // An EP section keeps no spool (runtime/run_ahead.h CheckRunAheadRuns).
  if (c.ep > 1) return fmt::format("run-ahead with EP={}", c.ep);
  return "";
}

}  // namespace

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
  for (size_t i : candidates) trial.sections[i].run_ahead = 1;
  const SimulatedStep after = SimulateSectioned(model, work, trial, settings);
  std::string names;
  for (size_t i : candidates) names += (names.empty() ? "'" : ", '") + work.sections[i].name + "'";
  if (!before.ok || !after.ok) {
    log += fmt::format("  section(s) {}: no run-ahead (the plan could not be simulated: {})\n", names,
                       before.ok ? after.error : before.error);
    return log;
  }
  if (after.step_seconds < before.step_seconds * (1.0 - kRefinementTolerance)) {
    *a = std::move(trial);
    log += fmt::format(
        "  section(s) {}: run_ahead = 1: the training sections find this step's rows ready (computed during the "
        "previous step), the simulated step {:.4g} s -> {:.4g} s\n",
        names, before.step_seconds, after.step_seconds);
  } else {
    log +=
        fmt::format("  section(s) {}: no run-ahead: the simulated step {:.4g} s -> {:.4g} s is not {:.1f}% shorter\n",
                    names, before.step_seconds, after.step_seconds, 100 * kRefinementTolerance);
  }
  return log;
}

}  // namespace maestro::compiler
