// SPDX-License-Identifier: Apache-2.0
// The static policies' programs (see scheduler/static_schedule.h).
#include "scheduler/static_schedule.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace maestro::scheduler::internal {

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

}  // namespace maestro::scheduler::internal
