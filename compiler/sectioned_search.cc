// SPDX-License-Identifier: Apache-2.0
#include "compiler/sectioned_search.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

namespace maestro::compiler::internal {

FrontPlanner::FrontPlanner(const CostModel& model, const Workload& w, std::vector<SectionTable> tables,
                           const PlannerOptions& options)
    : model_(model), w_(w), tables_(std::move(tables)), options_(options) {
  adj_.assign(w.sections.size(), {});
  BuildPairs();
  ClassifyGraph();
}

// The pairs of sections joined by edges, and per pair the options whose DP
// degrees every edge allows (EdgeDpsAllowed).
void FrontPlanner::BuildPairs() {
  std::map<std::pair<int, int>, size_t> index;
  for (size_t e = 0; e < w_.edges.size(); ++e) {
    const int a = std::min(w_.edges[e].from, w_.edges[e].to), b = std::max(w_.edges[e].from, w_.edges[e].to);
    auto it = index.find({a, b});
    if (it == index.end()) {
      it = index.emplace(std::make_pair(a, b), pairs_.size()).first;
      pairs_.push_back(SectionPair{a, b, {}, {}, {}, 0});
      adj_[static_cast<size_t>(a)].push_back(it->second);
      adj_[static_cast<size_t>(b)].push_back(it->second);
    }
    pairs_[it->second].edges.push_back(static_cast<int>(e));
  }
  for (auto& p : pairs_) {
    const auto& A = tables_[static_cast<size_t>(p.a)].options;
    const auto& B = tables_[static_cast<size_t>(p.b)].options;
    p.nb = static_cast<int>(B.size());
    for (size_t ia = 0; ia < A.size(); ++ia) {
      for (size_t ib = 0; ib < B.size(); ++ib) {
        const int da = A[ia].dp, db = B[ib].dp;
        double worst = 0;
        bool ok = true;
        for (int e : p.edges) {
          const EdgeWork& ew = w_.edges[static_cast<size_t>(e)];
          const int df = ew.from == p.a ? da : db, dt = ew.from == p.a ? db : da;
          if (!EdgeDpsAllowed(df, dt, ew.fanout, ew.fanin, options_)) {
            ok = false;
            break;
          }
          worst = std::max(worst, model_.EdgeSeconds(ew, df, dt));
        }
        if (!ok) continue;
        p.entries.push_back({static_cast<int>(ia), static_cast<int>(ib), worst});
        p.lookup[static_cast<int64_t>(ia) * p.nb + static_cast<int64_t>(ib)] = worst;
      }
    }
  }
}

// Is the section graph a forest, on one GPU type (then TreeDp is exact)?
void FrontPlanner::ClassifyGraph() {
  const size_t n = w_.sections.size();
  single_device_ = true;
  for (const auto& s : w_.sections) single_device_ = single_device_ && s.device == w_.sections[0].device;
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  std::function<int(int)> find = [&](int x) {
    return parent[static_cast<size_t>(x)] == x ? x
                                               : parent[static_cast<size_t>(x)] = find(parent[static_cast<size_t>(x)]);
  };
  forest_ = true;
  for (const auto& p : pairs_) {
    const int ra = find(p.a), rb = find(p.b);
    if (ra == rb) forest_ = false;
    parent[static_cast<size_t>(ra)] = rb;
  }
}

std::vector<std::vector<int>> FrontPlanner::NodesAt(double T, std::vector<std::vector<int>>* entry_at) const {
  std::vector<std::vector<int>> nodes(tables_.size());
  entry_at->assign(tables_.size(), {});
  for (size_t s = 0; s < tables_.size(); ++s) {
    for (const auto& opt : tables_[s].options) {
      // Front: seconds strictly descending; first entry with seconds <= T.
      int lo = 0, hi = static_cast<int>(opt.front.size());
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (opt.front[static_cast<size_t>(mid)].seconds <= T)
          hi = mid;
        else
          lo = mid + 1;
      }
      if (lo < static_cast<int>(opt.front.size())) {
        nodes[s].push_back(opt.front[static_cast<size_t>(lo)].nodes);
        (*entry_at)[s].push_back(lo);
      } else {
        nodes[s].push_back(std::numeric_limits<int>::max());
        (*entry_at)[s].push_back(-1);
      }
    }
  }
  return nodes;
}

