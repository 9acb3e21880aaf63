// SPDX-License-Identifier: Apache-2.0
// EP lockstep (runtime/parallel/expert_parallel.h, docs/moe.md): the ranks of
// an EP group exchange tokens in every MoE layer of every forward and
// backward, so they must run their micro-batches' passes together. Each
// rank's program (the scheduler's op list) differs; LockstepOps merges the
// group's programs into one sequence that every peer runs: its own ops in
// its own order, and empty passes (no tokens of its own, serving its peers'
// exchanges) where a peer runs one and it has none.
// Torch-free. May call: scheduler (Op), base. Thread safety: pure function.
#pragma once

#include <vector>

#include "base/status.h"
#include "scheduler/scheduler.h"

namespace maestro::runtime {

// One op of a rank in the sequence its EP group runs together: its own
// micro-batch, or an empty one (micro_batch -1) that serves the peers' rows.
// `slot` pairs a backward with its forward: the i-th forward of the sequence
// opens slot i on every rank, and a backward closes one slot on every rank
// at once.
struct LockstepOp {
  scheduler::OpKind kind = scheduler::OpKind::kForward;
  int micro_batch = -1;
  int slot = -1;
};

// programs[k]: EP rank k's ops in its order (optimizer ops are skipped).
// Merges them into one sequence every peer runs, each peer's own ops in
// its own order: a backward as soon as every rank that really ran its slot
// has it next (empty for the others), else a forward (empty where a rank has
// none next). Returns EP rank `me`'s part; an error when the programs cannot
// be merged (a backward before its forward).
StatusOr<std::vector<LockstepOp>> LockstepOps(const std::vector<std::vector<scheduler::Op>>& programs, int me);

}  // namespace maestro::runtime
