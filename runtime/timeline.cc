// SPDX-License-Identifier: Apache-2.0
#include "runtime/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>
#include <memory>
#include <utility>

#include "base/checks.h"
#include "base/files.h"
#include "base/line_fit.h"
#include "runtime/cost_model.h"

namespace maestro::runtime {

MeasuredStep MeasureStep(const plan::Plan& plan, const scheduler::Schedule& schedule, int64_t step,
                         const nlohmann::json& events) {
  MeasuredStep result;
  scheduler::Simulation& measured = result.timeline;
  measured.policy = schedule.policy;
  for (const auto& rp : schedule.ranks) measured.ranks.push_back({rp.section, rp.replica, 0.0, 0.0, 0});
  for (const auto& sp : plan.sections) measured.sections.push_back({sp.name, sp.config.dp, 0.0, 0.0, 0.0});
  int64_t t0 = INT64_MAX, t1 = 0;
  // Every rank's computing intervals of this step (TP ranks too: with shared
  // cores they compete), and each TP-0 op's time alone on a core.
  std::vector<std::pair<double, double>> computing;
  std::vector<size_t> op_interval;  // measured.ops[i] <-> computing[op_interval[i]]
  for (const auto& e : events) {
    if (e.value("ph", "") != "X" || !e.contains("args") || e["args"].value("step", int64_t{-1}) != step) continue;
    const std::string name = e.value("name", "");
    // A<m>: a frozen section's micro-batch computed ahead (trace.h); the
    // simulator's steady state has its ranks compute the next batch's rows in
    // this step's forward ops, so the A ops are its forwards here, and an F
    // op that computed nothing (the rows read back) is not.
    if (name.empty()) continue;
    const bool ahead = name[0] == 'A';  // A<m>; the "ahead" op after them is lowercase
    if (name[0] != 'F' && name[0] != 'B' && name[0] != 'O' && !ahead) continue;
    const double ts_s = e.value("ts", 0.0) * 1e-6;
    computing.push_back({ts_s, ts_s + e.value("dur", 0.0) * 1e-6});
    const int computed = e["args"].value("computed", -1);
    if (name[0] == 'F' && computed == 0) continue;
    auto coords = plan::CoordsOfRank(plan, e.value("tid", -1));
    // One rank per replica: TP 0 and, with pipeline stages, the first
    // (docs/pipeline.md: its ops time one stage's share of the section).
    if (!coords.ok() || coords->tp != 0 || coords->pp != 0) continue;
    scheduler::OpInterval op;
    op.rank = schedule.RankIndex(coords->section, coords->dp);
    if (op.rank < 0) continue;
    op.kind = name[0] == 'F' || ahead ? scheduler::OpKind::kForward
              : name[0] == 'B'        ? scheduler::OpKind::kBackward
                                      : scheduler::OpKind::kOptimizer;
    op.micro_batch = name.size() > 1 ? std::atoi(name.c_str() + 1) : -1;
    op.samples = computed >= 0 ? computed : e["args"].value("samples", 0);
    const int64_t ts = e.value("ts", int64_t{0}), dur = e.value("dur", int64_t{0});
    op.start = static_cast<double>(ts);
    op.end = static_cast<double>(ts + dur);
    t0 = std::min(t0, ts);
    t1 = std::max(t1, ts + dur);
    measured.ops.push_back(op);
    op_interval.push_back(computing.size() - 1);
  }
  const std::vector<double> alone = scheduler::AloneSeconds(computing, plan.shared_cores);
  if (measured.ops.empty()) return result;
  for (size_t i = 0; i < measured.ops.size(); ++i) result.alone_seconds.push_back(alone[op_interval[i]]);
  for (auto& op : measured.ops) {
    op.start = (op.start - static_cast<double>(t0)) / 1e6;
    op.end = (op.end - static_cast<double>(t0)) / 1e6;
  }
  measured.step_seconds = static_cast<double>(t1 - t0) / 1e6;
  double busy_all = 0.0;
  for (const auto& op : measured.ops) {
    auto& rank = measured.ranks[static_cast<size_t>(op.rank)];
    rank.busy_seconds += op.end - op.start;
    busy_all += op.end - op.start;
  }
  measured.utilization = busy_all / (static_cast<double>(measured.ranks.size()) * measured.step_seconds);
  return result;
}

plan::Plan FitCostsToStep(const plan::Plan& plan, const scheduler::Schedule& schedule, const MeasuredStep& measured) {
  plan::Plan fitted_plan = plan;
  const size_t n = plan.sections.size();
  std::vector<double> f_sec(n), b_sec(n), samples(n), o_sec(n);
  std::vector<int> o_n(n);
  // Forward + backward of every micro-batch (rank, index) and its samples.
  std::map<std::pair<int, int>, std::pair<double, int>> micro_batches;
  for (size_t i = 0; i < measured.timeline.ops.size(); ++i) {
    const scheduler::OpInterval& op = measured.timeline.ops[i];
    const auto s = static_cast<size_t>(schedule.ranks[static_cast<size_t>(op.rank)].section);
    const double d = measured.alone_seconds[i];
    if (op.kind == scheduler::OpKind::kOptimizer) {
      o_sec[s] += d;
      ++o_n[s];
      continue;
    }
    // A forward-only section's ops are micro-batches of their own (its
    // run-ahead items of two batches may share an index).
    const bool forward_only = plan.sections[s].mode == plan::SectionMode::kForward;
    auto& mb = micro_batches[{op.rank, forward_only ? -1 - static_cast<int>(i) : op.micro_batch}];
    mb.first += d;
    if (op.kind == scheduler::OpKind::kForward) {
      f_sec[s] += d;
      samples[s] += op.samples;
      mb.second = op.samples;
    } else {
      b_sec[s] += d;
    }
  }
  std::vector<std::vector<double>> x(n), y(n);
  for (const auto& [key, mb] : micro_batches) {
    const auto s = static_cast<size_t>(schedule.ranks[static_cast<size_t>(key.first)].section);
    x[s].push_back(mb.second);
    y[s].push_back(mb.first);
  }
  for (size_t s = 0; s < n; ++s) {
    plan::MicroBatchCost& c = fitted_plan.sections[s].cost;
    // fixed + per sample through this step's micro-batches; proportional
    // when their sizes do not vary (or the line is not a cost).
    double fixed = 0.0, per_sample = 0.0;
    const bool line = FitWeightedLine(x[s], y[s], std::vector<double>(x[s].size(), 1.0), &fixed, &per_sample) &&
                      fixed >= 0.0 && per_sample > 0.0;
    c.fixed_seconds = line ? fixed : 0.0;
    c.seconds_per_sample = line ? per_sample : samples[s] > 0 ? (f_sec[s] + b_sec[s]) / samples[s] : 1e-9;
    c.forward_share = f_sec[s] + b_sec[s] > 0 ? f_sec[s] / (f_sec[s] + b_sec[s]) : 1.0;
    c.optimizer_seconds = o_n[s] > 0 ? o_sec[s] / o_n[s] : 0.0;
    c.measured = true;
  }
  for (auto& e : fitted_plan.edges) e.seconds_per_sample = 0.0;
  return fitted_plan;
}

Status WriteTimelines(const plan::Plan& plan, const scheduler::Problem& problem, const scheduler::Schedule& schedule,
                      int64_t step, const nlohmann::json& events, const std::string& run_dir) {
  if (schedule.ranks.empty()) return Status::Ok();
  const MeasuredStep measured_step = MeasureStep(plan, schedule, step, events);
  const scheduler::Simulation& measured = measured_step.timeline;
  if (measured.ops.empty()) return Status::Ok();

  // Two predictions of this step (its batch, its schedule): with the costs the
  // compiler planned with (profiled when `maestro profile` measured them), and
  // with costs fitted to this very step (per sample, forward share,
  // optimizer; each op's time alone on a core when the ranks share cores),
  // which isolates what the simulator misses beyond costs.
  scheduler::Problem with_plan = problem;
  scheduler::Problem with_fit = problem;
  with_fit.costs = std::make_shared<PlannedCostModel>(FitCostsToStep(plan, schedule, measured_step));
  auto predicted = scheduler::Simulate(with_plan, schedule);
  auto fitted = scheduler::Simulate(with_fit, schedule);
  if (!predicted.ok() || !fitted.ok()) return Status::Ok();  // the pictures are a report, not the run's result
  const bool profiled = std::all_of(plan.sections.begin(), plan.sections.end(),
                                    [](const plan::SectionPlan& s) { return s.cost.measured; });
  const std::string title = fmt::format("step {} of {}", step, plan.job_name);
  // One time scale for both pictures: they are meant to be seen side by side.
  const double axis = std::max(measured.step_seconds, predicted->step_seconds);
  MAESTRO_RETURN_IF_ERROR(measured.WriteGanttSvg(run_dir + "/timeline_measured.svg", "measured: " + title, axis));
  MAESTRO_RETURN_IF_ERROR(predicted->WriteGanttSvg(
      run_dir + "/timeline_predicted.svg",
      fmt::format("simulated ({} costs of the plan): {}", profiled ? "profiled" : "modelled", title), axis));
  const nlohmann::json summary{
      {"step", step},
      {"measured_step_seconds", measured.step_seconds},
      {"predicted_step_seconds", predicted->step_seconds},
      {"predicted_costs", profiled ? "profiled" : "modelled"},
      {"relative_error", (predicted->step_seconds - measured.step_seconds) / measured.step_seconds},
      {"fitted_step_seconds", fitted->step_seconds},
      {"fitted_relative_error", (fitted->step_seconds - measured.step_seconds) / measured.step_seconds}};
  return WriteFileAtomically(run_dir + "/timeline.json", summary.dump(2));
}

}  // namespace maestro::runtime
