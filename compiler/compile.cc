// SPDX-License-Identifier: Apache-2.0
#include "compiler/compile.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "base/checks.h"
#include "base/files.h"
#include "base/text.h"
#include "compiler/baseline_plan.h"
#include "compiler/explain.h"
#include "compiler/job_pricing.h"
#include "compiler/refinement.h"
#include "compiler/report.h"
#include "compiler/run_ahead.h"
#include "compiler/sample_mix.h"

namespace maestro::compiler {

namespace {

PlannerOptions PlannerOptionsOf(const Spec& spec, const CompileOptions& options) {
  PlannerOptions po;
  po.allow_planner_only = options.allow_planner_only;
  po.support = spec.cluster.local ? kRuntimeSupport : options.support;
  return po;
}

// A planner failure as the user's error, placed at the spec's line: the
// section that fits nowhere, the edge whose fan-out is impossible, else
// [cluster].
Status PlanFailureStatus(const Spec& spec, const PlanFailure& f) {
  SourcePos pos = spec.cluster.pos;
  if (f.kind == PlanFailure::Kind::kNoConfigFits && f.section >= 0)
    pos = spec.sections[static_cast<size_t>(f.section)].pos;
  if (f.kind == PlanFailure::Kind::kFanOutImpossible && f.edge >= 0 && f.edge < static_cast<int>(spec.edges.size())) {
    pos = spec.edges[static_cast<size_t>(f.edge)].pos;
  }
  return Status::InvalidArgument(AtPos(spec.path, pos, f.message));
}

// Local mode runs what this build's runtime runs: a planner-only section is
// the user's error.
Status CheckLocalRunsEverything(const Spec& spec, const Assignment& a) {
  if (!spec.cluster.local) return Status::Ok();
  for (size_t i = 0; i < a.sections.size(); ++i) {
    if (!a.sections[i].planner_only.empty()) {
      return Status::InvalidArgument(AtPos(spec.path, spec.sections[i].pos,
                                           fmt::format("--local: section '{}' needs what the runtime cannot run "
                                                       "yet ({}); it runs only under Slurm with a runtime that has it",
                                                       spec.sections[i].name, a.sections[i].planner_only)));
    }
  }
  return Status::Ok();
}

// A plan the runtime cannot start (a model feature such as MoE that no
// configuration avoids) is refused unless the user asked for planner-only
// plans (--allow-planner-only) or planned for another runtime
// (--runtime-support): exit 2, naming the section and the feature.
Status CheckRuntimeRunsEverything(const Spec& spec, const CompileOptions& options, const Assignment& a) {
  if (options.allow_planner_only || options.support_given) return Status::Ok();
  for (size_t i = 0; i < a.sections.size(); ++i) {
    if (!a.sections[i].planner_only.empty()) {
      return Status::InvalidArgument(
          AtPos(spec.path, spec.sections[i].pos,
                fmt::format("section '{}' needs what the runtime cannot run yet ({}): its plan would not start; "
                            "--allow-planner-only plans it anyway (for the report; the job would fail)",
                            spec.sections[i].name, a.sections[i].planner_only)));
    }
  }
  return Status::Ok();
}

// What the runtime refuses (plan/runtime_support.h CheckPlanRuns: a model
// feature it lacks such as a config's dynamic NTK rope_scaling, edges it cannot wire,
// data it cannot feed) is refused here, at the spec's line of the section,
// before any rank starts. A plan for more than this runtime
// (--allow-planner-only, --runtime-support) is not held to it, except in
// local mode, which runs the plan.
Status CheckPlanStarts(const Spec& spec, const CompileOptions& options, const plan::Plan& plan) {
  if (!spec.cluster.local && (options.allow_planner_only || options.support_given)) return Status::Ok();
  std::string section;
  const Status runs = plan::CheckPlanRuns(plan, plan::kRuntimeSupport, &section);
  if (runs.ok()) return Status::Ok();
  SourcePos pos = spec.cluster.pos;
  for (const auto& s : spec.sections) {
    if (s.name == section) pos = s.pos;
  }
  return Status::InvalidArgument(AtPos(
      spec.path, pos,
      runs.message() + (spec.cluster.local ? "" : "; --allow-planner-only plans it anyway (the job would not start)")));
}

// The simulation's refinement of the assignment, the run-ahead choice, and
// the simulated step of the sectioned plan.
void RefineAndSimulate(const Spec& spec, const CostModel& model, const PlannerOptions& po, CompileResult& r) {
  SimulationSettings sim;
  sim.seed = spec.data.seed;
  sim.seq_len = spec.data.seq_len;
  sim.modalities = spec.data.modalities;
  sim.draws = DrawsOf(spec);
  const SimulatorStepPredictor predictor(sim);
  // The refinement, then the run-ahead choice on the refined plan. Where a
  // section runs ahead of the plan as found, the refinement also searches
  // with run-ahead priced (a teacher off the critical path prefers other
  // configurations: its fill no longer counts), and the shorter simulated
  // step of the two searches wins (the first on a tie).
  const Assignment planned = r.assignment;
  r.assignment = RefineBySimulation(model, r.workload, planned, po, sim, &r.refinement_log, &r.refinement);
  r.run_ahead_log = ChooseRunAhead(spec, model, r.workload, po, sim, &r.assignment);
  Assignment priced = planned;
  (void)ChooseRunAhead(spec, model, r.workload, po, sim, &priced);
  if (std::any_of(priced.sections.begin(), priced.sections.end(),
                  [](const SectionChoice& c) { return c.run_ahead > 0; })) {
    std::string log;
    RefinementStats stats;
    priced = RefineBySimulation(model, r.workload, priced, po, sim, &log, &stats);
    std::string run_ahead_log = ChooseRunAhead(spec, model, r.workload, po, sim, &priced);
    const SimulatedStep a = SimulateSectioned(model, r.workload, r.assignment, sim);
    const SimulatedStep b = SimulateSectioned(model, r.workload, priced, sim);
    if (b.ok && (!a.ok || b.step_seconds < a.step_seconds)) {
      r.assignment = std::move(priced);
      r.refinement_log = "  (searched with run-ahead priced)\n" + log;
      r.refinement = stats;
      r.run_ahead_log = std::move(run_ahead_log);
    }
  }
  r.simulated = predictor.Run(model, r.workload, r.assignment);
  r.prediction = PredictionOf(r.simulated, model, r.workload, r.assignment);
}

// The pins of a spec's sections (and --pin) as a fused plan sees them: one
// configuration for every component, so every pinned value must hold for
// it (recomputation: a training section's pin). `refusal` says why no fused
// plan can honour them (pins that disagree, an edge's fan-out); `text`
// lists them ("" when nothing is pinned).
struct FusedPins {
  int tp = 0, pp = 0, cp = 0, ep = 0, dp = 0, micro_batch = 0;
  std::optional<plan::RecomputeGranularity> recompute;
  std::string text, refusal;

