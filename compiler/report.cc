// SPDX-License-Identifier: Apache-2.0
#include "compiler/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "base/text.h"
#include "base/units.h"
#include "compiler/config_text.h"
#include "compiler/job_pricing.h"
#include "compiler/workload_builder.h"
#include "plan/teacher_rows.h"

namespace maestro::compiler {

double PredictedUtilization(const SectionCost& c, const DeviceType& d, double step_seconds) {
  if (step_seconds <= 0 || c.gpus <= 0) return 0;
  return c.useful_flops_per_step / (c.gpus * d.peak_flops * step_seconds);
}

// ---- the model ------------------------------------------------------------------

namespace {

ReportSection SectionRowOf(const SectionWork& s, const SectionChoice& choice, const DeviceType& d, double step) {
  const SectionCost& c = choice.cost;
  ReportSection row;
  row.name = s.name;
  row.kind = s.model.kind;
  row.params = s.facts.params;
  row.mode = s.mode;
  row.active_fraction = s.active_fraction;
  row.tokens_per_sample = s.tokens;
  row.gpus = c.gpus;
  // Where sections share nodes, c.nodes counts GPUs: the nodes its GPUs fill.
  row.nodes = d.shared_node ? 1 : d.packs_nodes ? (c.gpus + d.gpus_per_node - 1) / d.gpus_per_node : c.nodes;
  row.gpu_type = d.name;
  row.config = c.config;
  row.step_seconds = c.step_seconds;
  row.share_of_step = step > 0 ? c.step_seconds / step : 0;
  row.memory = c.memory;
  row.memory_capacity = d.memory_bytes;
  row.flops_forward_per_sample = c.flops_forward_per_sample;
  row.flops_backward_per_sample = c.flops_backward_per_sample;
  row.utilization = PredictedUtilization(c, d, step);
  row.measured_profile = c.measured;
  row.planner_only = choice.planner_only;
  row.run_ahead = choice.run_ahead;
  row.mix_kinds = static_cast<int>(s.mix_work.size());
  row.attention_context = s.attention_context;
  row.peak_tokens_per_sample = s.peak_tokens;
  row.peak_attention_sequence = s.peak_context;
  return row;
}

ReportEdge EdgeRowOf(const Workload& w, const Assignment& a, size_t e) {
  const EdgeWork& ew = w.edges[e];
  ReportEdge row;
  row.from = w.sections[static_cast<size_t>(ew.from)].name;
  row.to = w.sections[static_cast<size_t>(ew.to)].name;
  row.tensor = ew.tensor;
  row.dp_from = a.sections[static_cast<size_t>(ew.from)].cost.config.dp;
  row.dp_to = a.sections[static_cast<size_t>(ew.to)].cost.config.dp;
  row.bytes_per_sample = ew.bytes_per_sample;
  row.carries_gradient = ew.carries_gradient;
  row.seconds_per_step = a.edge_seconds[e];
  return row;
}

// Per GPU type, the GPUs of the nodes the sectioned plan holds (local mode:
// the slots its sections run on). Ratios per GPU count these.
std::vector<int> GpusHeldPerDevice(const CostModel& model, const Workload& w, const Assignment& a) {
  const auto& devs = model.devices();
  std::vector<int> held(devs.size(), 0);
  for (size_t i = 0; i < w.sections.size(); ++i) {
    const size_t d = static_cast<size_t>(w.sections[i].device);
    if (devs[d].shared_node) held[d] += a.sections[i].cost.gpus;
  }
  for (size_t d = 0; d < devs.size(); ++d) {
    if (!devs[d].shared_node && d < a.nodes_per_device.size()) held[d] = a.nodes_per_device[d] * devs[d].gpus_per_node;
  }
  return held;
}

// The GPUs of the nodes the monolithic baseline holds: whole nodes of each
// type it runs on (local mode: its slots).
int MonolithicGpusHeld(const CostModel& model, const MonolithicPlan& m) {
  if (m.devices.size() != 1) {
    int held = 0;
    for (const auto& d : m.devices) held += d.gpus;
    return std::max(held, m.gpus);
  }
  const DeviceType& d = model.devices()[static_cast<size_t>(m.devices.front().device)];
  if (d.shared_node || d.gpus_per_node <= 0) return m.gpus;
  return (m.gpus + d.gpus_per_node - 1) / d.gpus_per_node * d.gpus_per_node;
}

// The baseline and the speed-up: simulated step times when both plans were
// simulated, else the analytic steady states; per GPU and per peak FLOP/s of
// the GPUs of the nodes each plan holds.
ReportMonolithic MonolithicOf(const CostModel& model, const CompileResult& r) {
  const auto& devs = model.devices();
  const Workload& w = r.workload;
  const Assignment& a = r.assignment;
  const MonolithicPlan& m = r.monolithic;
  ReportMonolithic out;
  out.plan = m;
  out.simulated = r.monolithic_simulated;
  if (!m.found) return out;
  for (const auto& d : m.devices) out.gpu_type_names.push_back(devs[static_cast<size_t>(d.device)].name);
  out.description = DescribeMonolithic(m);
  const SimulatedStep& sim = r.simulated;
  const SimulatedStep& msim = r.monolithic_simulated;
  out.speedup_simulated = sim.ok && msim.ok && sim.step_seconds > 0;
  double held_peak = 0;  // peak FLOP/s of the GPUs of the nodes the sectioned plan holds
  int held_gpus = 0;
  const std::vector<int> held = GpusHeldPerDevice(model, w, a);
  for (size_t d = 0; d < held.size(); ++d) {
    held_peak += held[d] * devs[d].peak_flops;
    held_gpus += held[d];
  }
  const int mono_held = MonolithicGpusHeld(model, m);
  out.speedup_analytic = a.throughput / m.throughput;
  out.speedup = out.speedup_simulated ? msim.step_seconds / sim.step_seconds : out.speedup_analytic;
  out.speedup_per_gpu = out.speedup * mono_held / std::max(1, held_gpus);
  const double mono_peak = m.peak_flops > 0 && m.gpus > 0
                               ? m.peak_flops * mono_held / m.gpus
                               : mono_held * devs[static_cast<size_t>(r.monolithic_device)].peak_flops;
  out.speedup_per_peak_flops = held_peak > 0 ? out.speedup * mono_peak / held_peak : 0;
  if (r.grouping.fused) {
    // The plan runs every component on the baseline's GPUs, fused: at the
    // baseline's configuration (speed-up 1), or at the best one the spec's
    // pins allow (the baseline's step over its own).
    out.sectioned_speedup = out.speedup;
    out.fused_config = r.fused.config;
    out.fused_pins = r.fused_pins;
    const bool same = r.fused_is_baseline;
    const SimulatedStep& fsim = r.fused_simulated;
    out.speedup_analytic = same ? 1.0 : m.step_seconds / r.fused.step_seconds;
    out.speedup = same                                                        ? 1.0
                  : out.speedup_simulated && fsim.ok && fsim.step_seconds > 0 ? msim.step_seconds / fsim.step_seconds
                                                                              : out.speedup_analytic;
    out.speedup_per_gpu = out.speedup_per_peak_flops = out.speedup;
  }
  if (r.grouping.baseline) {
    // One component at the baseline's configuration (compiler/baseline_plan.h):
    // its simulation is the baseline's (speed-up 1), or the pinned
    // configuration's; the rejected sectioned plan keeps its own ratio.
    out.fused_config = r.fused.config;
    out.fused_pins = r.fused_pins;
    out.sectioned_speedup = out.speedup_simulated && r.grouping.rejected_step_seconds > 0
                                ? msim.step_seconds / r.grouping.rejected_step_seconds
                                : 0.0;
    if (r.fused_is_baseline) out.speedup = out.speedup_analytic = out.speedup_per_gpu = out.speedup_per_peak_flops = 1;
  }
  return out;
}

}  // namespace

const char* SplitBoundBasisName(SplitBoundBasis b) {
  switch (b) {
    case SplitBoundBasis::kPlan: return "plan";
    case SplitBoundBasis::kSectionedPlan: return "sectioned_plan";
    case SplitBoundBasis::kFusedPlan: return "fused_plan";
  }
  return "plan";
}

SplitBound SplitBoundOf(const CostModel& model, const Workload& w, const Assignment& a, double plan_step_seconds) {
  const auto& devs = model.devices();
  std::vector<double> work(devs.size(), 0.0);
  const std::vector<int> held = GpusHeldPerDevice(model, w, a);
  SplitBound out;
  for (size_t i = 0; i < w.sections.size(); ++i) {
    // No rounding: the section's samples in full micro-batches of the plan's
    // size, a fractional count of them, each priced at that size. (The
    // plan's own cost prices its micro-batches at their mean fill, which a
    // replica with fewer samples than micro-batches x mb has below mb.)
    const plan::ParallelConfig& config = a.sections[i].cost.config;
    const size_t d = static_cast<size_t>(w.sections[i].device);
    const double active = static_cast<double>(model.global_batch()) * w.sections[i].active_fraction;
    const double microbatches = active / (config.dp * config.micro_batch);
    const SectionCost c = model.EvaluateWith(w.sections[i], config, std::max(microbatches, 1e-9), config.micro_batch);
    // A training pipeline fills and drains every step (its weights change
    // between steps: nothing can stream across them), like its DP sync and
    // optimizer a per-step cost of its configuration; a frozen section runs
    // ahead and pays none.
    const double fill = w.sections[i].trains() ? (config.pp - 1) * c.stage_seconds : 0.0;
    work[d] += c.gpus * (microbatches * c.stage_seconds + fill + c.dp_sync_seconds + c.optimizer_seconds);
  }
  for (size_t d = 0; d < devs.size(); ++d) {
    out.gpus_held += held[d];
    if (held[d] > 0) out.step_seconds = std::max(out.step_seconds, work[d] / held[d]);
  }
  out.fraction = plan_step_seconds > 0 ? out.step_seconds / plan_step_seconds : 0;
  return out;
}

// The spools plan `p` keeps, priced: a KD teacher's rows by their form, any
// other section's rows (its out edge's fp32 wire values) in the spool dtype.
std::vector<ReportSpool> SpoolsOf(const plan::Plan& p) {
  std::vector<ReportSpool> out;
  for (int i = 0; i < static_cast<int>(p.sections.size()); ++i) {
    if (!plan::KeepsSpool(p, i)) continue;
    const plan::SectionPlan& s = p.sections[static_cast<size_t>(i)];
    ReportSpool row;
    row.section = s.name;
    row.bytes_per_sample = SpoolBytesPerSample(p, i, &row.rows);
    row.budget_bytes = static_cast<double>(plan::SpoolBudgetPerWriter(p, i)) * std::max(1, s.config.dp);
    row.samples_fit = row.bytes_per_sample > 0 ? static_cast<int64_t>(row.budget_bytes / row.bytes_per_sample) : 0;
    out.push_back(row);
  }
  return out;
}

Report BuildReport(const Spec& spec, const CostModel& model, const CompileResult& r, const CompileOptions& options) {
  const Workload& w = r.workload;
  const Assignment& a = r.assignment;
  const auto& devs = model.devices();
  Report out;
  out.job = spec.job.name;
  out.spec_path = spec.path;
  out.global_batch = spec.data.global_batch;
  out.seq_len = spec.data.seq_len;
  for (size_t d = 0; d < devs.size(); ++d) out.budgets.push_back({devs[d], a.nodes_per_device[d]});
  for (size_t i = 0; i < w.sections.size(); ++i) {
    out.sections.push_back(SectionRowOf(w.sections[i], a.sections[i], devs[static_cast<size_t>(w.sections[i].device)],
                                        a.bottleneck_seconds));
  }
  for (size_t e = 0; e < w.edges.size(); ++e) out.edges.push_back(EdgeRowOf(w, a, e));
  out.step_seconds = a.bottleneck_seconds;
  out.samples_per_second = a.throughput;
  out.gpus = a.gpus;
  out.nodes_per_gpu_type = a.nodes_per_device;
  out.prediction = r.prediction;
  out.simulated = r.simulated;
  out.monolithic = MonolithicOf(model, r);
  out.grouping = r.grouping;
  if (r.grouping.fused) {
    for (ReportSection& s : out.sections) s.run_ahead = 0;  // one process runs every component in order
  } else {
    out.run_ahead_log = r.run_ahead_log;
    out.max_in_flight = r.workload.max_in_flight;
    out.in_flight_log = r.in_flight_log;
  }
  // The split bound splits the sectioned plan's work; without one there is none.
  if (r.grouping.no_sectioned.empty()) out.split_bound = SplitBoundOf(model, w, a, r.grouping.chosen_step_seconds);
  if (r.grouping.fused) out.split_bound.basis = SplitBoundBasis::kSectionedPlan;
  if (r.grouping.fused && out.split_bound.step_seconds > r.grouping.chosen_step_seconds) {
    // The bound prices the work at the sectioned plan's per-GPU times; a
    // fused plan that beats it has better ones (every GPU on every
    // component, larger micro-batches): the bound is then the fused plan.
    out.split_bound.step_seconds = r.grouping.chosen_step_seconds;
    out.split_bound.fraction = 1.0;
    out.split_bound.basis = SplitBoundBasis::kFusedPlan;
  }
  if (options.support_given && !spec.cluster.local) out.planned_runtime_support = RuntimeSupportText(options.support);
  out.spools = SpoolsOf(plan::ExpandFusedSections(r.plan));
  out.job_pricing = r.job;
  out.checkpoint = PredictCheckpoint(spec, r.plan);
  out.checkpoint_async = r.plan.checkpoint_async;
  if (std::string warning = SignalLeadWarning(spec, out.checkpoint, r.grouping.chosen_step_seconds); !warning.empty()) {
    out.warnings.push_back(std::move(warning));
  }
  return out;
}

// ---- the text -------------------------------------------------------------------

namespace {

std::string PadRight(const std::string& s, size_t w) {
  return s.size() >= w ? s : s + std::string(w - s.size(), ' ');
}

std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string l;
    for (size_t i = 0; i < r.size(); ++i) l += (i ? "  " : "") + (i + 1 < r.size() ? PadRight(r[i], width[i]) : r[i]);
    out += l + "\n";
  }
  return out;
}

