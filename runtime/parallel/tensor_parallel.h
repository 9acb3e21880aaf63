// SPDX-License-Identifier: Apache-2.0
// Tensor parallelism (Megatron-style) inside a section: what a model calls
// and what the runtime supplies. The model shards its own weights (a decoder:
// ShardDecoderForTensorParallel in models/decoder.h; a ViT, audio encoder or
// projector: ShardEncoderForTensorParallel in models/encoders.h) and wraps each
// column-parallel -> row-parallel pair in two autograd functions:
//   EnterTensorParallel(x): identity forward, all-reduce of the gradient backward
//   LeaveTensorParallel(y): all-reduce forward (partial sums), identity backward
// over a TensorParallelReducer: the interface models see. GroupReducer is
// the runtime's implementation over the rank's TP group (a launcher Backend).
// runtime/parallel/ is where pipeline, context and expert parallelism arrive
// beside it, called by models through interfaces the same way.
// Runtime-internal (torch). May call: launcher, runtime/collectives, libtorch.
// Thread safety: one thread per process; the reducer must outlive the model.
#pragma once

#include <torch/torch.h>

#include "launcher/communicators.h"

namespace maestro::runtime {

class TensorParallelReducer {
 public:
  virtual ~TensorParallelReducer() = default;
  // In place, sum over the TP group. t: any shape, contiguous, CPU or CUDA.
  virtual void AllReduceSum(torch::Tensor& t) = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
};

torch::Tensor EnterTensorParallel(const torch::Tensor& x, TensorParallelReducer* tp);  // x: any -> same
torch::Tensor LeaveTensorParallel(const torch::Tensor& y, TensorParallelReducer* tp);  // y: any -> same

// How TP splits one parameter: along `dim` (-1: replicated) in `parts`
// equal blocks, each block cut in `size` equal contiguous slices; rank r
// keeps slice r of every block, concatenated. parts = 1 is the plain
// contiguous slice [r*n/size, (r+1)*n/size); a fused qkv (3C, C) is 3 parts
// (q, k, v rows), so rank r keeps its heads' q, k and v rows.
struct TensorParallelSplit {
  int dim = -1;
  int parts = 1;
  bool sharded() const { return dim >= 0; }
};
// full: the unsharded tensor -> rank `rank`'s shard (a view when parts = 1;
// a new tensor otherwise). REQUIRES: parts * size divides full.size(dim).
torch::Tensor TensorParallelShardOf(const torch::Tensor& full, TensorParallelSplit split, int rank, int size);
// Copies `shard` (rank `rank`'s, as TensorParallelShardOf cuts it) into its
// place in `whole` (the full shape); the rest of `whole` is left as it is.
void PlaceTensorParallelShard(torch::Tensor& whole, const torch::Tensor& shard, TensorParallelSplit split, int rank);

// The TP all-reduce of a sharded section over `group` (its TP group).
class GroupReducer : public TensorParallelReducer {
 public:
  explicit GroupReducer(launcher::Backend& group) : group_(group) {}
  // t: contiguous fp32, any shape; summed in place over the group. Throws
  // std::runtime_error when the collective fails (inside autograd).
  void AllReduceSum(torch::Tensor& t) override;
  int rank() const override { return group_.group().my_index; }
  int size() const override { return group_.group().size(); }

 private:
  launcher::Backend& group_;
};

}  // namespace maestro::runtime
