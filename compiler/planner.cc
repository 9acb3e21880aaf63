// SPDX-License-Identifier: Apache-2.0
// PlanSections in named phases: build every section's table of fronts, check
// the node budget and the fan-out rules (explaining a failure), search the
// smallest feasible bottleneck over the fronts (compiler/sectioned_search.h),
// pick the assignment it finds.
#include "compiler/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/units.h"
#include "compiler/config_text.h"
#include "compiler/sectioned_search.h"

namespace maestro::compiler {

namespace {

using internal::DpOption;
using internal::FrontEntry;
using internal::FrontPlanner;
using internal::SectionTable;
using internal::Solution;

constexpr double kInf = std::numeric_limits<double>::infinity();

// One section's candidates, evaluated: its table of fronts, how many were
// evaluated and fit, and the least memory any needs (for the failure).
struct SectionSurvey {
  SectionTable table;
  int evaluated = 0, fitting = 0;
  double least_memory = kInf;
  plan::ParallelConfig least_config;
};

SectionSurvey SurveySection(const CostModel& model, const SectionWork& sw, const PlannerOptions& o) {
  SectionSurvey out;
  std::map<std::pair<int, int>, FrontEntry> best;  // (dp, nodes) -> fastest
  for (const auto& c : CandidateConfigs(model, sw, o)) {
    ++out.evaluated;
    const SectionCost cost = model.Evaluate(sw, c);
    if (cost.memory.total() < out.least_memory) {
      out.least_memory = cost.memory.total();
      out.least_config = c;
    }
    if (!cost.fits || cost.nodes == 0) continue;
    ++out.fitting;
    auto key = std::make_pair(c.dp, cost.nodes);
    auto it = best.find(key);
    if (it == best.end() || cost.step_seconds < it->second.seconds) {
      best[key] = FrontEntry{cost.nodes, cost.step_seconds, c};
    }
  }
  std::map<int, std::vector<FrontEntry>> by_dp;
  for (const auto& [key, entry] : best) by_dp[key.first].push_back(entry);
  for (auto& [dp, entries] : by_dp) {
    std::sort(entries.begin(), entries.end(), [](const FrontEntry& a, const FrontEntry& b) {
      return a.nodes != b.nodes ? a.nodes < b.nodes : a.seconds < b.seconds;
    });
    DpOption opt;
    opt.dp = dp;
    for (const auto& e : entries) {
      if (opt.front.empty() || e.seconds < opt.front.back().seconds) opt.front.push_back(e);
    }
    out.table.options.push_back(std::move(opt));
  }
  return out;
}

// Section `s` has no configuration that fits: its pins exclude every
// configuration, or none fits in memory.
PlanFailure NoConfigFits(const CostModel& model, const SectionWork& sw, size_t s, const SectionSurvey& survey,
                         const PlannerOptions& o) {
  const DeviceType& dev = model.devices()[static_cast<size_t>(sw.device)];
  PlanFailure failure;
  failure.kind = PlanFailure::Kind::kNoConfigFits;
  failure.section = static_cast<int>(s);
  if (survey.evaluated == 0) {
    failure.message = fmt::format(
        "section '{}' has no valid configuration: its pins (TP, PP, CP, DP, micro-batch) do not fit the "
        "model ({} heads, {} layers) or the {} nodes x {} GPUs of type '{}'{}",
        sw.name, sw.model.heads, sw.model.layers, dev.nodes, dev.gpus_per_node, dev.name,
        o.allow_planner_only ? "" : " with what the runtime supports (--allow-planner-only widens the search)");
    return failure;
  }
  const plan::ParallelConfig& least = survey.least_config;
  // Where the bytes go at that configuration (compiler/memory_model.h), so the
  // user sees which term to attack.
  const MemoryBreakdown m = model.Evaluate(sw, least).memory;
  failure.message = fmt::format(
      "section '{}' fits in memory at no configuration: it needs at least {} per GPU (TP={} PP={} CP={} "
      "DP={} micro-batch {}{}: weights {} + gradients {} + optimizer {} + activations {} + reserve {}) but a "
      "'{}' GPU has {}; give it a larger GPU type, more nodes, {}or make it mode = \"forward\"",
      sw.name, HumanBytes(survey.least_memory), least.tp, least.pp, least.cp, least.dp, least.micro_batch,
      RecomputeText(least).empty() ? "" : "," + RecomputeText(least), HumanBytes(m.weights), HumanBytes(m.gradients),
      HumanBytes(m.optimizer), HumanBytes(m.activations), HumanBytes(m.reserved), dev.name,
      HumanBytes(dev.memory_bytes),
      o.allow_planner_only ? ""
                           : "--allow-planner-only (CP, recomputation), --runtime-support (a runtime with more), ");
  return failure;
}

// Phase 1: every section's table of fronts; out.evaluated and out.fitting
// per section; out.failure set at the first section with none that fits.
std::vector<SectionTable> BuildSectionTables(const CostModel& model, const Workload& w, const PlannerOptions& o,
                                             PlanOutcome& out) {
  const size_t n = w.sections.size();
  std::vector<SectionTable> tables(n);
  out.evaluated.assign(n, 0);
  out.fitting.assign(n, 0);
  for (size_t s = 0; s < n; ++s) {
    SectionSurvey survey = SurveySection(model, w.sections[s], o);
    out.evaluated[s] = survey.evaluated;
    out.fitting[s] = survey.fitting;
    if (survey.fitting == 0) {
      out.failure = NoConfigFits(model, w.sections[s], s, survey, o);
      return tables;
    }
    tables[s] = std::move(survey.table);
  }
  return tables;
}

// Phase 2: the fewest nodes each section can run on at all must fit every
// GPU type's node count.
PlanFailure CheckNodeBudget(const CostModel& model, const Workload& w, const std::vector<SectionTable>& tables) {
  PlanFailure failure;
  std::vector<long long> need(model.devices().size(), 0);
  std::vector<std::string> parts(model.devices().size());
  for (size_t s = 0; s < tables.size(); ++s) {
    int least = std::numeric_limits<int>::max();
    for (const auto& opt : tables[s].options) least = std::min(least, opt.front.front().nodes);
    const size_t d = static_cast<size_t>(w.sections[s].device);
    need[d] += least;
    parts[d] += fmt::format("{}{} {}", parts[d].empty() ? "" : ", ", w.sections[s].name, least);
  }
  for (size_t d = 0; d < need.size(); ++d) {
    if (need[d] <= model.devices()[d].budget_units()) continue;
    failure.kind = PlanFailure::Kind::kBudgetTooSmall;
    if (model.devices()[d].shared_node) {
      failure.message = fmt::format(
          "--local {} is too few ranks: with their pins the sections need at least {} ({}); give more ranks or "
          "lower the pins",
          model.devices()[d].nodes, need[d], parts[d]);
      return failure;
    }
    if (model.devices()[d].packs_nodes) {
      failure.message = fmt::format(
          "the budget of {} node(s) x {} GPUs of type '{}' is too small: the sections need at least {} GPUs ({}); "
          "raise nodes or use fewer sections",
          model.devices()[d].nodes, model.devices()[d].gpus_per_node, model.devices()[d].name, need[d], parts[d]);
      return failure;
    }
    failure.message = fmt::format(
        "the budget of {} node(s) of type '{}' is too small: the sections need at least {} ({}), since a "
        "section that fits in no fewer nodes holds them whole; raise nodes or use fewer sections",
        model.devices()[d].nodes, model.devices()[d].name, need[d], parts[d]);
    return failure;
  }
  return failure;
}

// Phase 3: some DP degrees keep every edge's fan-out rule, on each pair of
// sections and on all edges at once, and within the node counts.
PlanFailure CheckFanOuts(const CostModel& model, const Workload& w, const FrontPlanner& planner) {
  PlanFailure failure;
  for (const auto& pair : planner.pairs()) {
    if (!pair.entries.empty()) continue;
    failure.kind = PlanFailure::Kind::kFanOutImpossible;
    failure.edge = pair.edges.front();
    const EdgeWork& e = w.edges[static_cast<size_t>(failure.edge)];
    const std::string& from = w.sections[static_cast<size_t>(e.from)].name;
    const std::string& to = w.sections[static_cast<size_t>(e.to)].name;
    failure.message = fmt::format(
        "the fan-out on edge {} -> {} is impossible: no DP degrees of '{}' and '{}' that fit satisfy "
        "DP_from * fanout = DP_to{}; unpin fanout/fanin or the sections' dp",
        from, to, from, to,
        e.fanout  ? fmt::format(" with fanout = {}", e.fanout)
        : e.fanin ? fmt::format(" with fanin = {}", e.fanin)
                  : "");
    return failure;
  }
  if (!planner.Solve(kInf, false).found) {
    failure.kind = PlanFailure::Kind::kFanOutImpossible;
    failure.edge = 0;
    for (size_t e = 0; e < w.edges.size(); ++e) {
      if (w.edges[e].fanout || w.edges[e].fanin) {
        failure.edge = static_cast<int>(e);
        break;
      }
    }
    failure.message =
        "the fan-outs are impossible together: no DP degrees satisfy DP_from * fanout = DP_to on every edge at "
        "once; unpin a fanout/fanin or a section's dp";
    return failure;
  }
  if (!planner.Solve(kInf, true).found) {
    failure.kind = PlanFailure::Kind::kBudgetTooSmall;
    failure.message =
        model.devices().size() == 1 && model.devices()[0].shared_node
            ? "--local: too few ranks for an allocation that satisfies every edge's fan-out rule; give more ranks or "
              "unpin fan-outs"
            : "the budget is too small: no allocation of whole nodes satisfies every edge's fan-out rule within the "
              "node counts of [cluster]; raise nodes or unpin fan-outs";
  }
  return failure;
}

// Phase 4: the smallest feasible bottleneck time, by binary search over the
// candidate times (every front entry's and every pair's edge time):
// feasibility is monotone in T.
Solution SearchSmallestBottleneck(const FrontPlanner& planner) {
  std::vector<double> times;
  for (const auto& t : planner.tables()) {
    for (const auto& opt : t.options) {
      for (const auto& e : opt.front) times.push_back(e.seconds);
    }
  }
  for (const auto& p : planner.pairs()) {
    for (const auto& e : p.entries) times.push_back(e.edge_seconds);
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  size_t lo = 0, hi = times.size();
  Solution sol = planner.Solve(kInf, true);
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    Solution s = planner.Solve(times[mid], true);
    if (s.found) {
      sol = std::move(s);
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return sol;
}

// Phase 5: the configurations the solution picks, evaluated and summarized.
Assignment PickAssignment(const CostModel& model, const Workload& w, const PlannerOptions& o,
                          const FrontPlanner& planner, const Solution& sol) {
  Assignment a;
  const auto& tables = planner.tables();
  for (size_t s = 0; s < w.sections.size(); ++s) {
    const DpOption& opt = tables[s].options[static_cast<size_t>(sol.option[s])];
    const FrontEntry& fe = opt.front[static_cast<size_t>(sol.entry[s])];
    SectionChoice ch;
    ch.cost = model.Evaluate(w.sections[s], fe.config);
    ch.planner_only = PlannerOnlyFeatures(w.sections[s].model, fe.config, o.support);
    a.sections.push_back(std::move(ch));
  }
  Summarize(model, w, a);
  return a;
}

}  // namespace

PlanOutcome PlanSections(const CostModel& model, const Workload& w, const PlannerOptions& o) {
  PlanOutcome out;
  std::vector<SectionTable> tables = BuildSectionTables(model, w, o, out);
  if (!out.ok()) return out;
  out.failure = CheckNodeBudget(model, w, tables);
  if (!out.ok()) return out;
  const FrontPlanner planner(model, w, std::move(tables), o);
  out.failure = CheckFanOuts(model, w, planner);
  if (!out.ok()) return out;
  out.assignment = PickAssignment(model, w, o, planner, SearchSmallestBottleneck(planner));
  return out;
}

}  // namespace maestro::compiler