std::string BudgetText(const ReportBudget& b) {
  const DeviceType& d = b.device;
  if (d.shared_node && !d.cpu) {  // maestro run on this machine's GPUs (--local-gpu)
    std::string t = fmt::format(
        "local mode: one node of {} '{}' GPU(s) ({:.4g} GB, {:.4g} TFLOP/s each{}), one rank each; plan uses {}\n",
        d.gpus_per_node, d.name, d.memory_bytes / 1e9, d.peak_flops / 1e12,
        d.kernels ? fmt::format("; kernels {}", PrintableText(d.kernels_origin)) : "", b.nodes_held);
    if (!d.kernels_note.empty()) t += "  note: " + PrintableText(d.kernels_note) + "\n";
    return t;
  }
  if (d.shared_node) {
    return fmt::format(
        "local mode: one node of {} '{}' slot(s) ({:.4g} GB, {:.4g} TFLOP/s each{}) that the sections "
        "share; plan uses {}{}\n",
        d.gpus_per_node, d.name, d.memory_bytes / 1e9, d.peak_flops / 1e12,
        d.kernels ? fmt::format("; kernels {}", PrintableText(d.kernels_origin)) : "", b.nodes_held,
        d.shared_cores > 0 ? fmt::format("; the ranks share {} core(s)", d.shared_cores) : "");
  }
  std::string t =
      fmt::format("budget '{}': {} node(s) x {} {} ({:.4g} GB, {:.4g} TFLOP/s each{}); plan holds {} node(s)\n", d.name,
                  d.nodes, d.gpus_per_node, d.cpu ? "CPU slots" : "GPUs", d.memory_bytes / 1e9, d.peak_flops / 1e12,
                  d.kernels ? fmt::format("; kernels {}", PrintableText(d.kernels_origin)) : "", b.nodes_held);
  if (!d.kernels_note.empty() && !d.cpu) t += "  note: " + PrintableText(d.kernels_note) + "\n";
  return t;
}

