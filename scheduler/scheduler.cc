// SPDX-License-Identifier: Apache-2.0
// The four policies, the schedule index/validation, transfers, lower bound.
//
// Wavefront, in two phases (docs/scheduler.md has the long version):
//  1. Placement. Every consistent assignment of a sample to one replica per
//     section is described by a "slot" in [0, L), L = lcm of the DP degrees:
//     replica_s = slot * dp_s / L (nested floor divisions, so every fan-out
//     and fan-in map holds). Samples are placed longest first (by their share
//     of the total work) on the slot that minimises the largest normalised
//     load (load / mean load) over the sections they activate: LPT over a
//     vector of loads, which balances every section's replicas at once.
//  2. Order. One global wave order: samples with the longest dependency
//     chain outside their heaviest section first, interleaved over the
//     replicas of that section. An event-driven list scheduler then runs all
//     ranks together in simulated time (the simulator's semantics). A rank
//     that falls idle forms its next micro-batch from the samples whose
//     inputs have arrived: those that came from upstream first, then those
//     that need no upstream (fillers while upstream work is in flight), each
//     in wave order. Full forward micro-batches go before ready backwards
//     (downstream is kept fed); a loss section runs F then B; a producer's
//     first micro-batch is a quarter size so its consumers start sooner.
#include "scheduler/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <queue>
#include <tuple>
#include <utility>

#include "base/splitmix.h"

