// SPDX-License-Identifier: Apache-2.0
// The placements (see scheduler/placement.h).
#include "scheduler/placement.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "base/splitmix.h"

namespace maestro::scheduler::internal {
namespace {

// Sample i on `slot`: its replica in every section it activates.
void PlaceOnSlot(const Prepared& pr, int i, int64_t slot, Placement* place) {
  for (int s = 0; s < pr.S; ++s) {
    if (Activ(pr, s, i)) (*place)[Idx(s, i, pr.n)] = ReplicaOfSlot(pr, s, slot);
  }
}

// True when, on every edge, one DP degree divides the other: each replica of
// the narrower section is then a union of whole replicas of the wider one.
bool DpDegreesNest(const Prepared& pr) {
  for (const EdgeSpec& e : pr.p->edges) {
    const int a = pr.p->sections[static_cast<size_t>(e.from)].dp;
    const int b = pr.p->sections[static_cast<size_t>(e.to)].dp;
    if (a % b != 0 && b % a != 0) return false;
  }
  return true;
}

// Where DP degrees do not nest, a replica overlaps two or more replicas of
// another section, and the greedy's early choices for one section can leave
// a later sample no slot that is good for both: 512 equal samples over
// 43 -> 21 replicas gave a student replica 26 samples where 24 or 25 are
// possible. This moves samples off the most loaded replica (by normalised
// load) to a slot whose replicas all stay below that peak, one sample at a
// time, until no move lowers it. Each move lowers the peak or the number of
// replicas at it, so it ends; it is capped at 4 moves per sample anyway.
void RepairPeaks(const Prepared& pr, const std::vector<double>& inv_mean,
                 const std::vector<std::vector<int32_t>>& slot_replica, std::vector<int64_t>& slot_of,
                 std::vector<std::vector<double>>* load, Placement* place) {
  const Problem& p = *pr.p;
  const auto norm = [&](int s, int r) {
    return (*load)[static_cast<size_t>(s)][static_cast<size_t>(r)] * inv_mean[static_cast<size_t>(s)];
  };
  const auto replica_at = [&](int s, int64_t slot) {
    return slot_replica[static_cast<size_t>(s)][static_cast<size_t>(slot)];
  };
  std::vector<int> act;
  std::vector<double> cost;
  for (int64_t moves = 0; moves < 4 * static_cast<int64_t>(pr.n); ++moves) {
    int peak_s = -1, peak_r = -1;
    double peak = 0;
    for (int s = 0; s < pr.S; ++s) {
      for (int r = 0; r < p.sections[static_cast<size_t>(s)].dp; ++r) {
        if (norm(s, r) > peak) {
          peak = norm(s, r);
          peak_s = s;
          peak_r = r;
        }
      }
    }
    if (peak_s < 0) return;
    const double below = peak * (1 - 1e-12);
    bool moved = false;
    for (int i = 0; i < pr.n && !moved; ++i) {
      if ((*place)[Idx(peak_s, i, pr.n)] != peak_r) continue;
      act.clear();
      cost.clear();
      int64_t act_lcm = 1;
      for (int s = 0; s < pr.S; ++s) {
        if (!Activ(pr, s, i)) continue;
        act.push_back(s);
        cost.push_back(pr.fwd1[Idx(s, i, pr.n)] + pr.bwd1[Idx(s, i, pr.n)]);
        act_lcm = std::lcm(act_lcm, static_cast<int64_t>(p.sections[static_cast<size_t>(s)].dp));
      }
      const int64_t from = slot_of[static_cast<size_t>(i)];
      int64_t best = -1;
      double best_max = below;
      for (int64_t slot = 0; slot < pr.L; slot += pr.L / act_lcm) {
        if (replica_at(peak_s, slot) == peak_r) continue;
        double mx = 0;
        for (size_t k = 0; k < act.size(); ++k) {
          const int s = act[k];
          const int r = replica_at(s, slot);
          if (r == replica_at(s, from)) continue;
          mx = std::max(mx, norm(s, r) + cost[k] * inv_mean[static_cast<size_t>(s)]);
        }
        if (mx < best_max) {
          best_max = mx;
          best = slot;
        }
      }
      if (best < 0) continue;
      for (size_t k = 0; k < act.size(); ++k) {
        const int s = act[k];
        const int r_old = replica_at(s, from), r_new = replica_at(s, best);
        (*load)[static_cast<size_t>(s)][static_cast<size_t>(r_old)] -= cost[k];
        (*load)[static_cast<size_t>(s)][static_cast<size_t>(r_new)] += cost[k];
        (*place)[Idx(s, i, pr.n)] = r_new;
      }
      slot_of[static_cast<size_t>(i)] = best;
      moved = true;
    }
    if (!moved) return;
  }
}

}  // namespace

Placement PlaceContiguous(const Prepared& pr) {
  Placement place(static_cast<size_t>(pr.S) * static_cast<size_t>(pr.n), -1);
  for (int i = 0; i < pr.n; ++i) {
    const int64_t slot = static_cast<int64_t>(i) * pr.L / std::max(pr.n, 1);
    PlaceOnSlot(pr, i, slot, &place);
  }
  return place;
}

Placement PlaceRoundRobin(const Prepared& pr, int64_t block) {
  Placement place(static_cast<size_t>(pr.S) * static_cast<size_t>(pr.n), -1);
  for (int i = 0; i < pr.n; ++i) {
    const int64_t g = static_cast<int64_t>(i) / block;  // the index of i's block in data order
    const int64_t per = pr.L / pr.dp_max;
    const int64_t slot = (g % pr.dp_max) * per + (g / pr.dp_max) % per;
    PlaceOnSlot(pr, i, slot, &place);
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
  std::vector<int64_t> slot_of(static_cast<size_t>(pr.n), -1);
  const bool nested = DpDegreesNest(pr);
  std::vector<int> slot_count(nested ? 0 : static_cast<size_t>(pr.L), 0);
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
    int best_fill = std::numeric_limits<int>::max();
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
      const int fill = nested ? 0 : slot_count[static_cast<size_t>(slot)];
      if (mx < best_max || (mx == best_max && (fill < best_fill || (fill == best_fill && sum < best_sum)))) {
        best_max = mx;
        best_sum = sum;
        best_fill = fill;
        best_slot = slot;
      }
    }
    for (size_t k = 0; k < act.size(); ++k) {
      const int s = act[k];
      const int r = ReplicaOfSlot(pr, s, best_slot);
      place[Idx(s, i, pr.n)] = r;
      load[static_cast<size_t>(s)][static_cast<size_t>(r)] += cost[k];
    }
    slot_of[static_cast<size_t>(i)] = best_slot;
    if (!nested) ++slot_count[static_cast<size_t>(best_slot)];
  }
  if (!nested) RepairPeaks(pr, inv_mean, slot_replica, slot_of, &load, &place);
  return place;
}

}  // namespace maestro::scheduler::internal