std::string SectionTable(const std::vector<ReportSection>& sections) {
  std::vector<std::vector<std::string>> rows = {{"section", "model", "mode", "active", "GPUs", "type", "TP", "PP", "CP",
                                                 "DP", "mb", "recomp", "share", "mem/GPU GiB", "util", "runtime"}};
  for (const ReportSection& s : sections) {
    rows.push_back({s.name,
                    fmt::format("{} {}", plan::ModelKindName(s.kind), HumanCount(static_cast<double>(s.params))),
                    plan::SectionModeName(s.mode), fmt::format("{:.0f}%", 100 * s.active_fraction),
                    std::to_string(s.gpus), s.gpu_type, std::to_string(s.config.tp), std::to_string(s.config.pp),
                    std::to_string(s.config.cp), std::to_string(s.config.dp), std::to_string(s.config.micro_batch),
                    plan::RecomputeGranularityName(s.config.recompute_granularity()),
                    fmt::format("{:.0f}%", 100 * s.share_of_step),
                    fmt::format("{}/{:.0f}", GiBText(s.memory.total()), s.memory_capacity / kGiB),
                    fmt::format("{:.0f}%", 100 * s.utilization), s.planner_only.empty() ? "yes" : "planner-only"});
  }
  return Table(rows);
}

std::string EdgeText(const ReportEdge& e) {
  const bool nested = e.dp_to % e.dp_from == 0 || e.dp_from % e.dp_to == 0;
  const std::string fan =
      !nested ? fmt::format("{} links by overlapping shares", e.dp_from + e.dp_to - std::gcd(e.dp_from, e.dp_to))
      : e.dp_to >= e.dp_from ? fmt::format("fan-out {}", e.dp_to / e.dp_from)
                             : fmt::format("fan-in {}", e.dp_from / e.dp_to);
  return fmt::format("edge {} -> {} ({}): {} (DP {} -> {}), {}/sample{}, {:.3g} s/step of transfer\n", e.from, e.to,
                     PrintableText(e.tensor), fan, e.dp_from, e.dp_to, HumanBytes(e.bytes_per_sample),
                     e.carries_gradient ? " (+ gradient back)" : "", e.seconds_per_step);
}