Solution FrontPlanner::Solve(double T, bool use_budget) const {
  std::vector<std::vector<int>> entry_at;
  const auto nodes = NodesAt(T, &entry_at);
  Solution sol = (forest_ && single_device_) ? TreeDp(T, nodes) : BranchAndBound(T, nodes, use_budget);
  if (!sol.found) return sol;
  sol.entry.resize(sol.option.size());
  for (size_t s = 0; s < sol.option.size(); ++s) sol.entry[s] = entry_at[s][static_cast<size_t>(sol.option[s])];
  if (use_budget) {
    std::vector<long long> used(model_.devices().size(), 0);
    for (size_t s = 0; s < sol.option.size(); ++s) {
      used[static_cast<size_t>(w_.sections[s].device)] += nodes[s][static_cast<size_t>(sol.option[s])];
    }
    for (size_t d = 0; d < used.size(); ++d) {
      if (used[d] > model_.devices()[d].budget_units()) sol.found = false;
    }
  }
  return sol;
}

Solution FrontPlanner::TreeDp(double T, const std::vector<std::vector<int>>& nodes) const {
  const size_t n = tables_.size();
  constexpr long long kBig = std::numeric_limits<long long>::max() / 4;
  std::vector<std::vector<long long>> f(n);
  // choice[child][parent option] = child option
  std::vector<std::vector<int>> choice(n);
  std::vector<int> parent_of(n, -1), parent_pair(n, -1);
  std::vector<int> order;
  std::vector<bool> seen(n, false);
  Solution sol;
  sol.option.assign(n, -1);
  std::vector<int> roots;
  for (size_t r = 0; r < n; ++r) {
    if (seen[r]) continue;
    roots.push_back(static_cast<int>(r));
    std::vector<int> stack = {static_cast<int>(r)};
    seen[r] = true;
    while (!stack.empty()) {
      const int v = stack.back();
      stack.pop_back();
      order.push_back(v);
      for (size_t pi : adj_[static_cast<size_t>(v)]) {
        const SectionPair& p = pairs_[pi];
        const int u = p.a == v ? p.b : p.a;
        if (seen[static_cast<size_t>(u)]) continue;
        seen[static_cast<size_t>(u)] = true;
        parent_of[static_cast<size_t>(u)] = v;
        parent_pair[static_cast<size_t>(u)] = static_cast<int>(pi);
        stack.push_back(u);
      }
    }
  }
  for (size_t s = 0; s < n; ++s) {
    f[s].resize(nodes[s].size());
    for (size_t i = 0; i < nodes[s].size(); ++i) {
      f[s][i] = nodes[s][i] == std::numeric_limits<int>::max() ? kBig : nodes[s][i];
    }
  }
  // Post-order: children before parents.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const int c = *it;
    const int v = parent_of[static_cast<size_t>(c)];
    if (v < 0) continue;
    const SectionPair& p = pairs_[static_cast<size_t>(parent_pair[static_cast<size_t>(c)])];
    const bool c_is_a = p.a == c;
    std::vector<long long> best(f[static_cast<size_t>(v)].size(), kBig);
    choice[static_cast<size_t>(c)].assign(best.size(), -1);
    for (const auto& e : p.entries) {
      if (e.edge_seconds > T) continue;
      const int ic = c_is_a ? e.ia : e.ib, iv = c_is_a ? e.ib : e.ia;
      const long long fc = f[static_cast<size_t>(c)][static_cast<size_t>(ic)];
      if (fc < best[static_cast<size_t>(iv)]) {
        best[static_cast<size_t>(iv)] = fc;
        choice[static_cast<size_t>(c)][static_cast<size_t>(iv)] = ic;
      }
    }
    for (size_t iv = 0; iv < best.size(); ++iv) {
      f[static_cast<size_t>(v)][iv] = std::min(kBig, f[static_cast<size_t>(v)][iv] + best[iv]);
    }
  }
  long long total = 0;
  for (int r : roots) {
    long long best = kBig;
    int arg = -1;
    for (size_t i = 0; i < f[static_cast<size_t>(r)].size(); ++i) {
      if (f[static_cast<size_t>(r)][i] < best) {
        best = f[static_cast<size_t>(r)][i];
        arg = static_cast<int>(i);
      }
    }
    if (arg < 0 || best >= kBig) return sol;
    sol.option[static_cast<size_t>(r)] = arg;
    total += best;
  }
  for (int v : order) {  // pre-order: parents before children
    const int pv = parent_of[static_cast<size_t>(v)];
    if (pv < 0) continue;
    sol.option[static_cast<size_t>(v)] =
        choice[static_cast<size_t>(v)][static_cast<size_t>(sol.option[static_cast<size_t>(pv)])];
    if (sol.option[static_cast<size_t>(v)] < 0) return sol;
  }
  sol.found = true;
  sol.nodes = total;
  return sol;
}

