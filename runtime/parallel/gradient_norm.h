// SPDX-License-Identifier: Apache-2.0
// The one rule for a section's global gradient norm (what clipping divides
// by): the square root of the sum of the squares of every gradient element
// of the section, each parameter counted once over all the ranks that hold a
// part of it. The replicated AdamW (ModelRunner::OptimizerStep) and ZeRO-1
// (DistributedOptimizer) hold different parts of the gradient and both call
// it with their own squares and groups:
//   - a ZeRO-1 rank holds a shard of the flat gradient: its squares are
//     summed over the DP (x CP) group first (routed experts over the
//     expert-DP group);
//   - a routed expert's parameters differ between the ranks of an EP group:
//     summed over it;
//   - a TP-sharded parameter's slices are summed over the TP group, a
//     replicated one (identical on every TP rank) counted once;
//   - every stage holds other layers: the total is summed over the PP group
//     (a tied embedding held by the first and last stages is left out on the
//     last one by the caller).
// Sums are fp64 here; a group's sum may travel in another precision (the
// caller's SumOverGroup decides).
// Torch-free. May call: base. Thread safety: pure functions.
#pragma once

#include <functional>
#include <vector>

#include "base/status.h"

namespace maestro::runtime {

// Sums of squares of this rank's gradient elements.
struct GradientSquares {
  double tp_sharded = 0.0;  // of its TP slices: summed over the TP group
  double replicated = 0.0;  // of parameters whole on every TP rank: counted once
  // Adds one parameter's squares.
  void Add(double squares, bool sharded_over_tp) { (sharded_over_tp ? tp_sharded : replicated) += squares; }
};

// Sums `values` in place over one group of ranks (every rank of the group
// calls it with as many values). An empty function: no such group.
using SumOverGroup = std::function<Status(std::vector<double>& values)>;

struct GradientNormGroups {
  SumOverGroup shards;           // ZeRO-1: the group the dense parameters are sharded over
  SumOverGroup expert_shards;    // ZeRO-1: the group the routed experts are sharded over (expert-DP)
  SumOverGroup experts;          // EP: the ranks holding other routed experts
  SumOverGroup tensor_parallel;  // TP
  SumOverGroup stages;           // PP
};

// The global norm (collective over every group given). `dense`: this rank's
// squares of parameters other than routed experts; `routed`: of its routed
// experts (zero without EP).
StatusOr<double> GlobalGradientNorm(GradientSquares dense, GradientSquares routed, const GradientNormGroups& groups);

// The factor gradients are scaled by for a norm `norm` and a clip `clip`
// (optimizer.grad_clip, 0 = none): clip / (norm + 1e-6) when clip > 0 and
// norm > clip (torch's clip_grad_norm_), else exactly 1.
double ClipScale(double norm, double clip);

}  // namespace maestro::runtime