std::string StepText(const Report& r) {
  std::string t = fmt::format(
      "analytic steady state: {:.4g} s/step -> {:.4g} samples/s on {} GPU(s) (the slowest section or "
      "edge)\n",
      r.step_seconds, r.samples_per_second, r.gpus);
  const SimulatedStep& sim = r.simulated;
  if (!sim.ok) {
    return t + fmt::format("simulated step: none ({}); predicted {:.4g} s ({})\n", sim.error, r.prediction.step_seconds,
                           r.prediction.predictor);
  }
  t += fmt::format(
      "simulated step: {:.4g} s -> {:.4g} samples/s ({} schedule, mean of {} sampled global batches, "
      "{:.4g}..{:.4g} s)\n",
      sim.step_seconds, r.prediction.samples_per_second, sim.policy, sim.batches, sim.min_step_seconds,
      sim.max_step_seconds);
  std::vector<std::vector<std::string>> srows = {
      {"  section", "replicas", "busy", "idle s/replica", "bubbles/replica"}};
  for (const auto& ss : sim.sections) {
    srows.push_back({"  " + ss.name, std::to_string(ss.replicas), fmt::format("{:.0f}%", 100 * ss.utilization),
                     fmt::format("{:.4g}", ss.bubble_seconds), fmt::format("{:.1f}", ss.bubbles)});
  }
  return t + Table(srows);
}

