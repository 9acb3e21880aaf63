// SPDX-License-Identifier: Apache-2.0
// The Qwen vision towers' packed-input helpers (HF's grid_thw arithmetic).
#include "runtime/models/qwen_vision.h"

#include <algorithm>
#include <vector>

namespace maestro::runtime {

torch::Tensor FlattenImagePatches(const torch::Tensor& images, int64_t temporal, int64_t patch, int64_t merge) {
  const int64_t b = images.size(0), ch = images.size(1), s = images.size(2), g = s / patch;
  auto frames = images.unsqueeze(1).expand({b, temporal, ch, s, s});  // (B, T, C, S, S)
  auto x = frames.reshape({b, temporal, ch, g / merge, merge, patch, g / merge, merge, patch});
  x = x.permute({0, 3, 6, 4, 7, 2, 1, 5, 8});  // (B, g/m, g/m, m, m, C, T, P, P)
  return x.reshape({b * g * g, ch * temporal * patch * patch});
}

RopeTables VisionRope2d(const std::vector<PatchGrid>& grids, int64_t merge, int64_t head_dim, torch::Device device) {
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
  std::vector<torch::Tensor> rows, cols;
  for (const PatchGrid& g : grids) {
    // (h/m, m, w/m, m) coordinates, windows outermost: HF's permute(0, 2, 1, 3).
    auto shape = std::vector<int64_t>{g.h / merge, merge, g.w / merge, merge};
    auto row = torch::arange(g.h, i64).view({g.h / merge, merge, 1, 1}).expand(shape);
    auto col = torch::arange(g.w, i64).view({1, 1, g.w / merge, merge}).expand(shape);
    rows.push_back(row.permute({0, 2, 1, 3}).flatten().repeat({g.t}));
    cols.push_back(col.permute({0, 2, 1, 3}).flatten().repeat({g.t}));
  }
  const int64_t dim = head_dim / 2;  // each axis rotates a quarter of the head twice over
  auto inv_freq = 1.0 / torch::pow(10000.0, torch::arange(0, dim, 2, f32) / static_cast<double>(dim));  // (D/4)
  auto row = torch::cat(rows).to(torch::kFloat32), col = torch::cat(cols).to(torch::kFloat32);
  auto freqs = torch::cat({torch::outer(row, inv_freq), torch::outer(col, inv_freq)}, -1);  // (N, D/2)
  auto angles = torch::cat({freqs, freqs}, -1);                                             // (N, D)
  return {angles.cos(), angles.sin()};
}

std::vector<int64_t> TemporalSegments(const std::vector<PatchGrid>& grids) {
  std::vector<int64_t> lengths;
  for (const PatchGrid& g : grids) lengths.insert(lengths.end(), static_cast<size_t>(g.t), g.h * g.w);
  return lengths;
}

VisionWindows VisionWindowIndex(const std::vector<PatchGrid>& grids, int64_t merge, int64_t window) {
  std::vector<int64_t> groups;
  VisionWindows out;
  int64_t base = 0;  // the first group of the current temporal patch
  for (const PatchGrid& g : grids) {
    const int64_t gh = g.h / merge, gw = g.w / merge;
    for (int64_t t = 0; t < g.t; ++t, base += gh * gw) {
      for (int64_t wr = 0; wr < gh; wr += window) {
        for (int64_t wc = 0; wc < gw; wc += window) {
          const int64_t rows = std::min(window, gh - wr), cols = std::min(window, gw - wc);
          for (int64_t r = wr; r < wr + rows; ++r) {
            for (int64_t c = wc; c < wc + cols; ++c) groups.push_back(base + r * gw + c);
          }
          out.lengths.push_back(rows * cols * merge * merge);
        }
      }
    }
  }
  out.groups = torch::tensor(groups, torch::kInt64);
  return out;
}

}  // namespace maestro::runtime
