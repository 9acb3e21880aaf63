// SPDX-License-Identifier: Apache-2.0
// Pipeline parallelism inside one DP replica of a decoder section: the order
// in which each stage runs the replica's program (docs/pipeline.md).
//
// The scheduler gives one op list per DP replica (scheduler/scheduler.h:
// forwards, backwards, the optimizer). Every PP stage of the replica runs
// the same forwards in the program's forward order and the same backwards in
// its backward order; only how far forwards run ahead of backwards differs:
//   - the last stage runs the program as it is (it sends rows down and
//     receives gradients in the scheduler's order: the contract between
//     sections);
//   - stage s of P (0-based) runs, before its j-th backward, at least the
//     forwards the program runs before it, and with run-ahead (1F1B) up to
//     j + P - s of them (a warm-up of P - 1 - s forwards beyond the last
//     stage's, then one forward and one backward in steady state);
//   - a forward-only section has no backwards: its forwards stream through
//     the stages.
// A stage never runs fewer forwards before a backward than the stage after
// it, so a stage's backward always finds the next stage able to run it: no
// deadlock inside the pipeline. Run-ahead is off (every stage keeps the
// program's order) when an input edge comes from a training section: its
// next forward may wait for this section's input gradients, which the
// program's order, not a deeper warm-up, provides.
//
// Torch-free. May call: scheduler (Op), plan (the stage split). Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/plan.h"
#include "scheduler/scheduler.h"

namespace maestro::runtime {

// Layers [first, end) of a decoder of `layers` blocks held by stage `stage`
// of `stages`: an even split, the first `layers % stages` stages one layer
// more. The first stage also holds the embeddings, the last the final norm,
// the head and the loss. REQUIRES: 0 <= stage < stages <= layers.
using StageLayers = plan::StageLayerRange;
StageLayers LayersOfStage(int64_t layers, int stages, int stage);
// The plan's split (plan::StageLayerSpan): config.pp_layers when set, else
// the even split over config.pp stages.
StageLayers LayersOfStage(const plan::ParallelConfig& config, int64_t layers, int stage);

// The ops of `program` (a replica's op list) in the order stage `stage` of
// `stages` runs them (the rules above). `run_ahead`: 1F1B warm-up allowed.
std::vector<scheduler::Op> StageOrder(const std::vector<scheduler::Op>& program, int stage, int stages, bool run_ahead);

}  // namespace maestro::runtime