namespace maestro::scheduler {
namespace {

size_t Idx(int section, int sample, int n) {
  return static_cast<size_t>(section) * static_cast<size_t>(n) + static_cast<size_t>(sample);
}

// Everything the policies derive from a problem once.
struct Prepared {
  const Problem* p = nullptr;
  int n = 0;  // samples
  int S = 0;  // sections
  int64_t L = 1;
  int64_t dp_max = 0;
  int64_t fifo_block = 1;  // micro_batch of the section with the most replicas
  std::vector<int> topo;   // sections in topological order
  std::vector<std::vector<int>> in_edges, out_edges;
  std::vector<char> grad_edge;         // per edge: a gradient comes back
  std::vector<char> loss_section;      // trains, no gradient out-edge
  std::vector<uint32_t> section_mask;  // per sample: sections it activates
  std::vector<double> fwd1, bwd1;      // (section, sample): single-sample seconds
  std::vector<double> xfer;            // (edge, sample): transfer seconds
  std::vector<int> rank_base;          // first rank index of each section
  int num_ranks = 0;
};

Status Prepare(const Problem& p, Prepared* out) {
  Status st = ValidateProblem(p);
  if (!st.ok()) return st;
  Prepared& pr = *out;
  pr.p = &p;
  pr.n = static_cast<int>(p.samples.size());
  pr.S = static_cast<int>(p.sections.size());
  pr.in_edges.assign(static_cast<size_t>(pr.S), {});
  pr.out_edges.assign(static_cast<size_t>(pr.S), {});
  pr.grad_edge.assign(p.edges.size(), 0);
  for (size_t e = 0; e < p.edges.size(); ++e) {
    const EdgeSpec& edge = p.edges[e];
    pr.out_edges[static_cast<size_t>(edge.from)].push_back(static_cast<int>(e));
    pr.in_edges[static_cast<size_t>(edge.to)].push_back(static_cast<int>(e));
    pr.grad_edge[e] =
        p.sections[static_cast<size_t>(edge.from)].trains && p.sections[static_cast<size_t>(edge.to)].trains;
  }
  pr.loss_section.assign(static_cast<size_t>(pr.S), 0);
  for (int s = 0; s < pr.S; ++s) {
    bool has_grad_out = false;
    for (int e : pr.out_edges[static_cast<size_t>(s)]) has_grad_out |= pr.grad_edge[static_cast<size_t>(e)] != 0;
    pr.loss_section[static_cast<size_t>(s)] = p.sections[static_cast<size_t>(s)].trains && !has_grad_out;
  }
  // Topological order, smallest index first among the ready ones (deterministic).
  std::vector<int> indeg(static_cast<size_t>(pr.S), 0);
  for (const EdgeSpec& e : p.edges) ++indeg[static_cast<size_t>(e.to)];
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int s = 0; s < pr.S; ++s) {
    if (indeg[static_cast<size_t>(s)] == 0) ready.push(s);
  }
  while (!ready.empty()) {
    const int s = ready.top();
    ready.pop();
    pr.topo.push_back(s);
    for (int e : pr.out_edges[static_cast<size_t>(s)]) {
      const int t = p.edges[static_cast<size_t>(e)].to;
      if (--indeg[static_cast<size_t>(t)] == 0) ready.push(t);
    }
  }
  pr.L = 1;
  for (const SectionSpec& s : p.sections) {
    pr.L = std::lcm(pr.L, static_cast<int64_t>(s.dp));
    if (s.dp > pr.dp_max) {
      pr.dp_max = s.dp;
      pr.fifo_block = s.micro_batch;
    }
    if (pr.L > (1 << 16)) {
      return Status::InvalidArgument(
          "scheduler problem: the lcm of the DP degrees exceeds 65536; "
          "use DP degrees that divide one another");
    }
  }
  pr.rank_base.assign(static_cast<size_t>(pr.S) + 1, 0);
  for (int s = 0; s < pr.S; ++s) {
    pr.rank_base[static_cast<size_t>(s) + 1] =
        pr.rank_base[static_cast<size_t>(s)] + p.sections[static_cast<size_t>(s)].dp;
  }
  pr.num_ranks = pr.rank_base[static_cast<size_t>(pr.S)];
  pr.section_mask.assign(static_cast<size_t>(pr.n), 0);
  pr.fwd1.assign(static_cast<size_t>(pr.S) * static_cast<size_t>(pr.n), 0.0);
  pr.bwd1.assign(pr.fwd1.size(), 0.0);
  pr.xfer.assign(p.edges.size() * static_cast<size_t>(pr.n), 0.0);
  for (size_t e = 0; e < p.edges.size(); ++e) {
    for (int i = 0; i < pr.n; ++i) {
      const Sample& smp = p.samples[static_cast<size_t>(i)];
      if (p.Activates(p.edges[e].from, smp) && p.Activates(p.edges[e].to, smp)) {
        pr.xfer[Idx(static_cast<int>(e), i, pr.n)] = p.costs->TransferSeconds(static_cast<int>(e), smp);
      }
    }
  }
  std::vector<const Sample*> one(1);
  for (int i = 0; i < pr.n; ++i) {
    const Sample& smp = p.samples[static_cast<size_t>(i)];
    one[0] = &smp;
    for (int s = 0; s < pr.S; ++s) {
      if (!p.Activates(s, smp)) continue;
      pr.section_mask[static_cast<size_t>(i)] |= 1u << s;
      pr.fwd1[Idx(s, i, pr.n)] = p.costs->ForwardSeconds(s, one);
      if (p.sections[static_cast<size_t>(s)].trains) pr.bwd1[Idx(s, i, pr.n)] = p.costs->BackwardSeconds(s, one);
      const double f = pr.fwd1[Idx(s, i, pr.n)], b = pr.bwd1[Idx(s, i, pr.n)];
      if (!(f >= 0 && b >= 0 && std::isfinite(f) && std::isfinite(b))) {
        return Status::InvalidArgument("cost model: section '" + p.sections[static_cast<size_t>(s)].name +
                                       "' costs sample " + std::to_string(smp.id) + " " + std::to_string(f) +
                                       " s forward, " + std::to_string(b) +
                                       " s backward; costs must be finite and >= 0 (check the profile)");
      }
    }
  }
  for (double t : pr.xfer) {
    if (!(t >= 0 && std::isfinite(t))) {
      return Status::InvalidArgument("cost model: a transfer costs " + std::to_string(t) +
                                     " s; costs must be finite and >= 0 (check the link profile)");
    }
  }
  return Status::Ok();
}

bool Activ(const Prepared& pr, int s, int i) {
  return (pr.section_mask[static_cast<size_t>(i)] >> s) & 1u;
}

int ReplicaOfSlot(const Prepared& pr, int s, int64_t slot) {
  return static_cast<int>(slot * pr.p->sections[static_cast<size_t>(s)].dp / pr.L);
}

// replica[(s, i)] for every activated pair, -1 elsewhere.
using Placement = std::vector<int32_t>;

Placement PlaceContiguous(const Prepared& pr) {
  Placement place(static_cast<size_t>(pr.S) * static_cast<size_t>(pr.n), -1);
  for (int i = 0; i < pr.n; ++i) {
    const int64_t slot = static_cast<int64_t>(i) * pr.L / std::max(pr.n, 1);
    for (int s = 0; s < pr.S; ++s) {
      if (Activ(pr, s, i)) place[Idx(s, i, pr.n)] = ReplicaOfSlot(pr, s, slot);
    }
  }
  return place;
}

Placement PlaceRoundRobin(const Prepared& pr) {
  Placement place(static_cast<size_t>(pr.S) * static_cast<size_t>(pr.n), -1);
  for (int i = 0; i < pr.n; ++i) {
    const int64_t g = static_cast<int64_t>(i) / pr.fifo_block;  // a micro-batch of the finest section
    const int64_t per = pr.L / pr.dp_max;
    const int64_t slot = (g % pr.dp_max) * per + (g / pr.dp_max) % per;
    for (int s = 0; s < pr.S; ++s) {
      if (Activ(pr, s, i)) place[Idx(s, i, pr.n)] = ReplicaOfSlot(pr, s, slot);
    }
  }
  return place;
}

// PyTorch's DistributedSampler (shuffle off): sample i to replica i mod world
// of the widest section; the other sections follow through the fan-out maps.
Placement PlaceStrided(const Prepared& pr) {
  Placement place(static_cast<size_t>(pr.S) * static_cast<size_t>(pr.n), -1);
  for (int i = 0; i < pr.n; ++i) {
    const int64_t g = static_cast<int64_t>(i);
    const int64_t per = pr.L / pr.dp_max;
    const int64_t slot = (g % pr.dp_max) * per + (g / pr.dp_max) % per;
    for (int s = 0; s < pr.S; ++s) {
      if (Activ(pr, s, i)) place[Idx(s, i, pr.n)] = ReplicaOfSlot(pr, s, slot);
    }
  }
  return place;
}

Placement PlaceBalanced(const Prepared& pr, uint64_t tie_seed) {
  const Problem& p = *pr.p;
  Placement place(static_cast<size_t>(pr.S) * static_cast<size_t>(pr.n), -1);
  std::vector<double> mean_load(static_cast<size_t>(pr.S), 0.0);
  for (int s = 0; s < pr.S; ++s) {
    double w = 0;
    for (int i = 0; i < pr.n; ++i) w += pr.fwd1[Idx(s, i, pr.n)] + pr.bwd1[Idx(s, i, pr.n)];
    mean_load[static_cast<size_t>(s)] = w / p.sections[static_cast<size_t>(s)].dp;
  }
  std::vector<double> inv_mean(static_cast<size_t>(pr.S), 0.0);
  for (int s = 0; s < pr.S; ++s) {
    inv_mean[static_cast<size_t>(s)] =
        mean_load[static_cast<size_t>(s)] > 0 ? 1.0 / mean_load[static_cast<size_t>(s)] : 0.0;
  }
  // Longest first: a sample's weight is its share of each section's mean load.
  struct Item {
    double weight;
    uint64_t tie;
    int index;
  };
  std::vector<Item> order(static_cast<size_t>(pr.n));
  for (int i = 0; i < pr.n; ++i) {
    double w = 0;
    for (int s = 0; s < pr.S; ++s)
      w += (pr.fwd1[Idx(s, i, pr.n)] + pr.bwd1[Idx(s, i, pr.n)]) * inv_mean[static_cast<size_t>(s)];
    order[static_cast<size_t>(i)] = {w, SplitMix64(tie_seed ^ p.samples[static_cast<size_t>(i)].id), i};
  }
  std::sort(order.begin(), order.end(), [](const Item& a, const Item& b) {
    if (a.weight != b.weight) return a.weight > b.weight;
    if (a.tie != b.tie) return a.tie < b.tie;
    return a.index < b.index;
  });
  std::vector<std::vector<double>> load(static_cast<size_t>(pr.S));
  for (int s = 0; s < pr.S; ++s)
    load[static_cast<size_t>(s)].assign(static_cast<size_t>(p.sections[static_cast<size_t>(s)].dp), 0.0);
  // replica of each slot, per section (L <= 65536).
  std::vector<std::vector<int32_t>> slot_replica(static_cast<size_t>(pr.S));
  for (int s = 0; s < pr.S; ++s) {
    auto& t = slot_replica[static_cast<size_t>(s)];
    t.resize(static_cast<size_t>(pr.L));
    for (int64_t slot = 0; slot < pr.L; ++slot) t[static_cast<size_t>(slot)] = ReplicaOfSlot(pr, s, slot);
  }
  std::vector<int> act;
  std::vector<double> cost;
  for (const Item& item : order) {
    const int i = item.index;
    act.clear();
    cost.clear();
    for (int s = 0; s < pr.S; ++s) {
      if (!Activ(pr, s, i)) continue;
      act.push_back(s);
      cost.push_back(pr.fwd1[Idx(s, i, pr.n)] + pr.bwd1[Idx(s, i, pr.n)]);
    }
    if (act.empty()) continue;
    // Distinct candidates: one per slot of the lcm of the activated DPs.
    int64_t act_lcm = 1;
    for (int s : act) act_lcm = std::lcm(act_lcm, static_cast<int64_t>(p.sections[static_cast<size_t>(s)].dp));
    const int64_t stride = pr.L / act_lcm;
    int64_t best_slot = 0;
    double best_max = std::numeric_limits<double>::infinity();
    double best_sum = std::numeric_limits<double>::infinity();
    for (int64_t slot = 0; slot < pr.L; slot += stride) {
      double mx = 0, sum = 0;
      for (size_t k = 0; k < act.size(); ++k) {
        const int s = act[k];
        const double v = (load[static_cast<size_t>(s)]
                              [static_cast<size_t>(slot_replica[static_cast<size_t>(s)][static_cast<size_t>(slot)])] +
                          cost[k]) *
                         inv_mean[static_cast<size_t>(s)];
        mx = std::max(mx, v);
        sum += v;
      }
      if (mx < best_max || (mx == best_max && sum < best_sum)) {
        best_max = mx;
        best_sum = sum;
        best_slot = slot;
      }
    }
    for (size_t k = 0; k < act.size(); ++k) {
      const int s = act[k];
      const int r = ReplicaOfSlot(pr, s, best_slot);
      place[Idx(s, i, pr.n)] = r;
      load[static_cast<size_t>(s)][static_cast<size_t>(r)] += cost[k];
    }
  }
  return place;
}

// Static programs: each rank's samples in data order, chunks of micro_batch;
// a loss section runs F0 B0 F1 B1 ..., another training section all its
// forwards then all its backwards, then the optimizer.
Schedule StaticSchedule(const Prepared& pr, const Placement& place) {
  const Problem& p = *pr.p;
  Schedule sch;
  sch.ranks.resize(static_cast<size_t>(pr.num_ranks));
  for (int s = 0; s < pr.S; ++s) {
    const SectionSpec& spec = p.sections[static_cast<size_t>(s)];
    std::vector<std::vector<uint64_t>> members(static_cast<size_t>(spec.dp));
    for (int i = 0; i < pr.n; ++i) {
      const int r = place[Idx(s, i, pr.n)];
      if (r >= 0) members[static_cast<size_t>(r)].push_back(p.samples[static_cast<size_t>(i)].id);
    }
    for (int r = 0; r < spec.dp; ++r) {
      RankProgram& prog = sch.ranks[static_cast<size_t>(pr.rank_base[static_cast<size_t>(s)] + r)];
      prog.section = s;
      prog.replica = r;
      const auto& m = members[static_cast<size_t>(r)];
      for (size_t k = 0; k < m.size(); k += static_cast<size_t>(spec.micro_batch)) {
        MicroBatch mb;
        mb.sample_ids.assign(
            m.begin() + static_cast<std::ptrdiff_t>(k),
            m.begin() + static_cast<std::ptrdiff_t>(std::min(m.size(), k + static_cast<size_t>(spec.micro_batch))));
        prog.micro_batches.push_back(std::move(mb));
      }
      const int nmb = static_cast<int>(prog.micro_batches.size());
      for (int b = 0; b < nmb; ++b) {
        prog.ops.push_back({OpKind::kForward, b});
        if (pr.loss_section[static_cast<size_t>(s)]) prog.ops.push_back({OpKind::kBackward, b});
      }
      if (spec.trains && !pr.loss_section[static_cast<size_t>(s)]) {
        for (int b = 0; b < nmb; ++b) prog.ops.push_back({OpKind::kBackward, b});
      }
      if (spec.trains) prog.ops.push_back({OpKind::kOptimizer, -1});
    }
  }
  return sch;
}

// ---- the wavefront list scheduler --------------------------------------------

enum class EventKind : uint8_t { kRankFree, kArrive, kGradReady };
struct Event {
  double time = 0;
  uint64_t seq = 0;
  EventKind kind = EventKind::kRankFree;
  int rank = 0;
  int payload = 0;                        // sample (kArrive) or micro-batch (kGradReady)
  bool operator<(const Event& o) const {  // min-heap on (time, seq)
    return time != o.time ? time > o.time : seq > o.seq;
  }
};

struct RankState {
  int section = 0;
  // Samples whose inputs have arrived; the smallest key goes first.
  // A min-heap (std::greater) of keys tier * n + wave rank; unique per sample.
  std::vector<int> available;
  int to_arrive = 0;  // samples of this rank not yet available
  int unformed = 0;   // samples not yet in a micro-batch
  bool busy = false;
  int loss_backward = -1;  // loss section: the mb whose B comes next
  std::priority_queue<int, std::vector<int>, std::greater<int>> backward_ready;
  int backwards_left = 0;
  bool optimizer_done = false;
  int cap_relief = 0;                        // in-flight micro-batches allowed over the cap (deadlock relief)
  std::vector<int> pending_grad;             // per micro-batch
  std::vector<double> grad_ready_at;         // per micro-batch
  std::vector<std::vector<int>> mb_samples;  // sample indices
};

// Per sample: the longest dependency chain of the sample alone (forward
// down the DAG, backward back up, optimizer after), with single-sample costs.
std::vector<double> SampleChains(const Prepared& pr) {
  const Problem& p = *pr.p;
  const int n = pr.n;
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  std::vector<double> ef(static_cast<size_t>(pr.S)), eb(static_cast<size_t>(pr.S));
  for (int i = 0; i < n; ++i) {
    double chain = 0;
    for (int s : pr.topo) {
      if (!Activ(pr, s, i)) continue;
      double start = 0;
      for (int e : pr.in_edges[static_cast<size_t>(s)]) {
        const int u = p.edges[static_cast<size_t>(e)].from;
        if (Activ(pr, u, i)) start = std::max(start, ef[static_cast<size_t>(u)] + pr.xfer[Idx(e, i, n)]);
      }
      ef[static_cast<size_t>(s)] = start + pr.fwd1[Idx(s, i, n)];
      chain = std::max(chain, ef[static_cast<size_t>(s)]);
    }
    for (auto it = pr.topo.rbegin(); it != pr.topo.rend(); ++it) {
      const int s = *it;
      if (!Activ(pr, s, i) || !p.sections[static_cast<size_t>(s)].trains) continue;
      double start = ef[static_cast<size_t>(s)];
      for (int e : pr.out_edges[static_cast<size_t>(s)]) {
        const int d = p.edges[static_cast<size_t>(e)].to;
        if (pr.grad_edge[static_cast<size_t>(e)] && Activ(pr, d, i)) {
          start = std::max(start, eb[static_cast<size_t>(d)] + pr.xfer[Idx(e, i, n)]);
        }
      }
      eb[static_cast<size_t>(s)] = start + pr.bwd1[Idx(s, i, n)];
      chain = std::max(chain, eb[static_cast<size_t>(s)] + p.costs->OptimizerSeconds(s));
    }
    out[static_cast<size_t>(i)] = chain;
  }
  return out;
}

StatusOr<Schedule> WavefrontSchedule(const Prepared& pr, const Placement& place, uint64_t tie_seed, int max_in_flight) {
  const Problem& p = *pr.p;
  const int n = pr.n;
  // The wave order: one global priority shared by every section, so that
  // producers meeting at a join emit the same samples first. Samples whose
  // dependency chain outside their heaviest section is longest (upstream
  // encoders before, their backward after) lead; among equals, longest first.
  const std::vector<double> chain = SampleChains(pr);
  std::vector<uint64_t> tie(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) tie[static_cast<size_t>(i)] = SplitMix64(tie_seed ^ p.samples[static_cast<size_t>(i)].id);
  std::vector<int> wave_rank(static_cast<size_t>(n));
  std::vector<int> wave_order;  // wave rank -> sample
  {
    std::vector<double> lead(static_cast<size_t>(n)), total(static_cast<size_t>(n));
    std::vector<double> heavy_cost(static_cast<size_t>(n));
    std::vector<int> heavy_rank(static_cast<size_t>(n), 0);
    for (int i = 0; i < n; ++i) {
      double heaviest = 0, sum = 0;
      for (int s = 0; s < pr.S; ++s) {
        const double c = pr.fwd1[Idx(s, i, n)] + pr.bwd1[Idx(s, i, n)];
        if (c > heaviest) {
          heaviest = c;
          heavy_rank[static_cast<size_t>(i)] = pr.rank_base[static_cast<size_t>(s)] + place[Idx(s, i, n)];
        }
        sum += c;
      }
      heavy_cost[static_cast<size_t>(i)] = heaviest;
      lead[static_cast<size_t>(i)] = chain[static_cast<size_t>(i)] - heaviest;
      total[static_cast<size_t>(i)] = sum;
    }
    struct WaveKey {
      double lead, total;
      uint64_t tie;
      int index;
    };
    std::vector<WaveKey> keys(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      keys[static_cast<size_t>(i)] = {lead[static_cast<size_t>(i)], total[static_cast<size_t>(i)],
                                      tie[static_cast<size_t>(i)], i};
    }
    std::sort(keys.begin(), keys.end(), [](const WaveKey& a, const WaveKey& b) {
      if (a.lead != b.lead) return a.lead > b.lead;
      if (a.total != b.total) return a.total > b.total;
      if (a.tie != b.tie) return a.tie < b.tie;
      return a.index < b.index;
    });
    // Interleave the replicas: a sample's key is the work its heaviest
    // section's replica has ahead of it in this order, so every replica gets
    // its first samples first (rather than one replica's whole list first).
    std::vector<double> ahead(static_cast<size_t>(pr.num_ranks), 0.0);
    std::vector<std::pair<double, int>> timed(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k) {
      const int i = keys[static_cast<size_t>(k)].index;
      double& a = ahead[static_cast<size_t>(heavy_rank[static_cast<size_t>(i)])];
      timed[static_cast<size_t>(k)] = {a, k};
      a += heavy_cost[static_cast<size_t>(i)];
    }
    std::sort(timed.begin(), timed.end());
    std::vector<int> order(static_cast<size_t>(n));
    for (int k = 0; k < n; ++k)
      order[static_cast<size_t>(k)] = keys[static_cast<size_t>(timed[static_cast<size_t>(k)].second)].index;
    for (int k = 0; k < n; ++k) wave_rank[static_cast<size_t>(order[static_cast<size_t>(k)])] = k;
    wave_order = std::move(order);
  }
  // Samples that came from upstream go first (their upstream is waiting for
  // the gradient, or more of them are in flight); samples that need no
  // upstream fill in while upstream work is in flight.
  auto priority_of = [&](int i, bool from_upstream) {
    return (from_upstream ? 0 : n) + wave_rank[static_cast<size_t>(i)];
  };
  auto sample_of_key = [&](int key) { return wave_order[static_cast<size_t>(key % std::max(n, 1))]; };
  auto push_available = [&](RankState& rs, int key) {
    rs.available.push_back(key);
    std::push_heap(rs.available.begin(), rs.available.end(), std::greater<int>());
  };

  std::vector<RankState> ranks(static_cast<size_t>(pr.num_ranks));
  for (int s = 0; s < pr.S; ++s) {
    for (int r = 0; r < p.sections[static_cast<size_t>(s)].dp; ++r)
      ranks[static_cast<size_t>(pr.rank_base[static_cast<size_t>(s)] + r)].section = s;
  }
  std::vector<int> pending_in(static_cast<size_t>(pr.S) * static_cast<size_t>(n), 0);
  std::vector<char> has_upstream(pending_in.size(), 0);
  std::vector<double> ready_at(pending_in.size(), 0.0);
  std::vector<int32_t> mb_of(pending_in.size(), -1);
  std::vector<Event> event_storage;
  event_storage.reserve(static_cast<size_t>(n) * 2 + static_cast<size_t>(pr.num_ranks) * 4);
  std::priority_queue<Event> events(std::less<Event>(), std::move(event_storage));
  uint64_t seq = 0;
  auto rank_of = [&](int s, int i) { return pr.rank_base[static_cast<size_t>(s)] + place[Idx(s, i, n)]; };

  for (int i = 0; i < n; ++i) {
    for (int s = 0; s < pr.S; ++s) {
      if (Activ(pr, s, i)) ++ranks[static_cast<size_t>(rank_of(s, i))].unformed;
    }
  }
  for (int rk = 0; rk < pr.num_ranks; ++rk) {
    RankState& rs = ranks[static_cast<size_t>(rk)];
    rs.available.reserve(static_cast<size_t>(rs.unformed));
    const size_t mbs = static_cast<size_t>(rs.unformed) + 1;  // an upper bound on micro-batches
    rs.mb_samples.reserve(mbs);
    rs.pending_grad.reserve(mbs);
    rs.grad_ready_at.reserve(mbs);
  }
  for (int i = 0; i < n; ++i) {
    for (int s = 0; s < pr.S; ++s) {
      if (!Activ(pr, s, i)) continue;
      RankState& rs = ranks[static_cast<size_t>(rank_of(s, i))];
      ++rs.to_arrive;
      int k = 0;
      for (int e : pr.in_edges[static_cast<size_t>(s)]) k += Activ(pr, p.edges[static_cast<size_t>(e)].from, i) ? 1 : 0;
      pending_in[Idx(s, i, n)] = k;
      has_upstream[Idx(s, i, n)] = k > 0;
      if (k == 0) {  // available from the start: no event needed
        RankState& src = ranks[static_cast<size_t>(rank_of(s, i))];
        --src.to_arrive;
        push_available(src, priority_of(i, false));
        if (!src.busy) events.push({0.0, seq++, EventKind::kRankFree, rank_of(s, i), 0});
        src.busy = true;  // marks "kick already queued"; the event clears it
      }
    }
  }
  Schedule sch;
  sch.ranks.resize(static_cast<size_t>(pr.num_ranks));
  for (int s = 0; s < pr.S; ++s) {
    for (int r = 0; r < p.sections[static_cast<size_t>(s)].dp; ++r) {
      RankProgram& prog = sch.ranks[static_cast<size_t>(pr.rank_base[static_cast<size_t>(s)] + r)];
      prog.section = s;
      prog.replica = r;
      const int cnt = ranks[static_cast<size_t>(pr.rank_base[static_cast<size_t>(s)] + r)].unformed;
      prog.micro_batches.reserve(static_cast<size_t>(cnt / p.sections[static_cast<size_t>(s)].micro_batch + 2));
      prog.ops.reserve(static_cast<size_t>(cnt) + 2);
    }
  }
  for (int rk = 0; rk < pr.num_ranks; ++rk) {
    if (ranks[static_cast<size_t>(rk)].unformed == 0 &&
        p.sections[static_cast<size_t>(ranks[static_cast<size_t>(rk)].section)].trains) {
      events.push({0.0, seq++, EventKind::kRankFree, rk, 0});  // optimizer only
    }
  }

  std::vector<const Sample*> buf;
  double makespan = 0;
  double makespan_so_far = 0;  // the time of the events being processed
  auto start_op = [&](int rk, double t, OpKind kind, int mb) {
    RankState& rs = ranks[static_cast<size_t>(rk)];
    const int s = rs.section;
    RankProgram& prog = sch.ranks[static_cast<size_t>(rk)];
    double dur = 0;
    if (kind == OpKind::kOptimizer) {
      dur = p.costs->OptimizerSeconds(s);
      rs.optimizer_done = true;
      prog.ops.push_back({OpKind::kOptimizer, -1});
    } else {
      buf.clear();
      for (int i : rs.mb_samples[static_cast<size_t>(mb)]) buf.push_back(&p.samples[static_cast<size_t>(i)]);
      dur = kind == OpKind::kForward ? p.costs->ForwardSeconds(s, buf) : p.costs->BackwardSeconds(s, buf);
      prog.ops.push_back({kind, mb});
    }
    const double tf = t + dur;
    makespan = std::max(makespan, tf);
    rs.busy = true;
    events.push({tf, seq++, EventKind::kRankFree, rk, 0});
    if (kind == OpKind::kForward) {
      int grads = 0;
      for (int i : rs.mb_samples[static_cast<size_t>(mb)]) {
        for (int e : pr.out_edges[static_cast<size_t>(s)]) {
          const int d = p.edges[static_cast<size_t>(e)].to;
          if (!Activ(pr, d, i)) continue;
          if (pr.grad_edge[static_cast<size_t>(e)]) ++grads;
          const size_t di = Idx(d, i, n);
          ready_at[di] = std::max(ready_at[di], tf + pr.xfer[Idx(e, i, n)]);
          if (--pending_in[di] == 0) events.push({ready_at[di], seq++, EventKind::kArrive, rank_of(d, i), i});
        }
      }
      if (p.sections[static_cast<size_t>(s)].trains) {
        if (pr.loss_section[static_cast<size_t>(s)]) {
          rs.loss_backward = mb;
        } else {
          rs.pending_grad[static_cast<size_t>(mb)] = grads;
          if (grads == 0) events.push({tf, seq++, EventKind::kGradReady, rk, mb});
        }
      }
    } else if (kind == OpKind::kBackward) {
      --rs.backwards_left;
      for (int i : rs.mb_samples[static_cast<size_t>(mb)]) {
        for (int e : pr.in_edges[static_cast<size_t>(s)]) {
          if (!pr.grad_edge[static_cast<size_t>(e)]) continue;
          const int u = p.edges[static_cast<size_t>(e)].from;
          if (!Activ(pr, u, i)) continue;
          const int urk = rank_of(u, i);
          RankState& us = ranks[static_cast<size_t>(urk)];
          const int umb = mb_of[Idx(u, i, n)];
          double& at = us.grad_ready_at[static_cast<size_t>(umb)];
          at = std::max(at, tf + pr.xfer[Idx(e, i, n)]);
          if (--us.pending_grad[static_cast<size_t>(umb)] == 0)
            events.push({at, seq++, EventKind::kGradReady, urk, umb});
        }
      }
    }
  };
  auto form_forward = [&](int rk, double t) {
    RankState& rs = ranks[static_cast<size_t>(rk)];
    const int s = rs.section;
    const int mb = static_cast<int>(rs.mb_samples.size());
    // A producer's first micro-batch is a quarter size: its consumers start
    // sooner (pipeline fill), at the price of one more small micro-batch.
    int cap = p.sections[static_cast<size_t>(s)].micro_batch;
    if (mb == 0 && !pr.out_edges[static_cast<size_t>(s)].empty()) cap = std::max(1, (cap + 3) / 4);
    std::vector<int> members;
    MicroBatch out;
    out.sample_ids.reserve(static_cast<size_t>(cap));
    members.reserve(static_cast<size_t>(cap));
    while (!rs.available.empty() && static_cast<int>(members.size()) < cap) {
      std::pop_heap(rs.available.begin(), rs.available.end(), std::greater<int>());
      const int i = sample_of_key(rs.available.back());
      rs.available.pop_back();
      members.push_back(i);
      mb_of[Idx(s, i, n)] = mb;
      out.sample_ids.push_back(p.samples[static_cast<size_t>(i)].id);
    }
    rs.unformed -= static_cast<int>(members.size());
    rs.mb_samples.push_back(std::move(members));
    rs.pending_grad.push_back(0);
    rs.grad_ready_at.push_back(0.0);
    if (p.sections[static_cast<size_t>(s)].trains) ++rs.backwards_left;
    sch.ranks[static_cast<size_t>(rk)].micro_batches.push_back(std::move(out));
    start_op(rk, t, OpKind::kForward, mb);
  };
  auto dispatch = [&](int rk, double t) {
    RankState& rs = ranks[static_cast<size_t>(rk)];
    if (rs.busy) return;
    const SectionSpec& spec = p.sections[static_cast<size_t>(rs.section)];
    if (rs.loss_backward >= 0) {
      const int mb = rs.loss_backward;
      rs.loss_backward = -1;
      start_op(rk, t, OpKind::kBackward, mb);
      return;
    }
    // A memory cap: a training section that waits for gradients holds at
    // most max_in_flight micro-batches between their forward and backward.
    const bool may_forward = max_in_flight <= 0 || !spec.trains || rs.backwards_left < max_in_flight + rs.cap_relief;
    const int avail = may_forward ? static_cast<int>(rs.available.size()) : 0;
    if (avail >= spec.micro_batch || (avail > 0 && rs.to_arrive == 0)) {
      form_forward(rk, t);
    } else if (!rs.backward_ready.empty()) {
      const int mb = rs.backward_ready.top();
      rs.backward_ready.pop();
      start_op(rk, t, OpKind::kBackward, mb);
    } else if (avail > 0) {
      form_forward(rk, t);  // work-conserving: a partial micro-batch
    } else if (spec.trains && rs.unformed == 0 && rs.backwards_left == 0 && !rs.optimizer_done) {
      start_op(rk, t, OpKind::kOptimizer, -1);
    }
  };

  std::vector<int> touched;
  std::vector<char> is_touched(static_cast<size_t>(pr.num_ranks), 0);
  // With an in-flight cap, two capped branches that meet in one sample can
  // wait on each other. When nothing is left to happen but work remains, the
  // lowest capped rank with samples waiting may go one micro-batch over.
  auto relieve = [&]() {
    for (int rk = 0; rk < pr.num_ranks; ++rk) {
      RankState& rs = ranks[static_cast<size_t>(rk)];
      if (!rs.busy && !rs.available.empty()) {
        ++rs.cap_relief;
        events.push({makespan_so_far, seq++, EventKind::kRankFree, rk, 0});
        rs.busy = true;
        return true;
      }
    }
    return false;
  };
  while (!events.empty() || (max_in_flight > 0 && relieve())) {
    const double t = events.top().time;
    makespan_so_far = t;
    touched.clear();
    while (!events.empty() && events.top().time == t) {
      const Event ev = events.top();
      events.pop();
      RankState& rs = ranks[static_cast<size_t>(ev.rank)];
      switch (ev.kind) {
        case EventKind::kRankFree: rs.busy = false; break;
        case EventKind::kArrive:
          --rs.to_arrive;
          push_available(rs, priority_of(ev.payload, has_upstream[Idx(rs.section, ev.payload, n)] != 0));
          break;
        case EventKind::kGradReady: rs.backward_ready.push(ev.payload); break;
      }
      if (!is_touched[static_cast<size_t>(ev.rank)]) {
        is_touched[static_cast<size_t>(ev.rank)] = 1;
        touched.push_back(ev.rank);
      }
    }
    std::sort(touched.begin(), touched.end());
    for (int rk : touched) {
      is_touched[static_cast<size_t>(rk)] = 0;
      dispatch(rk, t);
    }
  }
  for (int rk = 0; rk < pr.num_ranks; ++rk) {
    const RankState& rs = ranks[static_cast<size_t>(rk)];
    if (rs.unformed > 0 || rs.backwards_left > 0 || rs.loss_backward >= 0 ||
        (p.sections[static_cast<size_t>(rs.section)].trains && !rs.optimizer_done)) {
      return Status::Internal("wavefront scheduler: rank " + std::to_string(rk) + " of section '" +
                              p.sections[static_cast<size_t>(rs.section)].name +
                              "' did not finish its work (a bug; please report with the problem)");
    }
  }
  sch.predicted_step_seconds = makespan;
  return sch;
}

}  // namespace

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kWavefront: return "wavefront";
    case Policy::kFifo: return "fifo";
    case Policy::kBalanceOnly: return "balance";
    case Policy::kFifoContiguous: return "fifo-contiguous";
    case Policy::kFifoStrided: return "fifo-strided";
  }
  return "?";
}

