// SPDX-License-Identifier: Apache-2.0
// Native-resolution vision (the Qwen2-VL family): the one home of the rules
// the compiler and the runtime share when every image (and video) keeps its
// own size instead of being stretched to the ViT's image_size.
//
// Owns: the [data] image_resolution values; PatchGrid (one item's grid in
// patches); which ViTs take native images (TakesNativeImages); the plan's
// check (CheckNativeResolution); the rows an edge leaving a ViT carries per
// sample (VisionRowsPerSample); an item's LLM tokens and its attention
// sequences (HF's cu_seqlens: each temporal patch of an item is one
// sequence of h * w patches).
// The preprocessing itself (smart_resize, the patch order) is
// datasets/native_image.h; the tower's packed forward is
// runtime/models/encoders.h (VitEncoderImpl::ForwardPacked).
// docs/data.md, "### Native resolution (the Qwen2-VL family)".
// May call: base, plan (model_desc, mrope). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/model_desc.h"
#include "plan/mrope.h"
#include "plan/plan.h"

namespace maestro::plan {

// [data] image_resolution: "fixed" (every image resized to the ViT's
// image_size, the default) or "native" (each image at its smart_resize size).
inline constexpr const char* kImageResolutionFixed = "fixed";
inline constexpr const char* kImageResolutionNative = "native";

// One image's (or video's) grid in patches, before the tower's merge.
struct PatchGrid {
  int64_t t = 1, h = 0, w = 0;  // temporal patches, patch rows, patch columns
  bool video = false;           // a video: its own placeholder id
  double seconds_per_t = 0;     // a video's seconds per temporal patch; 0 for an image
  int64_t patches() const { return t * h * w; }
};

// True when plan.data.image_resolution is "native".
bool NativeResolution(const Plan& plan);

// True when the ViT of desc takes native-resolution images: the Qwen2-VL
// family's towers (2-D RoPE, a patch merger; any grid of merge-multiple
// sides).
bool TakesNativeImages(const ModelDesc& vit);

// OK when `data` asks for fixed images, or for native ones that `vit` takes
// with 1 <= image_min_pixels <= image_max_pixels and image_max_pixels at
// least one merge window ((patch * merge)^2 pixels); else InvalidArgument
// naming the key and the fix. `where` names the ViT (e.g. "section 'vit'").
Status CheckNativeResolution(const DataPlan& data, const ModelDesc& vit, const std::string& where);

// The rows a ViT section's output carries per sample (the edge's row shape):
// fixed images: K images' rows (K * VitOutputTokens(vit)); native: seq_len
// (a sample's visual placeholders all sit in its seq_len tokens, so its
// rows never exceed them; rows past a sample's own are zeros).
int64_t VisionRowsPerSample(const ModelDesc& vit, bool native, int64_t max_images, int64_t seq_len);

// The item's grid as the LLM sees it: (t, h / m, w / m), m = SpatialMerge(vit)
// (1 without a merger), its kind and time scale kept.
LlmGrid LlmGridOf(const PatchGrid& grid, const ModelDesc& vit);

// The attention sequences of an item in the tower, in patches: t sequences
// of h * w (transformers' cu_seqlens = repeat_interleave(h * w, t)).
std::vector<int64_t> AttentionSequences(const PatchGrid& grid);

}  // namespace maestro::plan