// The grouping line: what the plan runs and the best rejected alternative.
std::string GroupingText(const Report& r) {
  const GroupingChoice& g = r.grouping;
  std::string t = fmt::format("grouping: {}\n", g.why);
  if (g.fused && !g.no_sectioned.empty()) {
    t += fmt::format(
        "  the plan runs all {} components in one fused section on every GPU ({}); no sectioned plan ({}): the "
        "table below is each component under that configuration\n",
        r.sections.size(), ConfigText(r.monolithic.fused_config), g.no_sectioned);
  } else if (g.fused) {
    t += fmt::format(
        "  the plan runs all {} components in one fused section on every GPU ({}); rejected: the sectioned plan "
        "below, {:.4g} s/step ({:.2f}x)\n",
        r.sections.size(), ConfigText(r.monolithic.fused_config), g.rejected_step_seconds,
        r.monolithic.sectioned_speedup);
  } else if (g.baseline) {
    t += fmt::format(
        "  the plan is its one component at {}; rejected: the sectioned search's plan, {:.4g} s/step "
        "({:.2f}x)\n",
        r.monolithic.fused_pins.empty() ? "the baseline's configuration" : "the best configuration the pins allow",
        g.rejected_step_seconds, r.monolithic.sectioned_speedup);
  } else if (!g.rejected.empty()) {
    t += fmt::format("  rejected: every component fused in one section on every GPU ({}), {:.4g} s/step\n",
                     r.monolithic.fused_pins.empty()
                         ? "the baseline's configuration"
                         : "the best configuration the pins allow: " + r.monolithic.fused_pins,
                     g.rejected_step_seconds);
  }
  return t;
}

std::string MonolithicText(const ReportMonolithic& mono, int64_t global_batch) {
  const MonolithicPlan& m = mono.plan;
  if (!m.found) return "monolithic baseline: none: " + m.why_not + "\n";
  std::string t = fmt::format(
      "monolithic baseline: every section on all {} GPU(s), one after another; {}: analytic {:.4g} s/step, "
      "{} GiB/GPU{}\n",
      m.gpus, ConfigText(m.config), m.step_seconds, GiBText(m.memory.total()),
      m.planner_only.empty() ? "" : " (uses features our runtime lacks: " + m.planner_only + ")");
  t += mono.description;
  const SimulatedStep& msim = mono.simulated;
  if (msim.ok) {
    t += fmt::format(
        "  simulated: {:.4g} s -> {:.4g} samples/s ({} over the same sampled batches, {:.4g}..{:.4g} s; "
        "busy {:.0f}%)\n",
        msim.step_seconds, global_batch / msim.step_seconds, msim.policy, msim.min_step_seconds, msim.max_step_seconds,
        100 * msim.utilization);
  }
  t += fmt::format(
      "speed-up vs monolithic: {:.2f}x ({}; per GPU: {:.2f}x, per peak FLOP/s: {:.2f}x); analytic steady "
      "state: {:.2f}x\n",
      mono.speedup, mono.speedup_simulated ? "simulated step times" : "analytic", mono.speedup_per_gpu,
      mono.speedup_per_peak_flops, mono.speedup_analytic);
  return t;
}

}  // namespace