StatusOr<Policy> PolicyFromName(const std::string& name) {
  for (Policy p : kAllPolicies) {
    if (name == PolicyName(p)) return p;
  }
  return Status::InvalidArgument("unknown scheduling policy '" + name +
                                 "' (expected wavefront, fifo, balance, fifo-contiguous or fifo-strided)");
}

int Schedule::RankIndex(int section, int replica) const {
  auto it = std::lower_bound(
      ranks.begin(), ranks.end(), std::make_pair(section, replica),
      [](const RankProgram& r, const std::pair<int, int>& key) { return std::make_pair(r.section, r.replica) < key; });
  if (it == ranks.end() || it->section != section || it->replica != replica) return -1;
  return static_cast<int>(it - ranks.begin());
}

StatusOr<Schedule> BuildSchedule(const Problem& problem, const ScheduleOptions& options) {
  Prepared pr;
  Status st = Prepare(problem, &pr);
  if (!st.ok()) return st;
  const uint64_t tie_seed = SplitMix64(options.seed ^ SplitMix64(static_cast<uint64_t>(options.step)));
  Schedule sch;
  switch (options.policy) {
    case Policy::kFifo: sch = StaticSchedule(pr, PlaceRoundRobin(pr)); break;
    case Policy::kFifoContiguous: sch = StaticSchedule(pr, PlaceContiguous(pr)); break;
    case Policy::kFifoStrided: sch = StaticSchedule(pr, PlaceStrided(pr)); break;
    case Policy::kBalanceOnly: sch = StaticSchedule(pr, PlaceBalanced(pr, tie_seed)); break;
    case Policy::kWavefront: {
      auto wf = WavefrontSchedule(pr, PlaceBalanced(pr, tie_seed), tie_seed, options.max_in_flight);
      if (!wf.ok()) return wf.status();
      sch = std::move(wf).value();
      break;
    }
  }
  sch.policy = PolicyName(options.policy);
  sch.seed = options.seed;
  sch.step = options.step;
  return sch;
}

