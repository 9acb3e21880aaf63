// SPDX-License-Identifier: Apache-2.0
#include "scheduler/schedule.h"

#include <algorithm>
#include <utility>

namespace maestro::scheduler {

int Schedule::RankIndex(int section, int replica) const {
  auto it = std::lower_bound(
      ranks.begin(), ranks.end(), std::make_pair(section, replica),
      [](const RankProgram& r, const std::pair<int, int>& key) { return std::make_pair(r.section, r.replica) < key; });
  if (it == ranks.end() || it->section != section || it->replica != replica) return -1;
  return static_cast<int>(it - ranks.begin());
}

}  // namespace maestro::scheduler
