// SPDX-License-Identifier: Apache-2.0
// Which data-parallel replica writes each replicated piece of a checkpoint
// (runtime/checkpoint_slices.cc; the checkpoint bench's model in
// runtime/checkpoint_speed.cc follows the same rule).
//
// Why spread: every DP replica of a section holds the same weights (and,
// without ZeRO-1, the same AdamW moments), and one of them writes each. When
// DP rank 0 wrote them all, a replica group's whole state went through one
// rank's disk and, for an asynchronous save, one rank's snapshot, while its
// DP peers wrote nothing: with TP x PP = 8 and DP = 64, 8 ranks of 512 wrote
// the model. Spread over the replicas, each writes about 1/DP of it, in
// parallel (Megatron-Core's fully parallel save does the same).
//
// Owns: SpreadOverReplicas. May call: nothing (a pure function).
#pragma once

#include <cstdint>
#include <vector>

namespace maestro::runtime {

// The replica (0 .. replicas - 1) that writes each of the pieces whose sizes
// `bytes` gives, in an order every replica sees alike: the largest first to
// the replica with the fewest bytes so far (ties: the earlier piece first,
// the lower replica), so each replica writes close to 1/replicas of the
// bytes. replicas <= 1: all 0.
std::vector<int> SpreadOverReplicas(const std::vector<int64_t>& bytes, int replicas);

}  // namespace maestro::runtime
