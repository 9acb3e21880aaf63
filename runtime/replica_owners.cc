// SPDX-License-Identifier: Apache-2.0
#include "runtime/replica_owners.h"

#include <algorithm>
#include <numeric>

namespace maestro::runtime {

std::vector<int> SpreadOverReplicas(const std::vector<int64_t>& bytes, int replicas) {
  std::vector<int> owner(bytes.size(), 0);
  if (replicas <= 1) return owner;
  std::vector<size_t> order(bytes.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  std::vector<int64_t> load(static_cast<size_t>(replicas), 0);
  for (const size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of equals: the lower replica
    owner[i] = static_cast<int>(least - load.begin());
    *least += bytes[i];
  }
  return owner;
}

}  // namespace maestro::runtime