StatusOr<ScheduleIndex> IndexSchedule(const Problem& p, const Schedule& sch) {
  Status st = ValidateProblem(p);
  if (!st.ok()) return st;
  const int n = static_cast<int>(p.samples.size());
  const int S = static_cast<int>(p.sections.size());
  std::vector<std::pair<uint64_t, int>> by_id(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) by_id[static_cast<size_t>(i)] = {p.samples[static_cast<size_t>(i)].id, i};
  std::sort(by_id.begin(), by_id.end());
  ScheduleIndex idx;
  idx.num_samples = n;
  idx.rank.assign(static_cast<size_t>(S) * static_cast<size_t>(n), -1);
  idx.micro_batch.assign(idx.rank.size(), -1);
  size_t expected = 0;
  for (int s = 0; s < S; ++s) expected += static_cast<size_t>(p.sections[static_cast<size_t>(s)].dp);
  if (sch.ranks.size() != expected) {
    return Status::InvalidArgument("schedule has " + std::to_string(sch.ranks.size()) +
                                   " rank programs; the problem has " + std::to_string(expected) + " section replicas");
  }
  size_t k = 0;
  for (int s = 0; s < S; ++s) {
    const SectionSpec& spec = p.sections[static_cast<size_t>(s)];
    for (int r = 0; r < spec.dp; ++r, ++k) {
      const RankProgram& prog = sch.ranks[k];
      const std::string where = "schedule: section '" + spec.name + "' replica " + std::to_string(r);
      if (prog.section != s || prog.replica != r) {
        return Status::InvalidArgument(where + ": rank programs are not sorted by (section, replica)");
      }
      for (size_t b = 0; b < prog.micro_batches.size(); ++b) {
        const auto& ids = prog.micro_batches[b].sample_ids;
        if (ids.empty() || ids.size() > static_cast<size_t>(spec.micro_batch)) {
          return Status::InvalidArgument(where + ": micro-batch " + std::to_string(b) + " has " +
                                         std::to_string(ids.size()) + " samples (micro_batch is " +
                                         std::to_string(spec.micro_batch) + ")");
        }
        for (uint64_t id : ids) {
          auto it = std::lower_bound(by_id.begin(), by_id.end(), std::make_pair(id, -1));
          if (it == by_id.end() || it->first != id) {
            return Status::InvalidArgument(where + ": sample " + std::to_string(id) + " is not in the global batch");
          }
          const int i = it->second;
          if (!p.Activates(s, p.samples[static_cast<size_t>(i)])) {
            return Status::InvalidArgument(where + ": sample " + std::to_string(id) +
                                           " does not activate this section");
          }
          const size_t at = Idx(s, i, n);
          if (idx.rank[at] >= 0) {
            return Status::InvalidArgument(where + ": sample " + std::to_string(id) +
                                           " is scheduled twice in this section");
          }
          idx.rank[at] = static_cast<int32_t>(k);
          idx.micro_batch[at] = static_cast<int32_t>(b);
        }
      }
      // Ops: one F per micro-batch; one B after it when training; O last.
      std::vector<int> f(prog.micro_batches.size(), 0), bw(prog.micro_batches.size(), 0);
      int opt = 0;
      for (size_t o = 0; o < prog.ops.size(); ++o) {
        const Op& op = prog.ops[o];
        if (op.kind == OpKind::kOptimizer) {
          if (!spec.trains || o + 1 != prog.ops.size()) {
            return Status::InvalidArgument(where + ": an optimizer op must be the last op of a training section");
          }
          ++opt;
          continue;
        }
        if (op.micro_batch < 0 || static_cast<size_t>(op.micro_batch) >= prog.micro_batches.size()) {
          return Status::InvalidArgument(where + ": op names micro-batch " + std::to_string(op.micro_batch) + " of " +
                                         std::to_string(prog.micro_batches.size()));
        }
        const size_t b = static_cast<size_t>(op.micro_batch);
        if (op.kind == OpKind::kForward) {
          if (f[b]++ != 0)
            return Status::InvalidArgument(where + ": micro-batch " + std::to_string(b) + " has two forwards");
        } else {
          if (!spec.trains) return Status::InvalidArgument(where + ": a forward-only section has a backward op");
          if (f[b] == 0)
            return Status::InvalidArgument(where + ": backward of micro-batch " + std::to_string(b) +
                                           " before its forward");
          if (bw[b]++ != 0)
            return Status::InvalidArgument(where + ": micro-batch " + std::to_string(b) + " has two backwards");
        }
      }
      for (size_t b = 0; b < prog.micro_batches.size(); ++b) {
        if (f[b] != 1 || (spec.trains && bw[b] != 1)) {
          return Status::InvalidArgument(where + ": micro-batch " + std::to_string(b) +
                                         " is missing its forward or backward op");
        }
      }
      if (spec.trains && opt != 1)
        return Status::InvalidArgument(where + ": a training section needs one optimizer op");
    }
  }
  for (int s = 0; s < S; ++s) {
    for (int i = 0; i < n; ++i) {
      if (p.Activates(s, p.samples[static_cast<size_t>(i)]) && idx.rank[Idx(s, i, n)] < 0) {
        return Status::InvalidArgument("schedule: sample " + std::to_string(p.samples[static_cast<size_t>(i)].id) +
                                       " is never processed by section '" + p.sections[static_cast<size_t>(s)].name +
                                       "'");
      }
    }
  }
  // Fan-out maps.
  std::vector<int> base(static_cast<size_t>(S) + 1, 0);
  for (int s = 0; s < S; ++s)
    base[static_cast<size_t>(s) + 1] = base[static_cast<size_t>(s)] + p.sections[static_cast<size_t>(s)].dp;
  for (const EdgeSpec& e : p.edges) {
    const int a = p.sections[static_cast<size_t>(e.from)].dp;
    const int b = p.sections[static_cast<size_t>(e.to)].dp;
    for (int i = 0; i < n; ++i) {
      const int ru = idx.rank[Idx(e.from, i, n)];
      const int rd = idx.rank[Idx(e.to, i, n)];
      if (ru < 0 || rd < 0) continue;
      const int u = ru - base[static_cast<size_t>(e.from)];
      const int d = rd - base[static_cast<size_t>(e.to)];
      const bool ok = b >= a ? (d / (b / a) == u) : (u / (a / b) == d);
      if (!ok) {
        return Status::InvalidArgument("schedule: sample " + std::to_string(p.samples[static_cast<size_t>(i)].id) +
                                       " runs on replica " + std::to_string(u) + " of '" +
                                       p.sections[static_cast<size_t>(e.from)].name + "' and replica " +
                                       std::to_string(d) + " of '" + p.sections[static_cast<size_t>(e.to)].name +
                                       "', which the fan-out map does not link");
      }
    }
  }
  return idx;
}

