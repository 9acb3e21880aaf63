// SPDX-License-Identifier: Apache-2.0
#include "runtime/parallel/expert_lockstep.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "base/checks.h"

namespace maestro::runtime {

StatusOr<std::vector<LockstepOp>> LockstepOps(const std::vector<std::vector<scheduler::Op>>& programs, int me) {
  const size_t g = programs.size();
  std::vector<size_t> next(g, 0);
  std::vector<std::map<int, int>> slot_of(g);  // rank -> micro-batch -> slot
  std::vector<std::set<int>> real(g);          // rank -> the slots it ran a micro-batch of its own in
  const auto peek = [&](size_t r) -> const scheduler::Op* {
    while (next[r] < programs[r].size() && programs[r][next[r]].kind == scheduler::OpKind::kOptimizer) ++next[r];
    return next[r] < programs[r].size() ? &programs[r][next[r]] : nullptr;
  };
  const auto closes = [&](size_t r) {  // the slot rank r's next op closes, or -1
    const scheduler::Op* op = peek(r);
    if (op == nullptr || op->kind != scheduler::OpKind::kBackward) return -1;
    const auto it = slot_of[r].find(op->micro_batch);
    return it == slot_of[r].end() ? -2 : it->second;
  };
  std::vector<LockstepOp> mine;
  int slots = 0;
  while (true) {
    bool left = false, forward = false;
    std::set<int> candidates;
    for (size_t r = 0; r < g; ++r) {
      const scheduler::Op* op = peek(r);
      left |= op != nullptr;
      forward |= op != nullptr && op->kind == scheduler::OpKind::kForward;
      const int s = closes(r);
      if (s == -2) return Status::Internal(fmt::format("EP lockstep: EP rank {} has a backward before its forward", r));
      if (s >= 0) candidates.insert(s);
    }
    if (!left) break;
    int chosen = -1;
    for (int s : candidates) {
      bool ok = true;
      for (size_t r = 0; r < g && ok; ++r) ok = real[r].count(s) == 0 || closes(r) == s;
      if (ok) {
        chosen = s;
        break;
      }
    }
    if (chosen >= 0) {
      for (size_t r = 0; r < g; ++r) {
        LockstepOp op{scheduler::OpKind::kBackward, -1, chosen};
        if (real[r].count(chosen) > 0) op.micro_batch = programs[r][next[r]++].micro_batch;
        if (r == static_cast<size_t>(me)) mine.push_back(op);
      }
      continue;
    }
    if (!forward) return Status::Internal("EP lockstep: the EP group's programs cannot be merged");
    const int slot = slots++;
    for (size_t r = 0; r < g; ++r) {
      LockstepOp op{scheduler::OpKind::kForward, -1, slot};
      const scheduler::Op* own = peek(r);
      if (own != nullptr && own->kind == scheduler::OpKind::kForward) {
        op.micro_batch = own->micro_batch;
        slot_of[r][own->micro_batch] = slot;
        real[r].insert(slot);
        ++next[r];
      }
      if (r == static_cast<size_t>(me)) mine.push_back(op);
    }
  }
  return mine;
}

}  // namespace maestro::runtime