std::string ReportText(const Report& r) {
  std::string t;
  // A spec's strings and file name may hold control characters (a newline
  // would forge a line of the report, an ESC drive the terminal): the ones
  // that can are escaped where they go in, and the whole text once more.
  t += fmt::format("maestro-compile: job '{}' from {}\n", PrintableText(r.job), PrintableText(r.spec_path));
  t += fmt::format("global batch {} samples, seq_len {}; {} section(s), {} edge(s)\n", r.global_batch, r.seq_len,
                   r.sections.size(), r.edges.size());
  for (const ReportBudget& b : r.budgets) t += BudgetText(b);
  t += GroupingText(r);
  t += "\n";
  t += SectionTable(r.sections);
  for (const ReportEdge& e : r.edges) t += EdgeText(e);
  for (const ReportSection& s : r.sections) {
    if (s.mix_kinds == 0) continue;
    t += fmt::format(
        "mix: section '{}' reads {} kinds of sample ([[data.modality.mix]]): priced at their mean, {} tokens at an "
        "attention context of {}; memory at the largest, {} tokens (its longest attention sequence {})\n",
        s.name, s.mix_kinds, s.tokens_per_sample, s.attention_context, s.peak_tokens_per_sample,
        s.peak_attention_sequence);
  }
  for (const ReportSpool& s : r.spools) {
    t += fmt::format(
        "spool: section '{}' keeps its {}: {} a sample; its share of the spool ({}, [job] spool_gib) holds {} "
        "samples ({} global batches)\n",
        s.section, s.rows, HumanBytes(s.bytes_per_sample), HumanBytes(s.budget_bytes), s.samples_fit,
        r.global_batch > 0 ? s.samples_fit / r.global_batch : 0);
  }
  t += "\n";
  t += StepText(r);
  t += JobText(r.job_pricing, r.global_batch);
  t += MonolithicText(r.monolithic, r.global_batch);
  if (r.split_bound.step_seconds > 0) {
    const SplitBoundBasis basis = r.split_bound.basis;
    if (basis == SplitBoundBasis::kFusedPlan) {
      t += fmt::format(
          "split bound: {:.4g} s/step, the fused plan's own step (the {} GPU(s) held split by each section's work at "
          "the sectioned plan's per-GPU times would be slower: every component on every GPU has better ones); this "
          "plan reaches {:.0f}% of it\n",
          r.split_bound.step_seconds, r.split_bound.gpus_held, 100 * r.split_bound.fraction);
    } else {
      t += fmt::format(
          "split bound: {:.4g} s/step (the {} GPU(s) held split by each section's work at {}: no whole nodes, no "
          "rounding, frozen sections running ahead with no fill; a training pipeline's fill and drain counted as its "
          "own per-step time); this plan reaches {:.0f}% of it\n",
          r.split_bound.step_seconds, r.split_bound.gpus_held,
          basis == SplitBoundBasis::kPlan ? "the plan's per-GPU times"
                                          : "the sectioned plan's per-GPU times (its widths and micro-batches; the "
                                            "fused plan's own, split without rounding, give its step back)",
          100 * r.split_bound.fraction);
    }
  }
  std::string run_ahead;
  for (const ReportSection& s : r.sections) {
    if (s.run_ahead > 0)
      run_ahead += fmt::format("{}{} {} global batch(es)", run_ahead.empty() ? "" : ", ", s.name, s.run_ahead);
  }
  if (!run_ahead.empty()) {
    t += "run-ahead (computes the next batches' rows while the training sections finish this one; the simulated "
         "step prices it): " +
         run_ahead + "\n";
  }
  if (!r.in_flight_log.empty()) {
    t += "in-flight cap (micro-batches a training section that feeds others holds between forward and backward; "
         "the memory model and the simulated step price it): " +
         r.in_flight_log + "\n";
  }
  std::string planner_only;
  for (const ReportSection& s : r.sections) {
    if (!s.planner_only.empty()) planner_only += fmt::format("  {}: {}\n", s.name, s.planner_only);
  }
  if (!planner_only.empty()) t += "planner-only (the runtime cannot run these yet):\n" + planner_only;
  if (!r.planned_runtime_support.empty()) {
    t += fmt::format("planned for a runtime with: {} (--runtime-support, not this build's table)\n",
                     r.planned_runtime_support);
  }
  if (r.checkpoint.state_bytes > 0) {
    t += fmt::format(
        "checkpoint: {} of state (fp32 weights and AdamW moments of the training sections); the busiest node writes "
        "{}: {:.3g} s at {:.3g} GB/s per node ([cluster] checkpoint_write_gbps){}\n",
        HumanBytes(r.checkpoint.state_bytes), HumanBytes(r.checkpoint.busiest_node_bytes), r.checkpoint.write_seconds,
        r.checkpoint.write_bytes_per_s / 1e9,
        r.checkpoint_async ? "; periodic ones are written in the background (a step pays for the copy)" : "");
  }
  for (const std::string& w : r.warnings) t += "warning: " + w + "\n";
  return PrintableLines(t);
}