StatusOr<std::vector<Transfer>> ImpliedTransfers(const Problem& p, const Schedule& sch) {
  auto index = IndexSchedule(p, sch);
  if (!index.ok()) return index.status();
  const ScheduleIndex& idx = *index;
  const int n = idx.num_samples;
  struct Key {
    int edge, ur, umb, dr, dmb;
    uint64_t id;
    bool operator<(const Key& o) const {
      return std::tie(edge, ur, umb, dr, dmb, id) < std::tie(o.edge, o.ur, o.umb, o.dr, o.dmb, o.id);
    }
  };
  std::vector<Key> keys;
  for (size_t e = 0; e < p.edges.size(); ++e) {
    const EdgeSpec& edge = p.edges[e];
    for (int i = 0; i < n; ++i) {
      const int ru = idx.RankOf(edge.from, i);
      const int rd = idx.RankOf(edge.to, i);
      if (ru < 0 || rd < 0) continue;
      keys.push_back({static_cast<int>(e), sch.ranks[static_cast<size_t>(ru)].replica, idx.MicroBatchOf(edge.from, i),
                      sch.ranks[static_cast<size_t>(rd)].replica, idx.MicroBatchOf(edge.to, i),
                      p.samples[static_cast<size_t>(i)].id});
    }
  }
  std::sort(keys.begin(), keys.end());
  std::vector<Transfer> out;
  for (const Key& k : keys) {
    if (out.empty() || out.back().edge != k.edge || out.back().up_replica != k.ur ||
        out.back().up_micro_batch != k.umb || out.back().down_replica != k.dr || out.back().down_micro_batch != k.dmb) {
      Transfer t;
      t.edge = k.edge;
      t.up_replica = k.ur;
      t.up_micro_batch = k.umb;
      t.down_replica = k.dr;
      t.down_micro_batch = k.dmb;
      const EdgeSpec& edge = p.edges[static_cast<size_t>(k.edge)];
      t.gradient = p.sections[static_cast<size_t>(edge.from)].trains && p.sections[static_cast<size_t>(edge.to)].trains;
      out.push_back(std::move(t));
    }
    out.back().sample_ids.push_back(k.id);
  }
  return out;
}

