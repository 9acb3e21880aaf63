// SPDX-License-Identifier: Apache-2.0
// Which rank of a replica group writes each replicated piece of a checkpoint
// (runtime/checkpoint_slices.cc; the checkpoint bench's model in
// runtime/checkpoint_speed.cc follows the same rule).
//
// Why spread: every DP replica of a section holds the same weights (and,
// without ZeRO-1, the same AdamW moments), and every TP rank the same copy
// of what TP does not split (the embeddings, the head, the norms). When DP
// rank 0 wrote every replicated piece and TP rank 0 every unsplit one, a
// replica group's state went through a few ranks' disks and, for an
// asynchronous save, their snapshots, while their peers wrote little: with
// TP x PP = 8 and DP = 64, 8 ranks of 512 wrote the model, and TP rank 0 the
// whole of a 152K vocabulary's embedding and head besides its slices. Spread
// over the group, each rank writes close to an equal share, in parallel
// (Megatron-Core's fully parallel save does the same over DP).
//
// Owns: SpreadOverReplicaGroup. May call: nothing (a pure function).
#pragma once

#include <cstdint>
#include <vector>

namespace maestro::runtime {

// One replicated piece of a group of `dp` x `tp` ranks: its bytes on a rank
// that writes it, and whether every TP rank of its owner replica writes it
// (a TP slice: each its own) or one rank alone.
struct GroupPiece {
  int64_t bytes = 0;
  bool every_tp_rank = false;
};
// The rank that writes a piece: its DP replica, and its TP rank (-1: every
// TP rank of that replica, for a TP slice).
struct GroupOwner {
  int dp = 0;
  int tp = -1;
  // Whether the rank at DP replica `dp_rank`, TP rank `tp_rank` writes it.
  bool Writes(int dp_rank, int tp_rank) const { return dp_rank == dp && (tp < 0 || tp_rank == tp); }
};

// The owner of each of `pieces`, given in an order every rank of the group
// sees alike: the largest first, to the least-loaded place (a TP slice to
// the replica whose busiest TP rank is least loaded; a whole piece to the
// least-loaded rank; ties: the lower DP replica, then TP rank), so each rank
// writes close to an equal share. dp, tp <= 1 count as 1.
std::vector<GroupOwner> SpreadOverReplicaGroup(const std::vector<GroupPiece>& pieces, int dp, int tp);

}  // namespace maestro::runtime