Solution FrontPlanner::BranchAndBound(double T, const std::vector<std::vector<int>>& nodes, bool use_budget) const {
  const size_t n = tables_.size();
  Solution best;
  best.option.assign(n, -1);
  long long best_nodes = std::numeric_limits<long long>::max();
  // Order: BFS so neighbours come early (constraint propagation).
  std::vector<int> order;
  std::vector<bool> seen(n, false);
  for (size_t r = 0; r < n; ++r) {
    if (seen[r]) continue;
    std::vector<int> queue = {static_cast<int>(r)};
    seen[r] = true;
    for (size_t q = 0; q < queue.size(); ++q) {
      order.push_back(queue[q]);
      for (size_t pi : adj_[static_cast<size_t>(queue[q])]) {
        const int u = pairs_[pi].a == queue[q] ? pairs_[pi].b : pairs_[pi].a;
        if (!seen[static_cast<size_t>(u)]) {
          seen[static_cast<size_t>(u)] = true;
          queue.push_back(u);
        }
      }
    }
  }
  std::vector<int> min_nodes(n, std::numeric_limits<int>::max());
  std::vector<std::vector<int>> sorted(n);
  for (size_t s = 0; s < n; ++s) {
    for (size_t i = 0; i < nodes[s].size(); ++i) {
      if (nodes[s][i] == std::numeric_limits<int>::max()) continue;
      sorted[s].push_back(static_cast<int>(i));
      min_nodes[s] = std::min(min_nodes[s], nodes[s][i]);
    }
    if (sorted[s].empty()) return best;
    std::sort(sorted[s].begin(), sorted[s].end(),
              [&](int x, int y) { return nodes[s][static_cast<size_t>(x)] < nodes[s][static_cast<size_t>(y)]; });
  }
  const size_t ndev = model_.devices().size();
  // remaining[k][d]: min nodes of sections order[k..] on device d.
  std::vector<std::vector<long long>> remaining(n + 1, std::vector<long long>(ndev, 0));
  for (size_t k = n; k-- > 0;) {
    remaining[k] = remaining[k + 1];
    remaining[k][static_cast<size_t>(w_.sections[static_cast<size_t>(order[k])].device)] +=
        min_nodes[static_cast<size_t>(order[k])];
  }
  std::vector<int> option(n, -1);
  std::vector<long long> used(ndev, 0);
  long long budget_steps = 20'000'000;
  std::function<void(size_t, long long)> dfs = [&](size_t k, long long total) {
    if (--budget_steps < 0) return;
    if (k == n) {
      if (total < best_nodes) {
        best_nodes = total;
        best.option = option;
        best.found = true;
      }
      return;
    }
    long long lower = total;
    for (size_t d = 0; d < ndev; ++d) lower += remaining[k][d];
    if (lower >= best_nodes) return;
    const int s = order[k];
    const size_t dev = static_cast<size_t>(w_.sections[static_cast<size_t>(s)].device);
    for (int i : sorted[static_cast<size_t>(s)]) {
      const int cost = nodes[static_cast<size_t>(s)][static_cast<size_t>(i)];
      // Sorted by cost: once this option cannot beat the best, none after it can.
      if (lower - min_nodes[static_cast<size_t>(s)] + cost >= best_nodes) break;
      if (use_budget && used[dev] + cost + remaining[k + 1][dev] > model_.devices()[dev].budget_units()) break;
      bool ok = true;
      for (size_t pi : adj_[static_cast<size_t>(s)]) {
        const SectionPair& p = pairs_[pi];
        const int u = p.a == s ? p.b : p.a;
        if (option[static_cast<size_t>(u)] < 0) continue;
        const int ia = p.a == s ? i : option[static_cast<size_t>(u)];
        const int ib = p.a == s ? option[static_cast<size_t>(u)] : i;
        auto it = p.lookup.find(static_cast<int64_t>(ia) * p.nb + ib);
        if (it == p.lookup.end() || it->second > T) {
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      option[static_cast<size_t>(s)] = i;
      used[dev] += cost;
      dfs(k + 1, total + cost);
      used[dev] -= cost;
      option[static_cast<size_t>(s)] = -1;
    }
  };
  dfs(0, 0);
  best.nodes = best_nodes;
  return best;
}

}  // namespace maestro::compiler::internal