StatusOr<LowerBound> ComputeLowerBound(const Problem& p) {
  Prepared pr;
  Status st = Prepare(p, &pr);
  if (!st.ok()) return st;
  const int n = pr.n;
  LowerBound lb;
  lb.section_seconds.assign(static_cast<size_t>(pr.S), 0.0);
  std::vector<const Sample*> chunk;
  for (int s = 0; s < pr.S; ++s) {
    const SectionSpec& spec = p.sections[static_cast<size_t>(s)];
    double work = 0;
    chunk.clear();
    auto flush = [&] {
      if (chunk.empty()) return;
      work += p.costs->ForwardSeconds(s, chunk);
      if (spec.trains) work += p.costs->BackwardSeconds(s, chunk);
      chunk.clear();
    };
    for (int i = 0; i < n; ++i) {
      if (!Activ(pr, s, i)) continue;
      chunk.push_back(&p.samples[static_cast<size_t>(i)]);
      if (static_cast<int>(chunk.size()) == spec.micro_batch) flush();
    }
    flush();
    double v = work / spec.dp;
    if (spec.trains) v += p.costs->OptimizerSeconds(s);
    lb.section_seconds[static_cast<size_t>(s)] = v;
    if (lb.bottleneck_section < 0 || v > lb.section_seconds[static_cast<size_t>(lb.bottleneck_section)])
      lb.bottleneck_section = s;
  }
  // Longest chain of one sample: forward down the DAG, backward back up.
  for (double c : SampleChains(pr)) lb.critical_path_seconds = std::max(lb.critical_path_seconds, c);
  lb.seconds = lb.critical_path_seconds;
  for (double v : lb.section_seconds) lb.seconds = std::max(lb.seconds, v);
  return lb;
}

