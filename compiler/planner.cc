// SPDX-License-Identifier: Apache-2.0
#include "compiler/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <unordered_map>

#include "base/checks.h"

namespace maestro::compiler {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

bool IsEncoder(const plan::ModelDesc& m) {
  return m.kind != plan::ModelKind::kDecoder;
}

// The largest number of DP replicas that can all get work.
int MaxUsefulDp(const CostModel& model, const SectionWork& s) {
  const double active = static_cast<double>(model.global_batch()) * s.active_fraction;
  return std::max(1, static_cast<int>(std::ceil(active - 1e-9)));
}

// Parallel features of a config that the runtime lacks (model features such
// as MoE excluded: those make a section planner-only whatever its config).
std::string ConfigOnlyFeatures(const plan::ModelDesc& m, const plan::ParallelConfig& c, const RuntimeSupport& rs) {
  plan::ModelDesc dense = m;
  dense.experts = 0;
  return PlannerOnlyFeatures(dense, c, rs);
}

}  // namespace

std::string PlannerOnlyFeatures(const plan::ModelDesc& m, const plan::ParallelConfig& c, const RuntimeSupport& rs) {
  std::vector<std::string> f;
  const bool enc = IsEncoder(m);
  if (c.tp > 1 && !(enc ? rs.tensor_parallel_encoder : rs.tensor_parallel_decoder)) {
    f.push_back(fmt::format("TP={} on {}", c.tp, plan::ModelKindName(m.kind)));
  }
  if (c.pp > 1 && !(enc ? rs.pipeline_parallel_encoder : rs.pipeline_parallel_decoder)) {
    f.push_back(fmt::format("PP={} on {}", c.pp, plan::ModelKindName(m.kind)));
  }
  if (c.cp > 1 && !rs.context_parallel) f.push_back(fmt::format("CP={}", c.cp));
  if (c.ep > 1 && !rs.expert_parallel) f.push_back(fmt::format("EP={}", c.ep));
  if (c.recompute && !rs.activation_recompute) f.push_back("recompute");
  if (m.experts > 0 && !rs.mixture_of_experts) f.push_back("MoE");
  if (c.dp > 1 && !rs.data_parallel) f.push_back("DP");
  if (c.micro_batch > 1 && !rs.micro_batching) f.push_back("micro-batching");
  std::string out;
  for (const auto& x : f) out += (out.empty() ? "" : ", ") + x;
  return out;
}

std::vector<plan::ParallelConfig> CandidateConfigs(const CostModel& model, const SectionWork& s,
                                                   const PlannerOptions& o) {
  std::vector<plan::ParallelConfig> out;
  const DeviceType& dev = model.devices()[static_cast<size_t>(s.device)];
  const int gpn = dev.gpus_per_node;
  const plan::ModelDesc& m = s.model;
  const bool projector = m.kind == plan::ModelKind::kProjector;
  const int64_t layers = projector ? 1 : m.layers;

  std::vector<int> gpu_counts;  // valid component sizes, ascending
  if (dev.shared_node) {
    for (int g = 1; g <= std::min(gpn, dev.nodes); ++g) gpu_counts.push_back(g);
  } else {
    for (int g = 1; g < gpn; ++g) {
      if (gpn % g == 0) gpu_counts.push_back(g);
    }
    for (int k = 1; k <= dev.nodes; ++k) gpu_counts.push_back(k * gpn);
  }

  std::vector<int> tps;
  for (int tp = 1; tp <= gpn; tp *= 2) {
    if (projector && tp > 1) break;
    if (tp > 1 && m.kind == plan::ModelKind::kDecoder &&
        (m.heads % tp != 0 || (m.kv_heads % tp != 0 && tp % m.kv_heads != 0))) {
      continue;
    }
    if (tp > 1 && !projector && m.kind != plan::ModelKind::kDecoder && m.heads % tp != 0) continue;
    tps.push_back(tp);
  }
  std::vector<int> pps;
  for (int pp = 1; pp <= std::min<int64_t>(layers, o.max_pp); ++pp) {
    if (layers % pp == 0) pps.push_back(pp);
  }
  std::vector<int> cps;
  for (int cp = 1; cp <= o.max_cp; cp *= 2) {
    if (cp > 1 && (s.tokens % (2 * cp) != 0 || projector)) continue;
    cps.push_back(cp);
  }
  const int max_dp = MaxUsefulDp(model, s);
  std::vector<int> mbs;
  for (int mb : o.micro_batches) {
    if (mb <= max_dp || mb == 1) mbs.push_back(mb);
  }
  std::vector<int> rcs = {0};
  if (s.trains()) rcs.push_back(1);

  for (int tp : tps) {
    if (s.pin_tp && tp != s.pin_tp) continue;
    for (int pp : pps) {
      if (s.pin_pp && pp != s.pin_pp) continue;
      for (int cp : cps) {
        if (s.pin_cp && cp != s.pin_cp) continue;
        const int mp = tp * pp * cp;
        for (int g : gpu_counts) {
          if (g % mp != 0) continue;
          const int dp = g / mp;
          if (dp > max_dp) break;
          if (s.pin_dp && dp != s.pin_dp) continue;
          for (int mb : mbs) {
            if (s.pin_micro_batch && mb != s.pin_micro_batch) continue;
            for (int rc : rcs) {
              if (s.pin_recompute >= 0 && rc != s.pin_recompute) continue;
              plan::ParallelConfig c;
              c.tp = tp;
              c.pp = pp;
              c.cp = cp;
              c.dp = dp;
              c.micro_batch = mb;
              c.recompute = rc != 0;
              c.zero_stage = 1;
              if (!o.allow_planner_only && !ConfigOnlyFeatures(m, c, o.support).empty()) continue;
              out.push_back(c);
            }
          }
        }
      }
    }
  }
  // Pinned micro-batch or DP beyond what the enumeration covers.
  return out;
}

