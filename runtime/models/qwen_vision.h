// SPDX-License-Identifier: Apache-2.0
// The Qwen vision towers' packed input (Qwen2-VL, Qwen2.5-VL): what HF's
// Qwen2VisionTransformerPretrainedModel and
// Qwen2_5_VisionTransformerPretrainedModel derive from grid_thw, as tensors
// and lengths VitEncoderImpl::ForwardPacked runs on.
//
// Owns: HF's patch order for fixed-size images (FlattenImagePatches), the
// 2-D rotary tables by grid (VisionRope2d, HF's rot_pos_emb), the attention
// segments (one per temporal patch: HF's cu_seqlens) and Qwen2.5-VL's window
// index (HF's get_window_index with cu_window_seqlens).
// Letters: C channels, T temporal patch, P patch side, m spatial merge.
// Owns PatchGrid too (runtime/models/encoders.h includes this header for
// VitEncoderImpl::ForwardPacked).
// Runtime-internal: includes torch. May call: libtorch,
// runtime/models/decoder.h (RopeTables). Thread-safety: pure functions.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "plan/native_vision.h"
#include "runtime/models/decoder.h"

namespace maestro::runtime {

// One image's (or video's) grid in patches: plan/native_vision.h's, which
// the runtime's micro-batches carry.
using PatchGrid = plan::PatchGrid;

// images (B, C, S, S), each a still image repeated over `temporal` frames
// (as Qwen2VLImageProcessor does) -> (B * g * g, C * T * P * P) patches in
// HF's order (g = S / P): per image, merge window by merge window (windows
// row-major, m x m patches row-major inside), each patch (C, T, P, P)
// flattened. REQUIRES: P divides S, m divides S / P.
torch::Tensor FlattenImagePatches(const torch::Tensor& images, int64_t temporal, int64_t patch, int64_t merge);

// HF's rot_pos_emb: per patch in HF's order (grid by grid, temporal patch by
// temporal patch, merge window by merge window), angles [row * inv_freq,
// col * inv_freq] twice over (rotate_half convention), inv_freq =
// 10000^(-2j / (D/2)), j < D/4. Returns fp32 (sum t*h*w, head_dim) tables.
// REQUIRES: head_dim % 4 == 0, m divides every h and w.
RopeTables VisionRope2d(const std::vector<PatchGrid>& grids, int64_t merge, int64_t head_dim, torch::Device device);

// HF's cu_seqlens as lengths: h * w for each temporal patch of each grid.
std::vector<int64_t> TemporalSegments(const std::vector<PatchGrid>& grids);

// Qwen2.5-VL's window attention (HF's get_window_index): `groups` lists the
// merge groups (index into the N / m^2 groups of HF's order) window by
// window: per grid and temporal patch, the (h/m) x (w/m) groups cut into
// windows of `window` x `window` groups (the last row and column of windows
// short where window does not divide them: HF pads with -100 and drops the
// padding), windows row-major, groups row-major inside; `lengths` the
// windows' sizes in patches (groups * m^2), empty windows left out (HF's
// unique_consecutive). REQUIRES: window >= 1.
struct VisionWindows {
  torch::Tensor groups;  // int64 (N / m^2)
  std::vector<int64_t> lengths;
};
VisionWindows VisionWindowIndex(const std::vector<PatchGrid>& grids, int64_t merge, int64_t window);

}  // namespace maestro::runtime
