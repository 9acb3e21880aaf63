// SPDX-License-Identifier: Apache-2.0
// ExhaustiveSearch (compiler/planner.h): the oracle the planner's tests
// compare PlanSections with. Every combination of every section's fitting
// configurations, within the node counts and every edge's fan-out rule; the
// smallest bottleneck wins, then the fewest nodes. Exponential: small
// instances only.
#include <algorithm>
#include <functional>
#include <limits>

#include "compiler/planner.h"

namespace maestro::compiler {

PlanOutcome ExhaustiveSearch(const CostModel& model, const Workload& w, const PlannerOptions& o) {
  PlanOutcome out;
  const size_t n = w.sections.size();
  std::vector<std::vector<SectionCost>> fitting(n);
  for (size_t s = 0; s < n; ++s) {
    for (const auto& c : CandidateConfigs(model, w.sections[s], o)) {
      SectionCost cost = model.Evaluate(w.sections[s], c);
      if (cost.fits && cost.nodes > 0) fitting[s].push_back(cost);
    }
    if (fitting[s].empty()) {
      out.failure.kind = PlanFailure::Kind::kNoConfigFits;
      out.failure.section = static_cast<int>(s);
      out.failure.message = "no configuration fits";
      return out;
    }
  }
  std::vector<int> pick(n, -1), best_pick;
  double best_time = std::numeric_limits<double>::infinity();
  long long best_nodes = 0;
  std::vector<long long> used(model.devices().size(), 0);
  std::function<void(size_t, double)> rec = [&](size_t k, double worst) {
    if (worst > best_time) return;
    if (k == n) {
      long long total = 0;
      for (auto u : used) total += u;
      if (worst < best_time || (worst == best_time && total < best_nodes)) {
        best_time = worst;
        best_nodes = total;
        best_pick = pick;
      }
      return;
    }
    const size_t dev = static_cast<size_t>(w.sections[k].device);
    for (size_t i = 0; i < fitting[k].size(); ++i) {
      const SectionCost& c = fitting[k][i];
      if (used[dev] + c.nodes > model.devices()[dev].budget_units()) continue;
      double t = std::max(worst, c.step_seconds);
      bool ok = true;
      for (const auto& e : w.edges) {
        const size_t other = static_cast<size_t>(e.from == static_cast<int>(k) ? e.to
                                                 : e.to == static_cast<int>(k) ? e.from
                                                                               : -1);
        if (other == static_cast<size_t>(-1) || other > k || (other == k)) continue;
        if (pick[other] < 0) continue;
        const int dp_other = fitting[other][static_cast<size_t>(pick[other])].config.dp;
        const int df = e.from == static_cast<int>(k) ? c.config.dp : dp_other;
        const int dt = e.from == static_cast<int>(k) ? dp_other : c.config.dp;
        if (!EdgeDpsAllowed(df, dt, e.fanout, e.fanin, o)) {
          ok = false;
          break;
        }
        t = std::max(t, model.EdgeSeconds(e, df, dt));
      }
      if (!ok) continue;
      pick[k] = static_cast<int>(i);
      used[dev] += c.nodes;
      rec(k + 1, t);
      used[dev] -= c.nodes;
      pick[k] = -1;
    }
  };
  rec(0, 0.0);
  if (best_pick.empty()) {
    out.failure.kind = PlanFailure::Kind::kBudgetTooSmall;
    out.failure.message = "no combination fits the budget";
    return out;
  }
  for (size_t s = 0; s < n; ++s) {
    SectionChoice ch;
    ch.cost = fitting[s][static_cast<size_t>(best_pick[s])];
    ch.planner_only = PlannerOnlyFeatures(w.sections[s].model, ch.cost.config, o.support);
    out.assignment.sections.push_back(std::move(ch));
  }
  Summarize(model, w, out.assignment);
  return out;
}

}  // namespace maestro::compiler
