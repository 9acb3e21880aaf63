// SPDX-License-Identifier: Apache-2.0
// The box arithmetic between a rank's local tensors and the global tensors
// of a sharded checkpoint (datalayer/sharded_checkpoint.h Box): where a TP
// slice sits in its global tensor, and a tensor narrowed to a box. One home
// for the runtime's save and load (checkpoint_slices.cc) and the
// benchmark's model of a rank (checkpoint_speed.cc).
//
// Owns: LocalToGlobal, Narrow, WholeBox, ShapeOf. May call: datalayer
// (Box), libtorch. Thread safety: pure functions and values.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "datalayer/sharded_checkpoint.h"

namespace maestro::runtime {

// t.sizes() as a vector.
std::vector<int64_t> ShapeOf(const torch::Tensor& t);
// The box of a whole tensor of `shape`.
datalayer::Box WholeBox(const std::vector<int64_t>& shape);
// `t` (whose element 0 sits at `origin`, in the box's coordinates) narrowed
// to `box`: a view.
torch::Tensor Narrow(torch::Tensor t, const datalayer::Box& box, const std::vector<int64_t>& origin);

// Where a rank's local tensor of shape `local_shape` sits in its global
// tensor: TP (`tp_size` ranks, this one `tp_rank`) splits dimension
// `split_dim` (-1: not split) in `split_parts` blocks (a fused QKV or
// gate-up weight: one per projection), the rank holding slice `tp_rank` of
// each.
struct LocalToGlobal {
  std::vector<int64_t> global_shape;
  int dim = -1;
  int parts = 1;
  int rank = 0;
  int64_t slice = 0;  // the local length of one block along dim
  int64_t block = 0;  // the global length of one block along dim

  LocalToGlobal(std::vector<int64_t> local_shape, int split_dim, int split_parts, int tp_rank, int tp_size);
  // A box of the local tensor as boxes of the global one: (local part,
  // global box) pairs, one per block it meets.
  std::vector<std::pair<datalayer::Box, datalayer::Box>> Map(const datalayer::Box& local) const;
};

}  // namespace maestro::runtime