  bool Admit(const plan::ParallelConfig& c) const {
    return (tp == 0 || c.tp == tp) && (pp == 0 || c.pp == pp) && (cp == 0 || c.cp == cp) && (ep == 0 || c.ep == ep) &&
           (dp == 0 || c.dp == dp) && (micro_batch == 0 || c.micro_batch == micro_batch) &&
           (!recompute || c.recompute_granularity() == *recompute);
  }
};

FusedPins FusedPinsOf(const Spec& spec, const Workload& w) {
  FusedPins out;
  std::map<std::string, std::string> first_pin;  // key -> "section 'x' pins key = v"
  const auto pin = [&](const std::string& section, const char* key, int value, int& slot) {
    if (value == 0 || !out.refusal.empty()) return;
    const std::string said = fmt::format("section '{}' pins {} = {}", PrintableText(section), key, value);
    if (slot != 0 && slot != value) {
      out.refusal =
          fmt::format("{} and {}; a fused plan runs every component at one configuration", first_pin[key], said);
      return;
    }
    if (slot == 0) {
      slot = value;
      first_pin[key] = said;
      out.text += fmt::format("{}{} {}", out.text.empty() ? "" : ", ", key, value);
    }
  };
  for (size_t i = 0; i < spec.sections.size(); ++i) {
    const SectionSpec& s = spec.sections[i];
    pin(s.name, "tp", s.tp, out.tp);
    pin(s.name, "pp", s.pp, out.pp);
    pin(s.name, "cp", s.cp, out.cp);
    pin(s.name, "ep", s.ep, out.ep);
    pin(s.name, "dp", s.dp, out.dp);
    pin(s.name, "micro_batch", s.micro_batch, out.micro_batch);
    const bool trains = i < w.sections.size() && w.sections[i].trains();
    if (s.recompute && trains && out.refusal.empty()) {
      const std::string value = plan::RecomputeGranularityName(*s.recompute);
      if (out.recompute && *out.recompute != *s.recompute) {
        out.refusal = fmt::format(
            "{} and section '{}' pins recompute = {}; a fused plan recomputes every training "
            "component alike",
            first_pin["recompute"], PrintableText(s.name), value);
      } else if (!out.recompute) {
        out.recompute = s.recompute;
        first_pin["recompute"] = fmt::format("section '{}' pins recompute = {}", PrintableText(s.name), value);
        out.text += fmt::format("{}recompute {}", out.text.empty() ? "" : ", ", value);
      }
    }
  }
  for (const EdgeSpec& e : spec.edges) {
    if (out.refusal.empty() && (e.fanout || e.fanin)) {
      out.refusal = fmt::format("edge {} -> {} pins its {}; a fused plan has no edges between sections",
                                PrintableText(e.from), PrintableText(e.to), e.fanout ? "fanout" : "fanin");
    }
  }
  return out;
}

// The monolithic baseline and its simulated step.
void PlanBaseline(const Spec& spec, const CostModel& model, const PlannerOptions& po, CompileResult& r) {
  r.monolithic_device = DeviceIndex(spec, spec.cluster.default_gpu);
  r.monolithic = PlanMonolithic(model, r.workload, r.monolithic_device, po);
  SimulationSettings sim;
  sim.seed = spec.data.seed;
  sim.seq_len = spec.data.seq_len;
  sim.modalities = spec.data.modalities;
  sim.draws = DrawsOf(spec);
  r.monolithic_simulated = SimulateMonolithic(model, r.workload, r.monolithic, r.monolithic_device, sim);
  // The fused alternative: the baseline's configuration, or where the spec
  // pins section configurations the best one that honours every pin.
  const FusedPins pins = FusedPinsOf(spec, r.workload);
  r.fused_pins = pins.text;
  r.fused_is_baseline = false;
  if (!pins.refusal.empty()) {
    r.fused = MonolithicPlan();
    r.fused.why_not = pins.refusal;
    r.fused_simulated = SimulatedStep();
    return;
  }
  r.fused_is_baseline = pins.text.empty() || (r.monolithic.found && pins.Admit(r.monolithic.config));
  if (r.fused_is_baseline) {
    r.fused = r.monolithic;
    r.fused_simulated = r.monolithic_simulated;
    return;
  }
  const DeviceType& dev = model.devices()[static_cast<size_t>(r.monolithic_device)];
  const std::vector<MonolithicDevice> on =
      r.monolithic.found
          ? r.monolithic.devices
          : std::vector<MonolithicDevice>{
                {r.monolithic_device, dev.shared_node ? dev.gpus_per_node : dev.nodes * dev.gpus_per_node}};
  r.fused = PlanMonolithicAdmitting(model, r.workload, on, po,
                                    [&pins](const plan::ParallelConfig& c) { return pins.Admit(c); });
  if (!r.fused.found) r.fused.why_not = "the pins (" + pins.text + "): " + r.fused.why_not;
  r.fused_simulated = SimulateMonolithic(model, r.workload, r.fused, r.monolithic_device, sim);
}

// The in-flight caps the compiler tries (plan::Plan::schedule_max_in_flight):
// the spec's pin, else none first and then caps of 16, 4 and 1 micro-batches
// when a training section feeds others (the only sections a cap bounds). A
// cap trades the upstream section's activations (compiler/memory_model.h:
// it holds at most cap + 1 micro-batches instead of every one of its replica)
// for its wait on the round trip through downstream (docs/scheduler.md: the
// simulated step over the bound is 1.025 at 16 and 1.095 at 4 on the
// scheduler bench), so the plan may give that section fewer replicas.
std::vector<int> InFlightCapsToTry(const Spec& spec, const Workload& w) {
  if (spec.job.max_in_flight >= 0) return {spec.job.max_in_flight};
  const bool upstream_trains =
      std::any_of(w.sections.begin(), w.sections.end(), [](const SectionWork& s) { return s.trains() && !s.sink; });
  if (!upstream_trains) return {0};
  return {0, 16, 4, 1};
}

// The DP degree of every section of `a`.
std::vector<int> DpDegreesOf(const Assignment& a) {
  std::vector<int> dps;
  for (const auto& s : a.sections) dps.push_back(s.cost.config.dp);
  return dps;
}

// True when on every edge of `w` one DP degree divides the other.
bool EdgesNest(const Workload& w, const Assignment& a) {
  for (const EdgeWork& e : w.edges) {
    const int from = a.sections[static_cast<size_t>(e.from)].cost.config.dp;
    const int to = a.sections[static_cast<size_t>(e.to)].cost.config.dp;
    if (from % to != 0 && to % from != 0) return false;
  }
  return true;
}

// One sectioned plan at in-flight cap `cap`: the planner's assignment,
// refined and simulated; the outcome's failure, or the status of a check.
struct SectionedAttempt {
  int cap = 0;
  PlanOutcome outcome;
  Status status;
  CompileResult result;
  double step_seconds() const {
    return result.simulated.ok ? result.simulated.step_seconds : result.assignment.bottleneck_seconds;
  }
};

SectionedAttempt PlanSectionedOnce(const Spec& spec, const CompileOptions& options, const CostModel& model,
                                   const PlannerOptions& po, const PlannerOptions& refine_po, const Workload& workload,
                                   int cap) {
  SectionedAttempt a;
  a.cap = cap;
  a.result.workload = workload;
  SetInFlightCap(a.result.workload, cap);
  a.outcome = PlanSections(model, a.result.workload, po);
  if (!a.outcome.ok()) {
    a.status = PlanFailureStatus(spec, a.outcome.failure);
    return a;
  }
  CompileResult& r = a.result;
  r.assignment = a.outcome.assignment;
  a.status = CheckLocalRunsEverything(spec, r.assignment);
  if (a.status.ok()) a.status = CheckRuntimeRunsEverything(spec, options, r.assignment);
  if (!a.status.ok()) return a;
  RefineAndSimulate(spec, model, refine_po, r);
  // A run_ahead pin the runtime lacks is planner-only too (ChooseRunAhead).
  a.status = CheckLocalRunsEverything(spec, r.assignment);
  if (a.status.ok()) a.status = CheckRuntimeRunsEverything(spec, options, r.assignment);
  if (a.status.ok() && DpSlots(DpDegreesOf(r.assignment)) > kMostDpSlots) {
    a.status = Status::InvalidArgument(
        fmt::format("the plan's DP degrees need more than {} placement slots (their lcm)", kMostDpSlots));
  }
  return a;
}

// The sectioned plan at in-flight cap `cap`: planned with edges between any
// DP degrees, and, when that plan has an edge whose degrees do not divide
// one another, planned again with nested degrees only (the fan-out and
// fan-in maps; its refinement may then trade replicas into any degrees); the
// faster simulated step is kept, the nested start's on a tie.
// The analytic search ranks plans by their slowest section, and a plan
// whose replicas' shares straddle one another can simulate slower than it
// predicts (kd_72b_to_7b_4k: 7.13 s predicted, 7.57 s simulated, against a
// nested plan at 7.41 s both ways).
SectionedAttempt PlanSectionedAt(const Spec& spec, const CompileOptions& options, const CostModel& model,
                                 const PlannerOptions& po, const Workload& workload, int cap) {
  SectionedAttempt any = PlanSectionedOnce(spec, options, model, po, po, workload, cap);
  if (po.nested_dp_edges || (any.status.ok() && EdgesNest(any.result.workload, any.result.assignment))) return any;
  PlannerOptions nested_po = po;
  nested_po.nested_dp_edges = true;
  SectionedAttempt nested = PlanSectionedOnce(spec, options, model, nested_po, po, workload, cap);
  if (!any.status.ok()) return nested.status.ok() ? nested : any;
  if (!nested.status.ok()) return any;
  SectionedAttempt& kept = nested.step_seconds() <= any.step_seconds() ? nested : any;
  const SectionedAttempt& other = &kept == &nested ? any : nested;
  kept.result.refinement_log +=
      fmt::format("  edges: {} ({:.4g} s/step); {} {:.4g} s/step\n",
                  &kept == &nested ? "planned with nested DP degrees" : "any DP degrees", kept.step_seconds(),
                  &kept == &nested ? "any DP degrees" : "planned with nested DP degrees", other.step_seconds());
  return std::move(kept);
}

// The report's line on the in-flight cap: the one chosen, and what each
// other cap tried gave.
std::string InFlightLog(const std::vector<SectionedAttempt>& attempts, size_t chosen) {
  if (attempts.size() < 2 && attempts[chosen].cap == 0) return "";
  const auto name = [](int cap) { return cap == 0 ? std::string("no cap") : fmt::format("cap {}", cap); };
  std::string out = fmt::format("{}: {:.4g} s/step", name(attempts[chosen].cap), attempts[chosen].step_seconds());
  std::vector<std::string> others;
  for (size_t k = 0; k < attempts.size(); ++k) {
    if (k == chosen) continue;
    others.push_back(attempts[k].status.ok()
                         ? fmt::format("{} {:.4g} s", name(attempts[k].cap), attempts[k].step_seconds())
                         : fmt::format("{} fits no plan", name(attempts[k].cap)));
  }
  if (!others.empty()) out += " (" + fmt::format("{}", fmt::join(others, ", ")) + ")";
  return out;
}

// Why the runtime cannot pipeline the fused section over `pp` stages; ""
// when it can: the runtime's rule (plan/runtime_support.h
// FusedPipelineReason) on the fused section the workload would make.
std::string FusedPipelineBlocker(const Workload& w, int pp, const RuntimeSupport& support) {
  if (!support.pipeline_parallel_fused) return "the runtime's fused sections run PP = 1";
  plan::SectionPlan fused;
  fused.name = "fused";
  fused.config.pp = pp;
  for (const SectionWork& s : w.sections) {
    plan::SectionPlan c;
    c.name = s.name;
    c.model = s.model;
    c.mode = s.mode;
    c.activation = s.activation;
    fused.components.push_back(std::move(c));
  }
  for (const EdgeWork& e : w.edges) {
    plan::EdgePlan edge;
    edge.from = w.sections[static_cast<size_t>(e.from)].name;
    edge.to = w.sections[static_cast<size_t>(e.to)].name;
    fused.component_edges.push_back(std::move(edge));
  }
  return plan::FusedPipelineReason(fused);
}

}  // namespace

std::string FusedPlanBlocker(const CompileResult& r, const RuntimeSupport& support) {
  const MonolithicPlan& m = r.fused;
  if (r.workload.sections.size() < 2) return "the workload has one component";
  if (!m.found && !r.fused_is_baseline) return m.why_not;  // the pins rule every configuration out
  if (!m.found) return "no single configuration fits: " + m.why_not;
  if (!m.planner_only.empty()) return "its configuration needs what the runtime lacks (" + m.planner_only + ")";
  if (m.devices.size() != 1) return "it runs on several GPU types in lockstep; a fused section runs on one";
  // CP: the runtime's rule (plan/runtime_support.h CheckContextParallelRuns
  // for a fused section; docs/fused_context_parallel.md): decoder CP inside,
  // encoders whole on every CP rank, not with PP (a runtime table with
  // context_parallel_with_pipeline, e.g. --runtime-support all, plans a
  // fused CP x PP section planner-only). The components' own CP
  // limits (the MoE load-balancing loss) make the baseline planner-only above.
  if (m.config.cp != 1 && !support.context_parallel_fused) {
    return fmt::format("the runtime's fused sections run CP = 1 (CP {})", m.config.cp);
  }
  if (m.config.cp != 1 && m.config.pp != 1 && !support.context_parallel_with_pipeline) {
    return fmt::format("the runtime's fused sections do not combine CP and PP (CP {} x PP {})", m.config.cp,
                       m.config.pp);
  }
  if (m.config.pp != 1) {
    if (const std::string why = FusedPipelineBlocker(r.workload, m.config.pp, support); !why.empty()) {
      return "PP " + std::to_string(m.config.pp) + ": " + why;
    }
  }
  return "";
}

namespace {

// GPU local mode on fewer GPUs than the sectioned plan needs
// (LocalGpusTooFewForSections: a GPU is not shared between ranks): the
// workload fused on the GPUs there are, every component on each (the fused
// alternative of PlanBaseline on the local node's GPUs); refused, naming
// --device cpu, when even that cannot run there (memory, the runtime). The
// assignment the report and --explain read is each component under the
// fused configuration; the fused section is the plan.
Status PlanFusedOnly(const Spec& spec, const CompileOptions& options, const CostModel& model, const PlannerOptions& po,
                     CompileResult& r) {
  const int gpus = spec.cluster.gpus_per_node;
  const int sections = static_cast<int>(spec.sections.size());
  const int least = LeastRanks(spec);
  PlanBaseline(spec, model, po, r);
  if (const std::string blocker = FusedPlanBlocker(r, po.support); !blocker.empty()) {
    return Status::InvalidArgument(AtPos(
        spec.path, spec.cluster.pos,
        fmt::format("the spec's {} sections need at least {} GPU(s) for the sectioned plan (one each{}) but {} "
                    "GPU(s) of this machine are given, and the fused plan (every component on each of them) cannot "
                    "run: {}; train on the CPU with `maestro run --device cpu` (the ranks share the cores), or plan "
                    "for a cluster (maestro-compile without --local)",
                    sections, least, least > sections ? ", and more where the pins ask" : "", gpus, blocker)));
  }
  const MonolithicPlan& m = r.fused;
  Assignment a;
  for (size_t i = 0; i < r.workload.sections.size(); ++i) {
    SectionChoice c;
    if (i < m.sections.size()) c.cost = m.sections[i];
    a.sections.push_back(c);
  }
  a.edge_seconds.assign(r.workload.edges.size(), 0.0);  // one process runs both ends: nothing crosses a link
  a.bottleneck_seconds = m.step_seconds;
  a.throughput = m.throughput;
  a.nodes_per_device.assign(model.devices().size(), 0);
  a.nodes_per_device[static_cast<size_t>(r.monolithic_device)] = m.gpus;  // local mode: the slots used
  a.gpus = m.gpus;
  r.assignment = std::move(a);
  r.simulated = r.fused_simulated;
  r.prediction = PredictionOf(r.simulated, model, r.workload, r.assignment);
  GroupingChoice& g = r.grouping;
  g.fused = true;
  g.chosen_step_seconds = r.fused_simulated.ok ? r.fused_simulated.step_seconds : m.step_seconds;
  g.no_sectioned = fmt::format("{} sections need {} GPU(s), {} here", sections, least, gpus);
  g.why =
      fmt::format("fused on {} GPU(s){}: {} (a GPU is not shared between ranks): every component runs on each GPU{}",
                  m.gpus, options.grouping == Grouping::kFused ? " (--grouping fused)" : "", g.no_sectioned,
                  r.fused_pins.empty() ? "" : " (honouring the pins: " + r.fused_pins + ")");
  return Status::Ok();
}

// Chooses the grouping (CompileOptions::grouping): the sectioned plan, or
// the fused one when it is predicted faster (auto) or forced.
StatusOr<GroupingChoice> ChooseGrouping(const Spec& spec, const CompileOptions& options, const CompileResult& r) {
  GroupingChoice g;
  const double sectioned = r.simulated.ok ? r.simulated.step_seconds : r.assignment.bottleneck_seconds;
  const double fused = r.fused_simulated.ok ? r.fused_simulated.step_seconds : r.fused.step_seconds;
  const std::string blocker = FusedPlanBlocker(r, PlannerOptionsOf(spec, options).support);
  // Pins the fused plan honours, for the why lines.
  const std::string honouring = r.fused_pins.empty() ? "" : " (honouring the pins: " + r.fused_pins + ")";
  g.chosen_step_seconds = sectioned;
  if (options.grouping == Grouping::kFused) {
    if (!blocker.empty()) {
      return Status::InvalidArgument(
          AtPos(spec.path, spec.cluster.pos,
                "--grouping fused: the fused plan cannot run: " + blocker + " (use --grouping auto or sectioned)"));
    }
    g.fused = true;
  } else if (options.grouping == Grouping::kAuto && blocker.empty() && fused < sectioned) {
    g.fused = true;
  }
  if (g.fused) {
    g.chosen_step_seconds = fused;
    g.rejected = "sectioned";
    g.rejected_step_seconds = sectioned;
    g.why = options.grouping == Grouping::kFused
                ? "fused by --grouping fused" + honouring
                : fmt::format(
                      "fused: every component on every GPU runs a step in {:.4g} s{}, the sectioned plan in "
                      "{:.4g} s (the components are too small to pay for GPUs of their own)",
                      fused, honouring, sectioned);
    return g;
  }
  if (options.grouping == Grouping::kSectioned) {
    g.why = "sectioned by --grouping sectioned";
  } else if (blocker.empty()) {
    g.why = fmt::format("sectioned: {:.4g} s per step against {:.4g} s fused{}", sectioned, fused, honouring);
  } else {
    g.why = "sectioned: a fused plan cannot run here (" + blocker + ")";
  }
  if (blocker.empty()) {
    g.rejected = "fused";
    g.rejected_step_seconds = fused;
  }
  return g;
}

// The sectioned plan at each in-flight cap tried (the shortest simulated
// step wins; the first on a tie), the baseline, the simulation of both, and
// the grouping; into `r` (whose workload is the compile's), the planner's
// outcome returned for --explain.
StatusOr<PlanOutcome> PlanSectionedAndChoose(const Spec& spec, const CompileOptions& options, const CostModel& model,
                                             const PlannerOptions& po, CompileResult& r) {
  std::vector<SectionedAttempt> attempts;
  size_t chosen = 0;
  for (int cap : InFlightCapsToTry(spec, r.workload)) {
    attempts.push_back(PlanSectionedAt(spec, options, model, po, r.workload, cap));
    const SectionedAttempt& a = attempts.back();
    if (a.status.ok() && (!attempts[chosen].status.ok() || a.step_seconds() < attempts[chosen].step_seconds())) {
      chosen = attempts.size() - 1;
    }
  }
  if (!attempts[chosen].status.ok()) return attempts.front().status;
  const PlanOutcome outcome = attempts[chosen].outcome;
  r = std::move(attempts[chosen].result);
  r.in_flight_log = InFlightLog(attempts, chosen);
  PlanBaseline(spec, model, po, r);
  MAESTRO_ASSIGN_OR_RETURN(r.grouping, ChooseGrouping(spec, options, r));
  // One component: the baseline's configuration is a plan of one section.
  (void)AdoptBaselineForOneComponent(options, model, po, spec.cluster.local, r);
  return outcome;
}

// The one fused section of a fused plan: every component on every rank of
// the monolithic baseline's configuration and GPUs; its cost line sums the
// components' (each on the share of samples that activates it).
plan::SectionPlan FusedSectionOf(const Spec& spec, const CostModel& model, const CompileResult& r,
                                 const std::vector<plan::SectionPlan>& components) {
  const MonolithicPlan& m = r.fused;
  const DeviceType& d = model.devices()[static_cast<size_t>(m.devices.front().device)];
  plan::SectionPlan sp;
  std::string name = "fused";
  for (int k = 1;
       std::any_of(components.begin(), components.end(), [&](const plan::SectionPlan& c) { return c.name == name; });
       ++k) {
    name = fmt::format("fused_{}", k);
  }
  sp.name = name;
  sp.mode = plan::SectionMode::kForward;
  for (const auto& c : components) {
    if (c.mode == plan::SectionMode::kTrain) sp.mode = plan::SectionMode::kTrain;
  }
  sp.activation = "always";
  sp.config = m.config;
  sp.placement.het_component = 0;
  sp.placement.first_rank = 0;
  const int gpus = m.config.ranks();
  sp.placement.nodes = d.shared_node ? 1 : std::max(1, gpus / d.gpus_per_node);
  sp.placement.tasks_per_node = gpus / sp.placement.nodes;
  sp.placement.gpus_per_task = d.cpu ? 0 : 1;
  sp.placement.gpu_type = d.name;
  sp.placement.partition = d.partition;
  sp.placement.constraint = d.constraint;
  sp.predicted_step_seconds = r.grouping.chosen_step_seconds;
  sp.predicted_memory_bytes = m.memory.total();
  sp.tokens_per_sample = spec.data.seq_len;
  sp.active_fraction = 1.0;
  // The cost line: fixed parts summed, per-sample parts weighted by the
  // share of samples each component runs on; the forward share weighted by
  // each component's time on a full micro-batch.
  double forward = 0, total = 0;
  for (size_t i = 0; i < r.workload.sections.size() && i < m.sections.size(); ++i) {
    SectionWork sw = r.workload.sections[i];
    sw.device = m.devices.front().device;
    sw.sink = true;  // as EvaluateReplica prices it: one micro-batch in flight
    const plan::MicroBatchCost c = MicroBatchCostOf(model, sw, m.sections[i]);
    const double p = sw.active_fraction;
    sp.cost.fixed_seconds += c.fixed_seconds;
    sp.cost.seconds_per_sample += p * c.seconds_per_sample;
    sp.cost.optimizer_seconds += c.optimizer_seconds;
    const double full = c.fixed_seconds + p * c.seconds_per_sample * m.config.micro_batch;
    forward += c.forward_share * full;
    total += full;
    sp.cost.measured = (i == 0 || sp.cost.measured) && c.measured;
  }
  sp.cost.forward_share = total > 0 ? forward / total : 1.0;
  sp.components = components;
  for (auto& c : sp.components) {
    c.config = m.config;
    c.placement = plan::Placement();
    c.cost = plan::MicroBatchCost();
    c.run_ahead = 0;  // one process runs every component in order: nothing runs ahead
  }
  return sp;
}

// Section `i` of the plan: its configuration and placement (in het component
// `group`, ranks from `first_rank`) and the predictions the runtime reads.
plan::SectionPlan SectionPlanOf(const Spec& spec, const CostModel& model, const CompileResult& r, size_t i,
                                const NodeGroupChoice& group, int component, int first_rank) {
  const SectionSpec& ss = spec.sections[i];
  const SectionWork& sw = r.workload.sections[i];
  const SectionCost& c = r.assignment.sections[i].cost;
  const DeviceType& d = model.devices()[static_cast<size_t>(sw.device)];
  plan::SectionPlan sp;
  sp.name = ss.name;
  sp.mode = ss.mode;
  sp.activation = ss.activation;
  sp.model = sw.model;
  sp.optimizer = ss.optimizer;
  sp.config = c.config;
  sp.placement.het_component = component;
  sp.placement.first_rank = first_rank;
  sp.placement.nodes = group.nodes;
  sp.placement.tasks_per_node = group.tasks_per_node;
  sp.placement.gpus_per_task = d.cpu ? 0 : 1;
  sp.placement.gpu_type = d.name;
  sp.placement.partition = d.partition;
  sp.placement.constraint = d.constraint;
  sp.predicted_step_seconds = c.step_seconds;
  sp.predicted_memory_bytes = c.memory.total();
  sp.tokens_per_sample = sw.tokens;
  sp.active_fraction = sw.active_fraction;
  sp.predicted_utilization = PredictedUtilization(c, d, r.assignment.bottleneck_seconds);
  sp.planner_only = r.assignment.sections[i].planner_only;
  sp.init_from = ss.init_from;
  sp.init_section = ss.init_section;
  sp.run_ahead = r.assignment.sections[i].run_ahead;
  sp.loss = ss.loss;
  sp.cost = MicroBatchCostOf(model, sw, c);
  return sp;
}

// 0, 1, ... one per section of `w`.
std::vector<int> AllSections(const Workload& w) {
  std::vector<int> all(w.sections.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return all;
}

// plan.json's contents: one SectionPlan per section (ranks numbered het
// component by component, PackNodeGroups's order), one EdgePlan per edge, the
// data and job settings; validated (an invalid plan is a bug) and laid out.
StatusOr<plan::Plan> BuildPlan(const Spec& spec, const CostModel& model, const CompileResult& r) {
  plan::Plan p;
  p.job_name = spec.job.name;
  p.spec_path = spec.path;
  p.work_dir = spec.job.work_dir;
  p.predicted_step_seconds = r.grouping.chosen_step_seconds;
  p.sections.resize(spec.sections.size());
  // A fused plan's components carry no placement of their own (FusedSectionOf).
  const std::vector<NodeGroupChoice> groups =
      r.grouping.fused ? std::vector<NodeGroupChoice>{NodeGroupChoice{0, 1, 1, AllSections(r.workload)}}
                       : PackNodeGroups(model, r.workload, r.assignment.sections);
  int next_rank = 0;
  for (size_t k = 0; k < groups.size(); ++k) {
    for (int i : groups[k].sections) {
      p.sections[static_cast<size_t>(i)] =
          SectionPlanOf(spec, model, r, static_cast<size_t>(i), groups[k], static_cast<int>(k), next_rank);
      next_rank += r.assignment.sections[static_cast<size_t>(i)].cost.gpus;
    }
  }
  std::vector<plan::EdgePlan> edges;
  for (const auto& ew : r.workload.edges) {
    plan::EdgePlan ep;
    ep.from = spec.sections[static_cast<size_t>(ew.from)].name;
    ep.to = spec.sections[static_cast<size_t>(ew.to)].name;
    ep.tensor = ew.tensor;
    ep.bytes_per_sample = static_cast<int64_t>(ew.bytes_per_sample);
    ep.carries_gradient = ew.carries_gradient;
    ep.seconds_per_sample = ew.bytes_per_sample / std::max(ew.link_bytes_per_s, 1.0);
    edges.push_back(ep);
  }
  if (r.grouping.fused) {
    plan::SectionPlan fused = FusedSectionOf(spec, model, r, p.sections);
    fused.component_edges = std::move(edges);
    p.sections = {std::move(fused)};
  } else {
    p.edges = std::move(edges);
  }
  p.data.manifest = spec.data.manifest;
  p.data.global_batch = spec.data.global_batch;
  p.data.seq_len = spec.data.seq_len;
  p.data.seed = spec.data.seed;
  p.data.steps = spec.job.steps;
  p.data.modalities = spec.data.modalities;
  p.data.dataset = spec.data.dataset;
  p.data.corpus = spec.data.corpus;
  p.data.sample_rule = spec.data.sample_rule;
  p.data.eos_id = spec.data.eos_id;
  p.data.pad_id = spec.data.pad_id;
  p.data.image_token_id = spec.data.image_token_id;
  p.data.max_images_per_sample = spec.data.max_images_per_sample;
  p.data.audio_token_id = spec.data.audio_token_id;
  p.data.max_audios_per_sample = spec.data.max_audios_per_sample;
  p.data.image_resolution = spec.data.image_resolution;
  p.data.image_min_pixels = spec.data.image_min_pixels;
  p.data.image_max_pixels = spec.data.image_max_pixels;
  p.data.video_token_id = spec.data.video_token_id;
  p.data.on_bad_sample = spec.data.on_bad_sample;
  p.data.allow_absolute_image_paths = spec.data.allow_absolute_image_paths;
  p.data.image_mean = spec.data.image_mean;
  p.data.image_std = spec.data.image_std;
  p.data.test_corpus = spec.data.test_corpus;
  p.checkpoint_every = spec.job.checkpoint_every;
  p.checkpoint_minutes = spec.job.checkpoint_minutes;
  p.keep_checkpoints = spec.job.keep_checkpoints;
  p.checkpoint_async = spec.job.checkpoint_async;
  p.comm_timeout_s = spec.job.comm_timeout_s;
  p.shared_cores = spec.cluster.local ? spec.cluster.local_cores : 0;
  p.schedule_policy = spec.job.schedule;
  p.spool_gib = spec.job.spool_gib;
  p.spool_dtype = spec.job.spool_dtype;
  p.schedule_max_in_flight = r.grouping.fused ? 0 : r.workload.max_in_flight;
  Status valid = plan::Validate(p);
  if (!valid.ok()) return Status::Internal("maestro-compile built an invalid plan (a bug): " + valid.message());
  plan::FillLayout(p);
  return p;
}

// The job's alternatives (compiler/job_pricing.h), priced on the sectioned
// and the fused plan as BuildPlan makes them, and the choice over the job:
// the grouping into `r`, the spools' reuse across epochs returned.
StatusOr<bool> ChooseOverTheJob(const Spec& spec, const CompileOptions& options, const CostModel& model,
                                const PlannerOptions& po, CompileResult& r) {
  MAESTRO_ASSIGN_OR_RETURN(const JobLength length, JobLengthOf(spec));
  std::optional<plan::Plan> sectioned, fused;
  CompileResult as = r;
  if (r.grouping.no_sectioned.empty()) {
    as.grouping.fused = false;
    if (StatusOr<plan::Plan> p = BuildPlan(spec, model, as); p.ok()) sectioned = std::move(*p);
  }
  if (FusedPlanBlocker(r, po.support).empty()) {
    as.grouping.fused = true;
    if (StatusOr<plan::Plan> p = BuildPlan(spec, model, as); p.ok()) fused = std::move(*p);
  }
  r.job = PriceJob(spec, model, po, r, length, sectioned ? &*sectioned : nullptr, fused ? &*fused : nullptr);
  return ChooseOverJob(options, r.job, r);
}

}  // namespace

StatusOr<CompileResult> Compile(const Spec& given_spec, const CompileOptions& options) {
  CompileResult r;
  // The workload: the spec as compiled, its GPU types, the cost model's view.
  MAESTRO_ASSIGN_OR_RETURN(const Spec spec, EffectiveSpec(given_spec, options));
  MAESTRO_RETURN_IF_ERROR(CheckProfileSections(spec, options.extra_profiles));
  const std::vector<DeviceType> devices = DevicesOf(spec);
  MAESTRO_ASSIGN_OR_RETURN(r.workload, BuildWorkload(spec, devices, options.extra_profiles));
  const CostModel model(devices, spec.data.global_batch);
  const PlannerOptions po = PlannerOptionsOf(spec, options);
  MarkPipelineStreams(spec, po.support, &r.workload);

  PlanOutcome outcome;
  if (LocalGpusTooFewForSections(spec)) {
    outcome.evaluated.assign(r.workload.sections.size(), 0);
    outcome.fitting.assign(r.workload.sections.size(), 0);
    MAESTRO_RETURN_IF_ERROR(PlanFusedOnly(spec, options, model, po, r));
  } else {
    MAESTRO_ASSIGN_OR_RETURN(outcome, PlanSectionedAndChoose(spec, options, model, po, r));
  }

  // The choice over the whole job, then the outputs.
  MAESTRO_ASSIGN_OR_RETURN(const bool spool_reuse, ChooseOverTheJob(spec, options, model, po, r));
  MAESTRO_ASSIGN_OR_RETURN(r.plan, BuildPlan(spec, model, r));
  r.job.spool_reuse = spool_reuse;
  r.plan.spool_reuse = spool_reuse;  // what the job was priced for, the runtime does
  r.plan.offline_spool_pass = std::any_of(r.job.alternatives.begin(), r.job.alternatives.end(),
                                          [](const JobAlternative& a) { return a.chosen && a.name == "offline"; });
  if (spec.job.epochs > 0) r.plan.data.steps = r.job.length.steps;
  MAESTRO_RETURN_IF_ERROR(CheckPlanStarts(spec, options, r.plan));
  MAESTRO_ASSIGN_OR_RETURN(r.sbatch, RenderSbatch(r.plan, spec, options));
  const Report report = BuildReport(spec, model, r, options);
  r.report = ReportText(report);
  r.report_json = ReportJson(report);
  r.warnings = report.warnings;
  r.explain = PrintableLines(RenderExplain(model, po, r, outcome));  // a spec's strings, escaped
  return r;
}

Status WriteOutputs(const CompileResult& r, const CompileOptions& options) {
  const std::string dir = options.out_dir.empty() ? "." : options.out_dir;
  MAESTRO_RETURN_IF_ERROR(CreateDirectories(dir));
  const std::string plan_json = plan::PlanToJson(r.plan) + "\n";  // what plan::SavePlan writes
  return WriteFilesAtomically({{dir + "/plan.json", plan_json, 0644},
                               {dir + "/job.sbatch", r.sbatch, 0755},
                               {dir + "/report.txt", r.report, 0644},
                               {dir + "/report.json", r.report_json + "\n", 0644}});
}

}  // namespace maestro::compiler