// ---- the JSON -------------------------------------------------------------------

namespace {

nlohmann::json SectionJson(const ReportSection& s) {
  nlohmann::json j;
  j["name"] = s.name;
  j["model"] = plan::ModelKindName(s.kind);
  j["params"] = s.params;
  j["mode"] = plan::SectionModeName(s.mode);
  j["active_fraction"] = s.active_fraction;
  j["tokens_per_sample"] = s.tokens_per_sample;
  j["gpus"] = s.gpus;
  j["nodes"] = s.nodes;
  j["gpu_type"] = s.gpu_type;
  j["tp"] = s.config.tp;
  j["pp"] = s.config.pp;
  j["cp"] = s.config.cp;
  j["ep"] = s.config.ep;
  j["dp"] = s.config.dp;
  j["micro_batch"] = s.config.micro_batch;
  j["recompute"] = s.config.recompute;
  j["recompute_granularity"] = plan::RecomputeGranularityName(s.config.recompute_granularity());
  j["step_seconds"] = s.step_seconds;
  j["share_of_step"] = s.share_of_step;
  j["memory_bytes"] = {{"weights", s.memory.weights},     {"gradients", s.memory.gradients},
                       {"optimizer", s.memory.optimizer}, {"activations", s.memory.activations},
                       {"reserved", s.memory.reserved},   {"total", s.memory.total()},
                       {"capacity", s.memory_capacity}};
  j["flops_forward_per_sample"] = s.flops_forward_per_sample;
  j["flops_backward_per_sample"] = s.flops_backward_per_sample;
  j["utilization"] = s.utilization;
  j["measured_profile"] = s.measured_profile;
  j["runtime_supported"] = s.planner_only.empty();
  j["planner_only"] = s.planner_only;
  j["run_ahead"] = s.run_ahead;
  if (s.mix_kinds > 0) {
    j["mix"] = {{"kinds", s.mix_kinds},
                {"attention_context", s.attention_context},
                {"peak_tokens_per_sample", s.peak_tokens_per_sample},
                {"peak_attention_sequence", s.peak_attention_sequence}};
  }
  return j;
}

nlohmann::json EdgeJson(const ReportEdge& e) {
  return {{"from", e.from},
          {"to", e.to},
          {"tensor", e.tensor},
          {"dp_from", e.dp_from},
          {"dp_to", e.dp_to},
          {"bytes_per_sample", e.bytes_per_sample},
          {"carries_gradient", e.carries_gradient},
          {"seconds_per_step", e.seconds_per_step}};
}

nlohmann::json SimulationJson(const SimulatedStep& x) {
  if (!x.ok) return {{"ok", false}, {"error", x.error}};
  nlohmann::json secs = nlohmann::json::array();
  for (const auto& ss : x.sections) {
    secs.push_back({{"name", ss.name},
                    {"replicas", ss.replicas},
                    {"utilization", ss.utilization},
                    {"idle_seconds_per_replica", ss.bubble_seconds},
                    {"bubbles_per_replica", ss.bubbles}});
  }
  return {{"ok", true},
          {"policy", x.policy},
          {"batches", x.batches},
          {"step_seconds", x.step_seconds},
          {"min_step_seconds", x.min_step_seconds},
          {"max_step_seconds", x.max_step_seconds},
          {"utilization", x.utilization},
          {"sections", secs}};
}

// Adds "monolithic" and the speed-ups to `js` (null without a baseline).
void AddMonolithicJson(const ReportMonolithic& mono, nlohmann::json& js) {
  const MonolithicPlan& m = mono.plan;
  if (!m.found) {
    js["monolithic"] = nullptr;
    js["speedup_vs_monolithic"] = nullptr;
    return;
  }
  js["monolithic"] = {{"gpus", m.gpus},
                      {"tp", m.config.tp},
                      {"pp", m.config.pp},
                      {"cp", m.config.cp},
                      {"dp", m.config.dp},
                      {"micro_batch", m.config.micro_batch},
                      {"recompute", m.config.recompute},
                      {"recompute_granularity", plan::RecomputeGranularityName(m.config.recompute_granularity())},
                      {"step_seconds", m.step_seconds},
                      {"samples_per_second", m.throughput},
                      {"memory_bytes", m.memory.total()},
                      {"planner_only", m.planner_only},
                      {"basis", m.basis}};
  nlohmann::json terms = nlohmann::json::array();
  for (const auto& term : m.terms) terms.push_back({{"name", term.name}, {"seconds", term.seconds}, {"why", term.why}});
  js["monolithic"]["terms"] = terms;
  nlohmann::json on = nlohmann::json::array();
  for (size_t i = 0; i < m.devices.size(); ++i) {
    on.push_back({{"gpu_type", mono.gpu_type_names[i]}, {"gpus", m.devices[i].gpus}});
  }
  js["monolithic"]["gpu_types"] = on;
  js["monolithic"]["simulation"] = SimulationJson(mono.simulated);
  js["speedup_vs_monolithic"] = mono.speedup;
  js["speedup_source"] = mono.speedup_simulated ? "simulated" : "analytic";
  js["speedup_vs_monolithic_analytic"] = mono.speedup_analytic;
  js["speedup_per_gpu"] = mono.speedup_per_gpu;
  js["speedup_per_peak_flops"] = mono.speedup_per_peak_flops;
}

}  // namespace