void Summarize(const CostModel& model, const Workload& w, Assignment& a) {
  a.edge_seconds.clear();
  a.bottleneck_seconds = 0;
  for (const auto& sc : a.sections) a.bottleneck_seconds = std::max(a.bottleneck_seconds, sc.cost.step_seconds);
  for (const auto& e : w.edges) {
    const double t = model.EdgeSeconds(e, a.sections[static_cast<size_t>(e.from)].cost.config.dp,
                                       a.sections[static_cast<size_t>(e.to)].cost.config.dp);
    a.edge_seconds.push_back(t);
    a.bottleneck_seconds = std::max(a.bottleneck_seconds, t);
  }
  a.throughput = a.bottleneck_seconds > 0 ? static_cast<double>(model.global_batch()) / a.bottleneck_seconds : 0;
  a.nodes_per_device.assign(model.devices().size(), 0);
  a.gpus = 0;
  for (size_t i = 0; i < a.sections.size(); ++i) {
    const int dev = w.sections[i].device;
    a.nodes_per_device[static_cast<size_t>(dev)] += a.sections[i].cost.nodes;
    a.gpus += a.sections[i].cost.gpus;
  }
}

namespace {

// Do DP degrees a (upstream) and b (downstream) satisfy edge e's rule?
bool EdgeAllows(const EdgeWork& e, int a, int b) {
  if (e.fanout > 0) return b == a * e.fanout;
  if (e.fanin > 0) return a == b * e.fanin;
  return b % a == 0 || a % b == 0;
}

struct FrontEntry {
  int nodes;
  double seconds;
  plan::ParallelConfig config;
};

struct DpOption {
  int dp;
  std::vector<FrontEntry> front;  // nodes ascending, seconds strictly descending
};

struct SectionTable {
  std::vector<DpOption> options;
};

// A pair of sections joined by one or more edges, with the compatible
// (option index of a, option index of b) pairs and the slowest edge time.
struct PairEntry {
  int ia, ib;
  double edge_seconds;
};
struct SectionPair {
  int a, b;  // a < b
  std::vector<int> edges;
  std::vector<PairEntry> entries;
  std::unordered_map<int64_t, double> lookup;  // ia * nb + ib -> edge_seconds
  int nb = 0;
};

struct Solution {
  bool found = false;
  std::vector<int> option;  // per section: index into options
  std::vector<int> entry;   // per section: index into front
  long long nodes = 0;
};

class FrontPlanner {
 public:
  FrontPlanner(const CostModel& model, const Workload& w, std::vector<SectionTable> tables)
      : model_(model), w_(w), tables_(std::move(tables)) {
    const size_t n = w.sections.size();
    adj_.assign(n, {});
    std::map<std::pair<int, int>, size_t> index;
    for (size_t e = 0; e < w.edges.size(); ++e) {
      const int a = std::min(w.edges[e].from, w.edges[e].to), b = std::max(w.edges[e].from, w.edges[e].to);
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
          if (db % da != 0 && da % db != 0) continue;  // cheap filter before the per-edge rules
          double worst = 0;
          bool ok = true;
          for (int e : p.edges) {
            const EdgeWork& ew = w_.edges[static_cast<size_t>(e)];
            const int df = ew.from == p.a ? da : db, dt = ew.from == p.a ? db : da;
            if (!EdgeAllows(ew, df, dt)) {
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
    // Forest on one device?
    single_device_ = true;
    for (const auto& s : w.sections) single_device_ = single_device_ && s.device == w.sections[0].device;
    std::vector<int> parent(n);
    std::iota(parent.begin(), parent.end(), 0);
    std::function<int(int)> find = [&](int x) {
      return parent[static_cast<size_t>(x)] == x
                 ? x
                 : parent[static_cast<size_t>(x)] = find(parent[static_cast<size_t>(x)]);
    };
    forest_ = true;
    for (const auto& p : pairs_) {
      const int ra = find(p.a), rb = find(p.b);
      if (ra == rb) forest_ = false;
      parent[static_cast<size_t>(ra)] = rb;
    }
  }

  const std::vector<SectionPair>& pairs() const { return pairs_; }
  const std::vector<SectionTable>& tables() const { return tables_; }

  // Fewest nodes per section option with time <= T (INT_MAX: none).
  std::vector<std::vector<int>> NodesAt(double T, std::vector<std::vector<int>>* entry_at) const {
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

  // The fewest nodes with every section and edge at most T, within budgets
  // (budget_scale 0 = no budget).
  Solution Solve(double T, bool use_budget) const {
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
        if (used[d] > model_.devices()[d].nodes) sol.found = false;
      }
    }
    return sol;
  }

 private:
  Solution TreeDp(double T, const std::vector<std::vector<int>>& nodes) const {
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

  Solution BranchAndBound(double T, const std::vector<std::vector<int>>& nodes, bool use_budget) const {
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
        if (use_budget && used[dev] + cost + remaining[k + 1][dev] > model_.devices()[dev].nodes) break;
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

  const CostModel& model_;
  const Workload& w_;
  std::vector<SectionTable> tables_;
  std::vector<SectionPair> pairs_;
  std::vector<std::vector<size_t>> adj_;
  bool forest_ = true;
  bool single_device_ = true;
};

std::string GiB(double bytes) {
  return fmt::format("{:.1f} GiB", bytes / kGiB);
}

}  // namespace

PlanOutcome PlanSections(const CostModel& model, const Workload& w, const PlannerOptions& o) {
  PlanOutcome out;
  const size_t n = w.sections.size();
  std::vector<SectionTable> tables(n);
  out.evaluated.assign(n, 0);
  out.fitting.assign(n, 0);
  for (size_t s = 0; s < n; ++s) {
    const SectionWork& sw = w.sections[s];
    std::map<std::pair<int, int>, FrontEntry> best;  // (dp, nodes) -> fastest
    double least_memory = kInf;
    plan::ParallelConfig least_config;
    for (const auto& c : CandidateConfigs(model, sw, o)) {
      ++out.evaluated[s];
      const SectionCost cost = model.Evaluate(sw, c);
      if (cost.memory.total() < least_memory) {
        least_memory = cost.memory.total();
        least_config = c;
      }
      if (!cost.fits || cost.nodes == 0) continue;
      ++out.fitting[s];
      auto key = std::make_pair(c.dp, cost.nodes);
      auto it = best.find(key);
      if (it == best.end() || cost.step_seconds < it->second.seconds) {
        best[key] = FrontEntry{cost.nodes, cost.step_seconds, c};
      }
    }
    if (out.fitting[s] == 0) {
      const DeviceType& dev = model.devices()[static_cast<size_t>(sw.device)];
      out.failure.kind = PlanFailure::Kind::kNoConfigFits;
      out.failure.section = static_cast<int>(s);
      if (out.evaluated[s] == 0) {
        out.failure.message = fmt::format(
            "section '{}' has no valid configuration: its pins (TP, PP, CP, DP, micro-batch) do not fit the "
            "model ({} heads, {} layers) or the {} nodes x {} GPUs of type '{}'{}",
            sw.name, sw.model.heads, sw.model.layers, dev.nodes, dev.gpus_per_node, dev.name,
            o.allow_planner_only ? "" : " with what the runtime supports (--allow-planner-only widens the search)");
      } else {
        out.failure.message = fmt::format(
            "section '{}' fits in memory at no configuration: it needs at least {} per GPU (TP={} PP={} CP={} "
            "DP={} micro-batch {}{}) but a '{}' GPU has {}; give it a larger GPU type, more nodes, {}or make it "
            "mode = \"forward\"",
            sw.name, GiB(least_memory), least_config.tp, least_config.pp, least_config.cp, least_config.dp,
            least_config.micro_batch, least_config.recompute ? ", recompute" : "", dev.name, GiB(dev.memory_bytes),
            o.allow_planner_only
                ? ""
                : "--allow-planner-only (CP, recomputation), --runtime-support (a runtime with more), ");
      }
      return out;
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
      tables[s].options.push_back(std::move(opt));
    }
  }

  // Budget: the fewest nodes each section can run on at all.
  {
    std::vector<long long> need(model.devices().size(), 0);
    std::vector<std::string> parts(model.devices().size());
    for (size_t s = 0; s < n; ++s) {
      int least = std::numeric_limits<int>::max();
      for (const auto& opt : tables[s].options) least = std::min(least, opt.front.front().nodes);
      const size_t d = static_cast<size_t>(w.sections[s].device);
      need[d] += least;
      parts[d] += fmt::format("{}{} {}", parts[d].empty() ? "" : ", ", w.sections[s].name, least);
    }
    for (size_t d = 0; d < need.size(); ++d) {
      if (need[d] > model.devices()[d].nodes) {
        out.failure.kind = PlanFailure::Kind::kBudgetTooSmall;
        if (model.devices()[d].shared_node) {
          out.failure.message = fmt::format(
              "--local {} is too few ranks: with their pins the sections need at least {} ({}); give more ranks or "
              "lower the pins",
              model.devices()[d].nodes, need[d], parts[d]);
          return out;
        }
        out.failure.message = fmt::format(
            "the budget of {} node(s) of type '{}' is too small: the sections need at least {} ({}), since a "
            "section that fits in no fewer nodes holds them whole; raise nodes or use fewer sections",
            model.devices()[d].nodes, model.devices()[d].name, need[d], parts[d]);
        return out;
      }
    }
  }

  std::vector<double> times;
  for (const auto& t : tables) {
    for (const auto& opt : t.options) {
      for (const auto& e : opt.front) times.push_back(e.seconds);
    }
  }
  FrontPlanner planner(model, w, std::move(tables));
  for (size_t pi = 0; pi < planner.pairs().size(); ++pi) {
    if (planner.pairs()[pi].entries.empty()) {
      out.failure.kind = PlanFailure::Kind::kFanOutImpossible;
      out.failure.edge = planner.pairs()[pi].edges.front();
      const EdgeWork& e = w.edges[static_cast<size_t>(out.failure.edge)];
      const std::string& from = w.sections[static_cast<size_t>(e.from)].name;
      const std::string& to = w.sections[static_cast<size_t>(e.to)].name;
      out.failure.message = fmt::format(
          "the fan-out on edge {} -> {} is impossible: no DP degrees of '{}' and '{}' that fit satisfy "
          "DP_from * fanout = DP_to{}; unpin fanout/fanin or the sections' dp",
          from, to, from, to,
          e.fanout  ? fmt::format(" with fanout = {}", e.fanout)
          : e.fanin ? fmt::format(" with fanin = {}", e.fanin)
                    : "");
      return out;
    }
  }
  if (!planner.Solve(kInf, false).found) {
    out.failure.kind = PlanFailure::Kind::kFanOutImpossible;
    out.failure.edge = 0;
    for (size_t e = 0; e < w.edges.size(); ++e) {
      if (w.edges[e].fanout || w.edges[e].fanin) {
        out.failure.edge = static_cast<int>(e);
        break;
      }
    }
    out.failure.message =
        "the fan-outs are impossible together: no DP degrees satisfy DP_from * fanout = DP_to on every edge at "
        "once; unpin a fanout/fanin or a section's dp";
    return out;
  }
  if (!planner.Solve(kInf, true).found) {
    out.failure.kind = PlanFailure::Kind::kBudgetTooSmall;
    out.failure.message =
        model.devices().size() == 1 && model.devices()[0].shared_node
            ? "--local: too few ranks for an allocation that satisfies every edge's fan-out rule; give more ranks or "
              "unpin fan-outs"
            : "the budget is too small: no allocation of whole nodes satisfies every edge's fan-out rule within the "
              "node counts of [cluster]; raise nodes or unpin fan-outs";
    return out;
  }
  for (const auto& p : planner.pairs()) {
    for (const auto& e : p.entries) times.push_back(e.edge_seconds);
  }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  // Smallest feasible bottleneck time (feasibility is monotone in T).
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
  const auto& tables_out = planner.tables();
  for (size_t s = 0; s < n; ++s) {
    const DpOption& opt = tables_out[s].options[static_cast<size_t>(sol.option[s])];
    const FrontEntry& fe = opt.front[static_cast<size_t>(sol.entry[s])];
    SectionChoice ch;
    ch.cost = model.Evaluate(w.sections[s], fe.config);
    ch.planner_only = PlannerOnlyFeatures(w.sections[s].model, fe.config, o.support);
    out.assignment.sections.push_back(std::move(ch));
  }
  Summarize(model, w, out.assignment);
  return out;
}

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
  double best_time = kInf;
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
      if (used[dev] + c.nodes > model.devices()[dev].nodes) continue;
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
        if (!EdgeAllows(e, df, dt)) {
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

namespace {

// The configuration section `s` runs under when the monolithic trainer's is
// `c`. The pipeline stages partition the LLM's (or the student's and the
// teacher's) decoder layers; an encoder is a prefix module whose output LLM
// layer 0 needs, so it runs whole on pipeline stage 0 (Megatron-style MLLM
// trainers place it there), at the shared TP degree when the runtime can
// split it, else whole on every rank of its TP group; a projector runs
// whole.
plan::ParallelConfig SharedConfigOf(const SectionWork& s, const plan::ParallelConfig& c, const PlannerOptions& o) {
  plan::ParallelConfig sc = c;
  if (s.model.kind == plan::ModelKind::kDecoder) {
    if (o.allow_planner_only) return sc;
    plan::ParallelConfig probe = c;
    probe.cp = 1;
    probe.recompute = false;
    plan::ModelDesc dense = s.model;
    dense.experts = 0;
    if (!PlannerOnlyFeatures(dense, probe, o.support).empty()) {
      sc.tp = 1;
      sc.pp = 1;
    }
    return sc;
  }
  sc.pp = 1;
  sc.cp = 1;  // images and audio clips are not split over the LLM's context-parallel ranks
  if (s.model.kind == plan::ModelKind::kProjector) {
    sc.tp = 1;
    return sc;
  }
  plan::ParallelConfig probe = sc;
  probe.cp = 1;
  probe.recompute = false;
  if (!o.allow_planner_only && !PlannerOnlyFeatures(s.model, probe, o.support).empty()) sc.tp = 1;
  return sc;
}

// The expected largest count of active samples over `dp` replicas of `n`
// samples each, a share `p` active: Binomial(n, p), its expected maximum
// ~ n p + sqrt(n p (1 - p) * 2 ln dp).
double BusiestReplica(double n, double p, int dp) {
  if (p >= 1.0) return n;
  return std::min(n, n * p + std::sqrt(n * p * (1 - p) * 2.0 * std::log(std::max(1.0, double(dp)))));
}

}  // namespace

MonolithicPlan EvaluateMonolithic(const CostModel& model, const Workload& w, const std::vector<MonolithicDevice>& on,
                                  const plan::ParallelConfig& c, const PlannerOptions& o, const MonolithicEffects& fx) {
  MonolithicPlan out;
  out.config = c;
  out.devices = on;
  const int mp = c.tp * c.pp * c.cp;
  for (const MonolithicDevice& d : on) {
    out.gpus += d.gpus;
    out.peak_flops += d.gpus * model.devices()[static_cast<size_t>(d.device)].peak_flops;
    if (mp <= 0 || d.gpus % mp != 0) {
      out.why_not = fmt::format("TP x PP x CP = {} does not divide the {} GPUs of type '{}'", mp, d.gpus,
                                model.devices()[static_cast<size_t>(d.device)].name);
      return out;
    }
  }
  if (on.empty() || c.dp * mp != out.gpus) {
    out.why_not = fmt::format("DP {} x {} is not the {} GPUs", c.dp, mp, out.gpus);
    return out;
  }
  const double B = static_cast<double>(model.global_batch());
  const double per_replica = std::ceil(B / c.dp - 1e-9);
  const double microbatches = std::max(1.0, std::ceil(per_replica / c.micro_batch - 1e-9));
  std::string only;
  bool fits = true;
  double slowest = -1, rate = 0;  // rate: samples/s if each type ran at its own pace
  for (const MonolithicDevice& d : on) {
    const DeviceType& dev = model.devices()[static_cast<size_t>(d.device)];
    std::vector<SectionCost> costs;
    MemoryBreakdown memory;
    double on_stage0 = 0, split = 0, sync = 0;
    for (const auto& s : w.sections) {
      SectionWork sw = s;
      sw.device = d.device;
      const plan::ParallelConfig sc_config = SharedConfigOf(s, c, o);
      const double p = s.active_fraction;
      // Synchronous DP waits for the replica that drew the most active
      // samples (dp_straggler); the sectioned plan's scheduler spreads
      // active samples evenly instead.
      const double busiest = fx.dp_straggler ? BusiestReplica(per_replica, p, c.dp) : per_replica * p;
      SectionCost sc = model.EvaluateWith(sw, sc_config, microbatches, busiest / microbatches);
      double stage = sc.stage_seconds;
      if (!fx.encoder_tp && IsEncoder(s.model) && c.tp * c.cp > 1) {
        // Ideal: its single-GPU time spread over the TP x CP group.
        plan::ParallelConfig one = sc_config;
        one.tp = 1;
        one.cp = 1;
        stage = model.EvaluateWith(sw, one, microbatches, busiest / microbatches).stage_seconds / (c.tp * c.cp);
      }
      // Memory: the fullest micro-batch (every sample of it active), not
      // the mean: a trainer that sizes for the mean runs out of memory on
      // the micro-batch that drew an image for every sample.
      const double fullest = std::min<double>(c.micro_batch, per_replica);
      const MemoryBreakdown mem = model.EvaluateWith(sw, sc_config, microbatches, fullest).memory;
      if (!fx.colocated_memory && mem.total() > dev.memory_bytes) fits = false;
      memory.weights += mem.weights;
      memory.gradients += mem.gradients;
      memory.optimizer += mem.optimizer;
      memory.activations += mem.activations;
      memory.reserved = std::max(memory.reserved, mem.reserved);
      sc.memory = mem;
      (sc_config.pp < c.pp ? on_stage0 : split) += stage;
      if (s.trains()) sync += sc.dp_sync_seconds + sc.optimizer_seconds;
      const std::string f = PlannerOnlyFeatures(s.model, sc_config, o.support);
      if (!f.empty() && slowest < 0) only += (only.empty() ? "" : "; ") + s.name + ": " + f;
      costs.push_back(std::move(sc));
    }
    if (fx.colocated_memory && memory.total() > dev.memory_bytes) fits = false;
    // 1F1B: (micro-batches + PP - 1) stage times at the pace of the slowest
    // stage, stage 0 when it also runs the encoders (stage0_bottleneck);
    // without the effect the encoders' work would be spread over the stages.
    const double stage0 = on_stage0 + split;
    const double pace = fx.stage0_bottleneck ? stage0 : on_stage0 / c.pp + split;
    const double step = (microbatches + c.pp - 1) * pace + sync;
    rate += c.dp * (static_cast<double>(d.gpus) / out.gpus) * per_replica / step;
    if (memory.total() > out.memory.total()) out.memory = memory;
    if (step > slowest) {
      slowest = step;
      out.sections = std::move(costs);
      out.stage0_seconds = stage0;
    }
  }
  out.planner_only = only;
  // gpu_type_lockstep: every replica gets the same samples, so the slowest
  // type paces the step; without it, samples in proportion to speed.
  out.step_seconds = fx.gpu_type_lockstep || on.size() < 2 ? slowest : B / rate;
  out.throughput = out.step_seconds > 0 ? B / out.step_seconds : 0;
  out.found = fits;
  if (!fits) out.why_not = fmt::format("needs {} per GPU", GiB(out.memory.total()));
  return out;
}

namespace {

// The best configuration on `on` under `fx` (found = false: none fits;
// least_memory gets the smallest per-GPU memory seen).
MonolithicPlan SearchMonolithic(const CostModel& model, const Workload& w, const std::vector<MonolithicDevice>& on,
                                const PlannerOptions& o, const MonolithicEffects& fx, double* least_memory) {
  MonolithicPlan best;
  int gpus = 0, gpn = std::numeric_limits<int>::max();
  for (const MonolithicDevice& d : on) {
    gpus += d.gpus;
    gpn = std::min(gpn, model.devices()[static_cast<size_t>(d.device)].gpus_per_node);
  }
  best.gpus = gpus;
  best.devices = on;
  int64_t min_layers = std::numeric_limits<int64_t>::max();
  for (const auto& s : w.sections) {  // the decoders' layers make the pipeline stages
    if (s.model.kind == plan::ModelKind::kDecoder) min_layers = std::min(min_layers, s.model.layers);
  }
  if (min_layers == std::numeric_limits<int64_t>::max()) min_layers = 1;
  for (int tp = 1; tp <= gpn; tp *= 2) {
    for (int pp = 1; pp <= std::min<int64_t>(min_layers, o.max_pp); ++pp) {
      for (int cp = 1; cp <= o.max_cp; cp *= 2) {
        const int mp = tp * pp * cp;
        if (gpus % mp != 0) continue;
        const int dp = gpus / mp;
        if (dp > std::max<int64_t>(1, model.global_batch())) continue;
        for (int mb : o.micro_batches) {
          if (mb > 1 && mb * dp > model.global_batch()) break;
          for (int rc = 0; rc < 2; ++rc) {
            plan::ParallelConfig c;
            c.tp = tp;
            c.pp = pp;
            c.cp = cp;
            c.dp = dp;
            c.micro_batch = mb;
            c.recompute = rc != 0;
            c.zero_stage = 1;
            bool valid = true;
            if (!o.allow_planner_only && (cp > 1 || rc)) continue;
            if (!o.allow_planner_only) {
              bool any = false;  // TP/PP must be runnable for at least the decoders
              for (const auto& s : w.sections) {
                plan::ModelDesc dense = s.model;
                dense.experts = 0;
                any = any || PlannerOnlyFeatures(dense, c, o.support).empty();
              }
              if (!any) continue;
            }
            for (const auto& s : w.sections) {
              const plan::ModelDesc& m = s.model;
              if (m.kind == plan::ModelKind::kProjector) continue;
              // The stages split every decoder's layers evenly (as CandidateConfigs does).
              if (m.kind == plan::ModelKind::kDecoder && m.layers % pp != 0) valid = false;
              if (m.kind != plan::ModelKind::kDecoder && SharedConfigOf(s, c, o).tp == 1) continue;  // replicated
              if (m.heads % tp != 0) valid = false;
              if (m.kind == plan::ModelKind::kDecoder && m.kv_heads % tp != 0 && tp % m.kv_heads != 0) valid = false;
              if (cp > 1 && s.tokens % (2 * cp) != 0) valid = false;
            }
            if (!valid) continue;
            MonolithicPlan cand = EvaluateMonolithic(model, w, on, c, o, fx);
            if (least_memory) *least_memory = std::min(*least_memory, cand.memory.total());
            if (!cand.found) continue;
            if (!best.found || cand.throughput > best.throughput) best = std::move(cand);
          }
        }
      }
    }
  }
  return best;
}

std::string DevicesText(const CostModel& model, const std::vector<MonolithicDevice>& on) {
  std::string t;
  for (const MonolithicDevice& d : on) {
    t += fmt::format("{}{} {}", t.empty() ? "" : " + ", d.gpus, model.devices()[static_cast<size_t>(d.device)].name);
  }
  return t;
}

}  // namespace

MonolithicPlan PlanMonolithicOn(const CostModel& model, const Workload& w, const std::vector<MonolithicDevice>& on,
                                const PlannerOptions& o) {
  double least_memory = kInf;
  MonolithicPlan best = SearchMonolithic(model, w, on, o, MonolithicEffects{}, &least_memory);
  if (!best.found) {
    const DeviceType& dev = model.devices()[static_cast<size_t>(on.empty() ? 0 : on.front().device)];
    best.why_not = fmt::format("no single configuration fits all sections on one '{}' GPU (least memory {} of {})",
                               dev.name, GiB(least_memory), GiB(dev.memory_bytes));
    return best;
  }
  // The terms: the same configuration without one effect at a time;
  // colocated_memory: the best configuration if each section had the
  // memory to itself.
  const auto without = [&](auto off) {
    MonolithicEffects fx;
    off(fx);
    return EvaluateMonolithic(model, w, on, best.config, o, fx).step_seconds;
  };
  bool encoders = false, data_dependent = false;
  for (const auto& s : w.sections) {
    encoders = encoders || IsEncoder(s.model);
    data_dependent = data_dependent || s.active_fraction < 1.0;
  }
  const plan::ParallelConfig& c = best.config;
  if (encoders && c.pp > 1) {
    best.terms.push_back({"stage0_bottleneck",
                          best.step_seconds - without([](MonolithicEffects& f) { f.stage0_bottleneck = false; }),
                          fmt::format("the encoders run whole on pipeline stage 0 ({:.4g} s per micro-batch), which "
                                      "paces all {} stages",
                                      best.stage0_seconds, c.pp)});
  }
  if (encoders && c.tp * c.cp > 1) {
    best.terms.push_back(
        {"encoder_tp", best.step_seconds - without([](MonolithicEffects& f) { f.encoder_tp = false; }),
         fmt::format("the encoders run at the LLM's TP {}{}: {}", c.tp,
                     c.cp > 1 ? fmt::format(", whole on each of its {} context-parallel ranks", c.cp) : "",
                     o.allow_planner_only || o.support.tensor_parallel_encoder
                         ? "narrow GEMMs and per-layer all-reduces"
                         : "whole on every TP rank (the runtime cannot split them)")});
  }
  if (data_dependent && c.dp > 1) {
    best.terms.push_back({"dp_straggler",
                          best.step_seconds - without([](MonolithicEffects& f) { f.dp_straggler = false; }),
                          fmt::format("the data order dealt round-robin over {} DP replicas; the step waits for the "
                                      "one that drew the most samples of each modality",
                                      c.dp)});
  }
  {
    MonolithicEffects fx;
    fx.colocated_memory = false;
    const MonolithicPlan alone = SearchMonolithic(model, w, on, o, fx, nullptr);
    if (w.sections.size() > 1 && alone.found) {
      const plan::ParallelConfig& a = alone.config;
      best.terms.push_back(
          {"colocated_memory", best.step_seconds - alone.step_seconds,
           a.tp == c.tp && a.pp == c.pp && a.micro_batch == c.micro_batch && a.recompute == c.recompute
               ? fmt::format("all sections' states share each GPU ({} per GPU); the same configuration would win "
                             "without that",
                             GiB(best.memory.total()))
               : fmt::format("all sections' states share each GPU ({} per GPU): without that, TP {} PP {} "
                             "micro-batch {}{} would win",
                             GiB(best.memory.total()), a.tp, a.pp, a.micro_batch, a.recompute ? " recompute" : "")});
    }
  }
  if (on.size() > 1) {
    best.terms.push_back({"gpu_type_lockstep",
                          best.step_seconds - without([](MonolithicEffects& f) { f.gpu_type_lockstep = false; }),
                          fmt::format("one configuration on {} GPUs gives every DP replica the same samples: the "
                                      "slowest type paces the step",
                                      DevicesText(model, on))});
  }
  return best;
}

MonolithicPlan PlanMonolithic(const CostModel& model, const Workload& w, int device, const PlannerOptions& o) {
  const DeviceType& dev = model.devices()[static_cast<size_t>(device)];
  const int budget = dev.shared_node ? dev.gpus_per_node : dev.nodes * dev.gpus_per_node;
  bool several_types = false;
  for (const auto& s : w.sections) several_types = several_types || s.device != w.sections.front().device;
  if (several_types) {
    // The fair comparison: the nodes the sectioned plan holds of each type
    // (the refinement by simulation keeps every section's nodes).
    const PlanOutcome held = PlanSections(model, w, o);
    if (held.ok()) {
      std::vector<MonolithicDevice> all;
      std::vector<std::vector<MonolithicDevice>> choices;
      for (size_t d = 0; d < held.assignment.nodes_per_device.size(); ++d) {
        const int nodes = held.assignment.nodes_per_device[d];
        if (nodes <= 0) continue;
        const DeviceType& t = model.devices()[d];
        const MonolithicDevice md{static_cast<int>(d), t.shared_node ? nodes : nodes * t.gpus_per_node};
        all.push_back(md);
        choices.push_back({md});
      }
      if (all.size() > 1) choices.push_back(all);
      MonolithicPlan best;
      std::string tried;
      for (const auto& on : choices) {
        MonolithicPlan m = PlanMonolithicOn(model, w, on, o);
        tried += fmt::format("{}{}: {}", tried.empty() ? "" : ", ", DevicesText(model, on),
                             m.found ? fmt::format("{:.4g} s/step", m.step_seconds) : std::string("does not fit"));
        if (m.found && (!best.found || m.throughput > best.throughput)) best = std::move(m);
      }
      if (best.found) {
        best.basis = fmt::format(
            "the GPUs the sectioned plan holds ({}), as one single-model trainer could use them (each type alone, "
            "or all in lockstep): {}",
            DevicesText(model, all), tried);
        return best;
      }
    }
  }
  MonolithicPlan m = PlanMonolithicOn(model, w, {{device, budget}}, o);
  m.gpus = budget;
  m.basis = fmt::format("all {} GPUs of '{}' (the budget of the default GPU type)", budget, dev.name);
  return m;
}

std::string DescribeMonolithic(const MonolithicPlan& m) {
  std::string t;
  if (!m.basis.empty()) t += "  on " + m.basis + "\n";
  for (const MonolithicTerm& term : m.terms) {
    if (term.seconds <= 0) continue;  // an effect that costs nothing here is not news (the JSON lists every term)
    t += fmt::format("  {}: +{:.4g} s/step ({})\n", term.name, term.seconds, term.why);
  }
  return t;
}

StepPrediction AnalyticStepPredictor::Predict(const CostModel& model, const Workload& w, const Assignment& a) const {
  StepPrediction p;
  p.predictor = "analytic steady state + pipeline fill";
  p.steady_state_seconds = a.bottleneck_seconds;
  // Fill: the first micro-batch must cross every upstream section first.
  const size_t n = w.sections.size();
  std::vector<double> ready(n, 0.0);
  // Sections are few; relax edges n times (a DAG needs at most n - 1 rounds).
  for (size_t round = 0; round < n; ++round) {
    for (const auto& e : w.edges) {
      const auto& up = a.sections[static_cast<size_t>(e.from)].cost;
      const double latency = up.stage_seconds * up.config.pp;
      ready[static_cast<size_t>(e.to)] =
          std::max(ready[static_cast<size_t>(e.to)], ready[static_cast<size_t>(e.from)] + latency);
    }
  }
  double fill = 0;
  for (double r : ready) fill = std::max(fill, r);
  p.step_seconds = p.steady_state_seconds + fill;
  p.samples_per_second = p.step_seconds > 0 ? static_cast<double>(model.global_batch()) / p.step_seconds : 0;
  return p;
}

}  // namespace maestro::compiler
