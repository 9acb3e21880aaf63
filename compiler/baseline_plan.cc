// SPDX-License-Identifier: Apache-2.0
#include "compiler/baseline_plan.h"

#include <fmt/format.h>

#include <string>

#include "compiler/config_text.h"

namespace maestro::compiler {

std::string AdoptBaselineForOneComponent(const CompileOptions& options, const CostModel& model,
                                         const PlannerOptions& po, bool local, CompileResult& r) {
  if (r.workload.sections.size() != 1) return "the workload has several components";
  if (options.grouping != Grouping::kAuto) return "the grouping is forced";
  const MonolithicPlan& m = r.fused;
  if (!m.found || m.sections.empty()) return m.why_not.empty() ? "no single configuration fits" : m.why_not;
  const SectionWork& s = r.workload.sections.front();
  if (m.devices.size() != 1 || m.devices.front().device != s.device) {
    return "the section runs on another GPU type than the baseline (its gpu_type)";
  }
  const double sectioned = r.simulated.ok ? r.simulated.step_seconds : r.assignment.bottleneck_seconds;
  const double baseline = r.fused_simulated.ok ? r.fused_simulated.step_seconds : m.step_seconds;
  if (!(baseline < sectioned)) return "the sectioned plan is predicted no slower";
  // The section at the baseline's configuration, as the planner prices a
  // section (its GPUs, nodes and memory); it must fit and run as planned.
  SectionChoice choice;
  choice.cost = model.Evaluate(s, m.sections.front().config);
  choice.planner_only = PlannerOnlyFeatures(s.model, choice.cost.config, po.support);
  if (!choice.cost.fits || choice.cost.nodes == 0) return "the baseline's configuration does not fit as a section";
  // The section must hold the baseline's GPUs for its simulation to be the
  // plan's (an encoder the baseline runs whole on every TP rank would not).
  if (choice.cost.config.ranks() != m.config.ranks()) return "the section would not hold the baseline's GPUs";
  const bool planner_only_allowed = !local && (options.allow_planner_only || options.support_given);
  if (!choice.planner_only.empty() && !planner_only_allowed) {
    return "the baseline's configuration needs what the runtime lacks (" + choice.planner_only + ")";
  }
  Assignment a;
  a.sections.push_back(std::move(choice));
  Summarize(model, r.workload, a);
  r.assignment = std::move(a);
  // The plan is the baseline: its predicted step is the baseline's own
  // simulation (the same configuration on the same GPUs and batches).
  r.simulated = r.fused_simulated;
  for (SectionSimulation& sim : r.simulated.sections) sim.name = s.name;
  r.prediction = PredictionOf(r.simulated, model, r.workload, r.assignment);
  r.refinement_log +=
      fmt::format("  rejected for the baseline's configuration: the sectioned plan, {:.4g} s/step\n", sectioned);
  GroupingChoice& g = r.grouping;
  g.fused = false;
  g.baseline = true;
  g.chosen_step_seconds = baseline;
  g.rejected = "sectioned";
  g.rejected_step_seconds = sectioned;
  g.why = fmt::format(
      "{} ({}): its one component runs a step in {:.4g} s at it, in {:.4g} s at the sectioned search's plan (a "
      "plan is never predicted slower than its baseline)",
      r.fused_is_baseline ? "the baseline's configuration" : "the best single configuration the pins allow",
      ConfigText(m.config) + (r.fused_pins.empty() ? "" : ", honouring the pins: " + r.fused_pins), baseline,
      sectioned);
  return "";
}

}  // namespace maestro::compiler
