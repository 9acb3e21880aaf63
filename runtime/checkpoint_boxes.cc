// SPDX-License-Identifier: Apache-2.0
#include "runtime/checkpoint_boxes.h"

#include <algorithm>

namespace maestro::runtime {

using datalayer::Box;

std::vector<int64_t> ShapeOf(const torch::Tensor& t) {
  return std::vector<int64_t>(t.sizes().begin(), t.sizes().end());
}

Box WholeBox(const std::vector<int64_t>& shape) {
  return Box{std::vector<int64_t>(shape.size(), 0), shape};
}

torch::Tensor Narrow(torch::Tensor t, const Box& box, const std::vector<int64_t>& origin) {
  for (size_t d = 0; d < box.offsets.size(); ++d) {
    t = t.narrow(static_cast<int64_t>(d), box.offsets[d] - origin[d], box.lengths[d]);
  }
  return t;
}

LocalToGlobal::LocalToGlobal(std::vector<int64_t> local_shape, int split_dim, int split_parts, int tp_rank, int tp_size)
    : global_shape(std::move(local_shape)) {
  if (split_dim < 0 || tp_size <= 1) return;
  dim = split_dim;
  parts = std::max(1, split_parts);
  rank = tp_rank;
  slice = global_shape[static_cast<size_t>(dim)] / parts;
  block = slice * tp_size;
  global_shape[static_cast<size_t>(dim)] = block * parts;
}

std::vector<std::pair<Box, Box>> LocalToGlobal::Map(const Box& local) const {
  if (dim < 0) return {{local, local}};
  std::vector<std::pair<Box, Box>> out;
  const auto d = static_cast<size_t>(dim);
  for (int p = 0; p < parts; ++p) {
    const int64_t lo = std::max(local.offsets[d], p * slice);
    const int64_t hi = std::min(local.offsets[d] + local.lengths[d], (p + 1) * slice);
    if (hi <= lo) continue;
    Box l = local, g = local;
    l.offsets[d] = lo;
    l.lengths[d] = hi - lo;
    g.offsets[d] = lo - p * slice + p * block + rank * slice;
    g.lengths[d] = hi - lo;
    out.emplace_back(std::move(l), std::move(g));
  }
  return out;
}

}  // namespace maestro::runtime
