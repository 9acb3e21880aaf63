// SPDX-License-Identifier: Apache-2.0
#include "runtime/replica_owners.h"

#include <algorithm>
#include <numeric>

namespace maestro::runtime {

std::vector<GroupOwner> SpreadOverReplicaGroup(const std::vector<GroupPiece>& pieces, int dp, int tp) {
  dp = std::max(1, dp);
  tp = std::max(1, tp);
  std::vector<GroupOwner> owners(pieces.size());
  std::vector<size_t> order(pieces.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pieces[a].bytes > pieces[b].bytes; });
  // load[d * tp + t]: the bytes DP replica d's TP rank t writes so far.
  std::vector<int64_t> load(static_cast<size_t>(dp) * static_cast<size_t>(tp), 0);
  const auto at = [&](int d, int t) -> int64_t& { return load[static_cast<size_t>(d * tp + t)]; };
  for (const size_t i : order) {
    const GroupPiece& piece = pieces[i];
    GroupOwner best;
    int64_t best_load = -1;
    for (int d = 0; d < dp; ++d) {
      if (piece.every_tp_rank) {
        int64_t busiest = 0;
        for (int t = 0; t < tp; ++t) busiest = std::max(busiest, at(d, t));
        if (best_load < 0 || busiest < best_load) {
          best = {d, -1};
          best_load = busiest;
        }
        continue;
      }
      for (int t = 0; t < tp; ++t) {
        if (best_load < 0 || at(d, t) < best_load) {
          best = {d, t};
          best_load = at(d, t);
        }
      }
    }
    owners[i] = best;
    for (int t = 0; t < tp; ++t) {
      if (best.tp < 0 || best.tp == t) at(best.dp, t) += piece.bytes;
    }
  }
  return owners;
}

}  // namespace maestro::runtime
