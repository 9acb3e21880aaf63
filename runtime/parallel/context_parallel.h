// SPDX-License-Identifier: Apache-2.0
// Context parallelism (CP) inside a section: the sequence of every sample is
// split over the section's CP group (plan::GroupKind::kCP); each rank holds a
// part of the tokens and all-gathers what attention needs (K and V).
//
// Owns:
//   GatherSequence    the all-gather along a sequence dimension, with the
//                     reduce-scatter of its gradient (autograd);
//   the load-balanced causal split (Megatron-LM's scheme): the sequence is
//   cut into 2*cp equal chunks and CP rank r holds chunks r and 2*cp-1-r, so
//   every rank does the same causal-attention work. ContextParallelPositions
//   says which global positions a rank holds; SplitSequenceForContextParallel
//   cuts a full tensor so; the gathered sequence (rank order) is at
//   GatheredContextParallelPositions.
// docs/context_parallel.md describes the decoder's use of it.
// Runtime-internal (torch). May call: launcher, runtime/collectives, libtorch.
// Thread safety: one thread per process; the Backend outlives the graph.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/comm.h"

namespace maestro::runtime {

// All-gather of `local` along `dim` over the CP group `cp` (a launcher Backend), rank order:
// local [..., n, ...] -> [..., n * cp.size, ...]. Autograd: backward reduce-scatters (sums) the
// incoming gradient over the group and returns this rank's slice. REQUIRES: every rank passes the same shape.
// fp32, bf16 or fp16 (on the wire in that dtype: bf16 K and V under autocast), CPU or
// CUDA; a one-rank group returns `local`. Throws std::runtime_error when the collective fails.
torch::Tensor GatherSequence(const torch::Tensor& local, int64_t dim, launcher::Backend& cp);

// GatherSequence, then reordered into position order: this rank's part
// [..., n, ...] along `dim` (as SplitSequenceForContextParallel cut it) ->
// the whole sequence [..., n * cp.size, ...]. Autograd as GatherSequence's (the
// reorder is an index_select). A decoder's hidden states leaving a CP section.
torch::Tensor GatherWholeSequence(const torch::Tensor& local, int64_t dim, launcher::Backend& cp);

// The global positions CP rank `cp_rank` of `cp_size` holds of a sequence of
// `seq_len` tokens: chunks r and 2*cp_size-1-r of 2*cp_size equal chunks, in
// that order. Returns int64 (seq_len / cp_size). REQUIRES: 2*cp_size divides
// seq_len (plan/runtime_support.h ContextParallelSplitError says why not). cp_size 1: 0..seq_len-1.
torch::Tensor ContextParallelPositions(int64_t seq_len, int cp_size, int cp_rank);

// The positions of GatherSequence's result over the CP ranks (rank 0's
// ContextParallelPositions, then rank 1's, ...): int64 (seq_len), a
// permutation of 0..seq_len-1.
torch::Tensor GatheredContextParallelPositions(int64_t seq_len, int cp_size);

// full: [..., seq_len, ...] along `dim` -> this rank's part [..., seq_len/cp_size, ...]
// (ContextParallelPositions' rows, in order). Differentiable (index_select).
torch::Tensor SplitSequenceForContextParallel(const torch::Tensor& full, int64_t dim, int cp_size, int cp_rank);

// The inverse over all ranks: `parts` (cp_size tensors, part r as
// SplitSequenceForContextParallel(full, dim, cp_size, r) cuts it) -> full.
torch::Tensor JoinContextParallelParts(const std::vector<torch::Tensor>& parts, int64_t dim);

}  // namespace maestro::runtime
