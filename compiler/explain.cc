// SPDX-License-Identifier: Apache-2.0
#include "compiler/explain.h"

#include <fmt/format.h>

#include <numeric>

#include "base/units.h"
#include "compiler/config_text.h"
#include "compiler/runtime_support.h"

namespace maestro::compiler {

namespace {

// One line per alternative: what the neighbouring choice would have cost.
std::string Alternative(const CostModel& model, const SectionWork& s, const plan::ParallelConfig& c,
                        const std::string& what, const PlannerOptions& o) {
  if (c.tp < 1 || c.pp < 1 || c.dp < 1 || c.micro_batch < 1 || c.cp < 1) return "";
  const SectionCost alt = model.Evaluate(s, c);
  const DeviceType& d = model.devices()[static_cast<size_t>(s.device)];
  const std::string only = PlannerOnlyFeatures(s.model, c, o.support);
  if (!only.empty() && !o.allow_planner_only)
    return fmt::format("    {}: the runtime cannot run it ({})\n", what, only);
  if (!alt.fits) {
    return fmt::format("    {}: needs {} GiB per GPU > {:.1f}\n", what, GiBText(alt.memory.total()),
                       d.memory_bytes / kGiB);
  }
  return fmt::format("    {}: {:.4g} s/step, {} GiB per GPU\n", what, alt.step_seconds, GiBText(alt.memory.total()));
}

// The neighbouring choices of section `s` around its configuration `chosen`:
// half or double TP (DP the other way), half or double micro-batch, and
// recomputation toggled.
std::string NeighbouringChoices(const CostModel& model, const SectionWork& s, const plan::ParallelConfig& chosen,
                                const PlannerOptions& o) {
  std::string t = "  neighbouring choices (same GPU count where possible):\n";
  plan::ParallelConfig x = chosen;
  if (x.tp > 1) {
    x = chosen;
    x.tp /= 2;
    x.dp *= 2;
    t += Alternative(model, s, x, fmt::format("TP {} (DP {})", x.tp, x.dp), o);
  }
  if (x.dp % 2 == 0 || chosen.dp % 2 == 0) {
    x = chosen;
    if (x.dp % 2 == 0) {
      x.tp *= 2;
      x.dp /= 2;
      t += Alternative(model, s, x, fmt::format("TP {} (DP {})", x.tp, x.dp), o);
    }
  }
  x = chosen;
  if (x.micro_batch > 1) {
    x.micro_batch /= 2;
    t += Alternative(model, s, x, fmt::format("micro-batch {}", x.micro_batch), o);
  }
  x = chosen;
  x.micro_batch *= 2;
  t += Alternative(model, s, x, fmt::format("micro-batch {}", x.micro_batch), o);
  if (s.trains()) {
    for (auto g : {plan::RecomputeGranularity::kNone, plan::RecomputeGranularity::kSelective,
                   plan::RecomputeGranularity::kFull}) {
      if (g == chosen.recompute_granularity()) continue;
      x = chosen;
      x.set_recompute_granularity(g);
      t += Alternative(model, s, x,
                       g == plan::RecomputeGranularity::kNone
                           ? std::string("without recomputation")
                           : fmt::format("with {} recomputation", plan::RecomputeGranularityName(g)),
                       o);
    }
  }
  return t;
}

// Section `i`: its configuration, work, memory and time per step, and how it
// relates to the bottleneck section.
std::string ExplainSection(const CostModel& model, const PlannerOptions& o, const CompileResult& r,
                           const PlanOutcome& outcome, size_t i, size_t bottleneck) {
  const Workload& w = r.workload;
  const Assignment& a = r.assignment;
  std::string t;
  const SectionWork& s = w.sections[i];
  const SectionCost& c = a.sections[i].cost;
  const DeviceType& d = model.devices()[static_cast<size_t>(s.device)];
  t += fmt::format("section '{}': {} on {} {} ({} node(s)); {} configurations evaluated, {} fit in memory\n", s.name,
                   ConfigText(c.config), c.gpus, d.name,
                   d.shared_node   ? 1
                   : d.packs_nodes ? (c.gpus + d.gpus_per_node - 1) / d.gpus_per_node
                                   : c.nodes,
                   outcome.evaluated[i], outcome.fitting[i]);
  t += fmt::format("  work: {:.0f}% of the samples x {} tokens; {:.3g} GFLOP forward{} per sample\n",
                   100 * s.active_fraction, s.tokens, c.flops_forward_per_sample / 1e9,
                   s.trains() ? fmt::format(" + {:.3g} backward", c.flops_backward_per_sample / 1e9) : "");
  t += fmt::format(
      "  memory per GPU: weights {} + gradients {} + optimizer {} (ZeRO-1 over DP {}) + activations {} "
      "+ reserve {} = {} of {}\n",
      HumanBytes(c.memory.weights), HumanBytes(c.memory.gradients), HumanBytes(c.memory.optimizer), c.config.dp,
      HumanBytes(c.memory.activations), HumanBytes(c.memory.reserved), HumanBytes(c.memory.total()),
      HumanBytes(d.memory_bytes));
  const std::string scaled = c.calibration_scale > 0
                                 ? fmt::format(", scaled x{:.3g} to the profile measured at {} GPU(s)",
                                               c.calibration_scale, c.calibrated_at_gpus)
                                 : "";
  const std::string priced_by = c.measured ? "measured profile"
                                : c.step_model
                                    ? fmt::format("step model from parts, {} tables; forward {:.0f}% of a micro-batch",
                                                  d.kernels_origin, 100 * c.forward_share)
                                    : fmt::format("efficiency curve, mfu {:.2g}", d.mfu);
  t += fmt::format(
      "  time per step: {:.4g} micro-batches x {:.4g} s per stage{} + DP sync {:.4g} s + optimizer {:.4g} s = {:.4g} s "
      "({})\n",
      c.microbatches, c.stage_seconds,
      c.config.pp > 1 ? (c.fill_stages > 0 ? fmt::format(" (+{:.4g} fill)", c.fill_stages)
                                           : std::string(" (no fill: its pipeline streams across steps running ahead)"))
                      : "",
      c.dp_sync_seconds, c.optimizer_seconds, c.step_seconds, priced_by + scaled);
  if (i == bottleneck) {
    t += "  this is the bottleneck section: the other sections got the fewest nodes that keep up with it\n";
  } else {
    t += fmt::format("  it keeps up with the bottleneck '{}' ({:.4g} s) on the fewest nodes that allow it\n",
                     w.sections[bottleneck].name, a.bottleneck_seconds);
  }
  t += NeighbouringChoices(model, s, c.config, o);
  return t;
}

std::string ExplainEdges(const CompileResult& r) {
  const Workload& w = r.workload;
  const Assignment& a = r.assignment;
  std::string t;
  for (size_t e = 0; e < w.edges.size(); ++e) {
    const EdgeWork& ew = w.edges[e];
    const int a_dp = a.sections[static_cast<size_t>(ew.from)].cost.config.dp;
    const int b_dp = a.sections[static_cast<size_t>(ew.to)].cost.config.dp;
    if (a_dp % b_dp != 0 && b_dp % a_dp != 0) {
      t += fmt::format(
          "edge {} -> {}: DP {} -> {}, neither divides the other: {} links between replicas whose "
          "shares of the batch overlap\n",
          w.sections[static_cast<size_t>(ew.from)].name, w.sections[static_cast<size_t>(ew.to)].name, a_dp, b_dp,
          a_dp + b_dp - std::gcd(a_dp, b_dp));
      continue;
    }
    t += fmt::format("edge {} -> {}: DP {} x {} = {}{}\n", w.sections[static_cast<size_t>(ew.from)].name,
                     w.sections[static_cast<size_t>(ew.to)].name, a_dp,
                     b_dp >= a_dp ? fmt::format("fan-out {}", b_dp / a_dp) : fmt::format("(1/{}) fan-in", a_dp / b_dp),
                     b_dp, ew.fanout || ew.fanin ? " (pinned)" : "");
  }
  return t;
}

// Why the monolithic baseline is slower: encoders at the LLM's split, frozen
// sections beside the training states, data-dependent stragglers.
std::string ExplainMonolithic(const CompileResult& r) {
  const Workload& w = r.workload;
  std::string t;
  const MonolithicPlan& m = r.monolithic;
  t += fmt::format("monolithic: best single configuration {} on all {} GPUs ({:.4g} s/step analytic)\n",
                   ConfigText(m.config), m.gpus, m.step_seconds);
  for (size_t i = 0; i < w.sections.size() && i < m.sections.size(); ++i) {
    const SectionWork& s = w.sections[i];
    const plan::ParallelConfig& c = m.sections[i].config;
    if (c.tp != m.config.tp || c.pp != m.config.pp) {
      t += fmt::format(
          "  '{}' cannot be split like the LLM (TP {} PP {}): it runs whole on pipeline stage 0 of "
          "every TP rank, {}x its FLOPs per replica, and stage 0 sets the pipeline's pace\n",
          s.name, m.config.tp, m.config.pp, m.config.tp);
    } else if (!s.trains()) {
      t += fmt::format(
          "  frozen '{}' runs at the trainer's TP {} PP {} and micro-batch {}, its replica in the same "
          "GPU memory as the training states\n",
          s.name, c.tp, c.pp, c.micro_batch);
    }
    if (s.active_fraction < 1.0) {
      t += fmt::format(
          "  '{}' runs for {:.0f}% of the samples: FIFO deals the data order round-robin, so DP "
          "replicas draw different counts and the step waits for the one with the most\n",
          s.name, 100 * s.active_fraction);
    }
  }
  if (r.monolithic_simulated.ok) {
    t += fmt::format(
        "  simulated (FIFO, {} sampled batches): {:.4g} s per step (slowest batch {:.4g} s); the "
        "analytic formula expects {:.4g} s\n",
        r.monolithic_simulated.batches, r.monolithic_simulated.step_seconds, r.monolithic_simulated.max_step_seconds,
        m.step_seconds);
  }
  return t;
}

// The grouping chosen, and the fused plan under the pins when it is not the baseline's.
std::string ExplainGrouping(const CompileResult& r) {
  std::string t;
  t += "grouping (sectioned, or every component fused in one section on every GPU under the baseline's "
       "configuration, or the best one the pins allow; the faster simulated step wins): " +
       r.grouping.why + "\n";
  if (!r.fused_is_baseline && r.fused.found) {
    t +=
        fmt::format("  fused under the pins ({}): {} on {} GPUs, {:.4g} s/step simulated ({:.4g} s analytic)\n",
                    r.fused_pins, ConfigText(r.fused.config), r.fused.gpus,
                    r.fused_simulated.ok ? r.fused_simulated.step_seconds : r.fused.step_seconds, r.fused.step_seconds);
  }
  return t;
}

}  // namespace

std::string RenderExplain(const CostModel& model, const PlannerOptions& o, const CompileResult& r,
                          const PlanOutcome& outcome) {
  const Workload& w = r.workload;
  const Assignment& a = r.assignment;
  std::string t;
  size_t bottleneck = 0;
  for (size_t i = 0; i < a.sections.size(); ++i) {
    if (a.sections[i].cost.step_seconds > a.sections[bottleneck].cost.step_seconds) bottleneck = i;
  }
  if (!r.grouping.no_sectioned.empty()) {
    // GPU local mode on too few GPUs: no sectioned plan was searched.
    t += "no sectioned plan: " + r.grouping.no_sectioned +
         " (one GPU each; a GPU is not shared between ranks): the workload is planned fused on them\n";
    if (r.monolithic.found) t += ExplainMonolithic(r);
    return t + ExplainGrouping(r);
  }
  t += fmt::format(
      "objective: the highest steady-state throughput = global batch / the slowest section or edge; "
      "then the fewest nodes.\n");
  for (size_t i = 0; i < w.sections.size(); ++i) t += ExplainSection(model, o, r, outcome, i, bottleneck);
  t += ExplainEdges(r);
  t += fmt::format(
      "simulation (FromPlan -> BuildSchedule -> Simulate over sampled global batches): a local search over "
      "single moves (micro-batch, DP, TP, PP, CP, recomputation) inside the held nodes, {} simulations: {}",
      r.refinement.simulations,
      !r.refinement.ran        ? "the plan could not be simulated; kept as planned"
      : r.refinement.converged ? "no single move shortens the simulated step by more than 0.5%"
                               : "stopped at its cap; a better single move may remain");
  t += r.refinement_log.empty() ? "; nothing changed\n"
                                : "; changed what the steady-state objective cannot see (fill and drain between "
                                  "sections):\n" +
                                      r.refinement_log;
  if (!r.run_ahead_log.empty() && !r.grouping.fused) {
    t += "run-ahead (a forward-only section computes the next global batches' rows while the training sections "
         "finish the current one; the simulator prices the steady state, docs/run_ahead.md):\n" +
         r.run_ahead_log;
  }
  if (r.monolithic.found) t += ExplainMonolithic(r);
  return t + ExplainGrouping(r);
}

}  // namespace maestro::compiler