std::string ReportJson(const Report& r) {
  nlohmann::json js;
  js["job"] = r.job;
  js["spec"] = r.spec_path;
  js["global_batch"] = r.global_batch;
  nlohmann::json sections = nlohmann::json::array();
  for (const ReportSection& s : r.sections) sections.push_back(SectionJson(s));
  js["sections"] = sections;
  nlohmann::json edges = nlohmann::json::array();
  for (const ReportEdge& e : r.edges) edges.push_back(EdgeJson(e));
  js["edges"] = edges;
  js["step_seconds"] = r.step_seconds;
  js["samples_per_second"] = r.samples_per_second;
  js["predicted_step_seconds"] = r.prediction.step_seconds;
  js["predictor"] = r.prediction.predictor;
  js["simulation"] = SimulationJson(r.simulated);
  js["gpus"] = r.gpus;
  js["nodes_per_gpu_type"] = r.nodes_per_gpu_type;
  nlohmann::json types = nlohmann::json::array();
  for (const ReportBudget& b : r.budgets) {
    types.push_back({{"name", b.device.name},
                     {"kernels", b.device.kernels ? nlohmann::json(b.device.kernels_origin) : nlohmann::json(nullptr)},
                     {"note", b.device.kernels_note}});
  }
  js["gpu_types"] = types;
  AddMonolithicJson(r.monolithic, js);
  js["grouping"] = r.grouping.fused ? "fused" : "sectioned";
  js["grouping_why"] = r.grouping.why;
  js["rejected_grouping"] = r.grouping.rejected.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.grouping.rejected);
  js["rejected_step_seconds"] = r.grouping.rejected_step_seconds;
  js["plan_step_seconds"] = r.grouping.chosen_step_seconds;
  if ((r.grouping.fused || r.grouping.baseline) && r.grouping.no_sectioned.empty()) {
    js["sectioned_speedup_vs_monolithic"] = r.monolithic.sectioned_speedup;
  }
  if (r.grouping.baseline) js["plan_is_baseline"] = true;
  if (!r.grouping.no_sectioned.empty()) js["no_sectioned_plan"] = r.grouping.no_sectioned;
  if (r.grouping.fused && !r.monolithic.fused_pins.empty()) js["fused_pins"] = r.monolithic.fused_pins;
  js["split_bound_seconds"] = r.split_bound.step_seconds;
  js["fraction_of_split_bound"] = r.split_bound.fraction;
  js["gpus_held"] = r.split_bound.gpus_held;
  js["split_bound_basis"] = SplitBoundBasisName(r.split_bound.basis);
  js["max_in_flight"] = r.max_in_flight;
  js["planner_only"] =
      std::any_of(r.sections.begin(), r.sections.end(), [](const ReportSection& s) { return !s.planner_only.empty(); });
  js["checkpoint"] = {{"state_bytes", r.checkpoint.state_bytes},
                      {"busiest_node_bytes", r.checkpoint.busiest_node_bytes},
                      {"write_bytes_per_s", r.checkpoint.write_bytes_per_s},
                      {"predicted_write_seconds", r.checkpoint.write_seconds},
                      {"async", r.checkpoint_async}};
  nlohmann::json spools = nlohmann::json::array();
  for (const ReportSpool& s : r.spools) {
    spools.push_back({{"section", s.section},
                      {"rows", s.rows},
                      {"bytes_per_sample", s.bytes_per_sample},
                      {"budget_bytes", s.budget_bytes},
                      {"samples_fit", s.samples_fit}});
  }
  js["spools"] = spools;
  AddJobJson(r.job_pricing, js);
  js["warnings"] = r.warnings;
  // Invalid UTF-8 would throw (type_error.316); the spec reader refuses it in
  // its own path, and anything else is replaced (U+FFFD) rather than thrown.
  return js.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace maestro::compiler
