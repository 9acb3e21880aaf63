// SPDX-License-Identifier: Apache-2.0
// Internal to scheduler/: where each sample runs, one replica per section it
// activates, before any order is chosen. Every placement goes through a slot
// in [0, L) (scheduler/prepared.h), so every edge links the sample's replicas
// (plan::ReplicasLinked).
//
// Owns: Placement, the data-order placements of the static baselines
// (contiguous slices; round-robin dealing over the replicas of the widest
// section, by micro-batch as Megatron's sampler or by sample as PyTorch's
// DistributedSampler) and the balanced placement of the wavefront and
// balance-only policies (LPT over the vector of section loads).
// May call: base, scheduler/prepared.h.
// Called by: scheduler.cc (BuildSchedule) only.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "scheduler/prepared.h"

namespace maestro::scheduler::internal {

// replica[(s, i)] for every activated pair, -1 elsewhere (flattened by Idx).
using Placement = std::vector<int32_t>;

// One contiguous slice of the batch (in data order) per slot.
Placement PlaceContiguous(const Prepared& pr);

// Data order dealt round-robin, `block` samples at a time, over the replicas
// of the widest section; the other sections follow through the slots.
// block = the widest section's micro_batch: Megatron's sampler (FIFO);
// block = 1: PyTorch's DistributedSampler, sample i to replica i mod world
// (shuffle off; FIFO-strided).
Placement PlaceRoundRobin(const Prepared& pr, int64_t block);

// Longest sample first (by its share of each section's mean load) on the slot
// that minimises the largest normalised load over the sections it activates,
// then the smallest sum; ties between equal samples broken by `tie_seed`.
Placement PlaceBalanced(const Prepared& pr, uint64_t tie_seed);

}  // namespace maestro::scheduler::internal