// ---- JSON ---------------------------------------------------------------------

std::string ScheduleToJson(const Schedule& sch) {
  nlohmann::json j;
  j["v"] = 1;
  j["policy"] = sch.policy;
  j["seed"] = sch.seed;
  j["step"] = sch.step;
  j["predicted"] = sch.predicted_step_seconds;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankProgram& r : sch.ranks) {
    nlohmann::json jr;
    jr["s"] = r.section;
    jr["r"] = r.replica;
    nlohmann::json mbs = nlohmann::json::array();
    for (const MicroBatch& mb : r.micro_batches) mbs.push_back(mb.sample_ids);
    jr["mb"] = std::move(mbs);
    std::string ops;
    for (const Op& op : r.ops) {
      if (!ops.empty()) ops += ' ';
      if (op.kind == OpKind::kOptimizer) {
        ops += 'O';
      } else {
        ops += op.kind == OpKind::kForward ? 'F' : 'B';
        ops += std::to_string(op.micro_batch);
      }
    }
    jr["ops"] = ops;
    ranks.push_back(std::move(jr));
  }
  j["ranks"] = std::move(ranks);
  return j.dump();
}

StatusOr<Schedule> ScheduleFromJson(const std::string& text, const std::string& origin) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument(origin + ": not valid JSON");
  try {
    const auto version = j.find("v");
    if (version == j.end() || *version != 1) {
      return Status::InvalidArgument(origin + ": schedule format version " +
                                     (version == j.end() ? std::string("(none)") : version->dump()) +
                                     " is not supported (expected 1)");
    }
    Schedule sch;
    sch.policy = j.at("policy").get<std::string>();
    sch.seed = j.at("seed").get<uint64_t>();
    sch.step = j.at("step").get<int64_t>();
    sch.predicted_step_seconds = j.value("predicted", 0.0);
    for (const auto& jr : j.at("ranks")) {
      RankProgram r;
      r.section = jr.at("s").get<int>();
      r.replica = jr.at("r").get<int>();
      for (const auto& mb : jr.at("mb")) r.micro_batches.push_back(MicroBatch{mb.get<std::vector<uint64_t>>()});
      const std::string ops = jr.at("ops").get<std::string>();
      size_t pos = 0;
      while (pos < ops.size()) {
        size_t end = ops.find(' ', pos);
        if (end == std::string::npos) end = ops.size();
        const std::string tok = ops.substr(pos, end - pos);
        pos = end + 1;
        if (tok.empty()) continue;
        Op op;
        if (tok == "O") {
          op.kind = OpKind::kOptimizer;
        } else if ((tok[0] == 'F' || tok[0] == 'B') && tok.size() > 1 &&
                   tok.find_first_not_of("0123456789", 1) == std::string::npos && tok.size() < 11) {
          op.kind = tok[0] == 'F' ? OpKind::kForward : OpKind::kBackward;
          op.micro_batch = static_cast<int32_t>(std::stol(tok.substr(1)));
        } else {
          return Status::InvalidArgument(origin + ": section " + std::to_string(r.section) + " replica " +
                                         std::to_string(r.replica) + ": bad op '" + tok +
                                         "' (expected F<n>, B<n> or O)");
        }
        r.ops.push_back(op);
      }
      sch.ranks.push_back(std::move(r));
    }
    return sch;
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(origin + ": malformed schedule: " + e.what());
  }
}

}  // namespace maestro::scheduler
