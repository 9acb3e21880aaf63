// SPDX-License-Identifier: Apache-2.0
// Context parallelism (CP) of encoder sections (ViT): a micro-batch's
// visual tokens (every image's patches, images in order) form one sequence
// that is cut into equal contiguous chunks over the section's CP group
// (plan::GroupKind::kCP), padded to a multiple of the CP size. Attention is
// block-diagonal (each image attends to itself only), so a rank computes
// q/k/v for its chunk, all-gathers k and v (GatherSequence,
// runtime/parallel/context_parallel.h) and attends each query to the keys of
// its own image. docs/context_parallel_vit.md says how the section runner
// and the executor use it.
//
// Owns: EncoderSequenceSplit (which global positions a rank holds, the
// segments (images) they belong to, the padding), its block-diagonal
// attention, and EncoderContextParallel (what an encoder block is handed).
// Runtime-internal (torch). May call: runtime/parallel/context_parallel,
// runtime/torch_compat, launcher, libtorch. Thread safety: one thread per
// process; the Backend outlives the graph.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "launcher/comm.h"

namespace maestro::runtime {

// The split of one sequence of segments (images) over `cp_size` ranks:
// total = sum of the segments' lengths, chunk = ceil(total / cp_size); rank
// r holds global positions [r * chunk, (r + 1) * chunk), those >= total are
// padding. Gathering the chunks in rank order gives positions 0 .. chunk *
// cp_size - 1 (padding last).
class EncoderSequenceSplit {
 public:
  // REQUIRES: every length >= 1, cp_rank in [0, cp_size), at least one segment.
  EncoderSequenceSplit(std::vector<int64_t> segment_lengths, int cp_rank, int cp_size);

  int64_t total() const { return total_; }
  int64_t chunk() const { return chunk_; }
  int cp_rank() const { return cp_rank_; }
  int cp_size() const { return cp_size_; }
  // This rank's padding rows (at the end of its chunk).
  int64_t padding() const { return padding_; }

  // full: (total, ...) -> this rank's rows (chunk, ...), zero rows where
  // padding. Differentiable (the gradient of the rows of other ranks is zero).
  torch::Tensor Local(const torch::Tensor& full) const;
  // gathered: (chunk * cp_size, ...) in rank order -> (total, ...), the
  // padding rows dropped.
  torch::Tensor DropPadding(const torch::Tensor& gathered) const;
  // Per local position, its index inside its segment (0 for padding):
  // int64 (chunk) on `device` (a row index into per-patch tables: RoPE,
  // positions).
  torch::Tensor LocalOffsetsInSegment(torch::Device device) const;

  // Block-diagonal attention of this rank's queries.
  // q: (1, H, chunk, D) this rank's queries; k, v: (1, H, chunk * cp_size, D)
  // the gathered keys and values (rank order). Each query attends to the
  // keys of its own segment (softmax(q k^T / sqrt(D)) v, no mask inside a
  // segment); padding queries get zero rows. Returns (1, H, chunk, D).
  torch::Tensor Attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) const;

 private:
  // A run of this rank's positions inside one segment.
  struct Piece {
    int64_t local_start = 0, length = 0;            // rows of q
    int64_t segment_start = 0, segment_length = 0;  // the segment's keys (global positions)
  };
  std::vector<int64_t> lengths_, starts_;
  std::vector<Piece> pieces_;
  int64_t total_ = 0, chunk_ = 0, padding_ = 0;  // padding_: local padding rows (at the end)
  int cp_rank_ = 0, cp_size_ = 1;
};

// What an encoder block is handed under CP: the group (k/v all-gathers; it
// outlives the model) and the micro-batch's split, shared with what
// activation recomputation keeps for the backward.
struct EncoderContextParallel {
  launcher::Backend* group = nullptr;
  std::shared_ptr<const EncoderSequenceSplit> split;
};

// What this process's CP forwards held, summed since it started: real
// tokens of its chunks, padding rows, and the micro-batches' whole token
// counts (the executor logs them at the end of a run).
struct ContextParallelTokenCounts {
  int64_t mine = 0, padding = 0, total = 0;
};
const ContextParallelTokenCounts& ContextParallelTokensOfThisProcess();
// Adds one forward's split to those counts.
void CountContextParallelForward(const EncoderSequenceSplit& split);

// k or v (1, H, chunk, D) -> (1, H, chunk * cp_size, D) over the CP group
// (GatherSequence along dim 2; backward reduce-scatters).
torch::Tensor GatherKeysOrValues(const torch::Tensor& local, const EncoderContextParallel& cp);

// Rows (chunk, C) -> (chunk * cp_size, C) over the CP group (GatherSequence
// along dim 0).
torch::Tensor GatherRows(const torch::Tensor& local, launcher::Backend& group);

}  // namespace maestro::runtime
