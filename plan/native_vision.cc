// SPDX-License-Identifier: Apache-2.0
#include "plan/native_vision.h"

#include <fmt/format.h>

#include <algorithm>

namespace maestro::plan {

bool NativeResolution(const Plan& plan) {
  return plan.data.image_resolution == kImageResolutionNative;
}

bool TakesNativeImages(const ModelDesc& vit) {
  return vit.kind == ModelKind::kVit && IsQwenVisionLayout(VitLayout(vit)) && SpatialMerge(vit) > 0;
}

Status CheckNativeResolution(const DataPlan& data, const ModelDesc& vit, const std::string& where) {
  if (data.image_resolution == kImageResolutionFixed) return Status::Ok();
  if (data.image_resolution != kImageResolutionNative) {
    return Status::InvalidArgument(fmt::format("data.image_resolution = '{}' must be \"{}\" or \"{}\"",
                                               data.image_resolution, kImageResolutionFixed, kImageResolutionNative));
  }
  if (!TakesNativeImages(vit)) {
    return Status::InvalidArgument(fmt::format(
        "{}: data.image_resolution = \"native\" needs a Qwen2-VL-family vision tower (2-D RoPE and a patch merger: "
        "vit_layout {} or {}); this ViT (vit_layout {}) takes images of its image_size only: set image_resolution = "
        "\"fixed\"",
        where, kVitLayoutQwen2Vl, kVitLayoutQwen25Vl, VitLayout(vit)));
  }
  const int64_t factor = vit.patch_size * SpatialMerge(vit);
  if (data.image_min_pixels < 1 || data.image_min_pixels > data.image_max_pixels) {
    return Status::InvalidArgument(fmt::format("data.image_min_pixels = {} must be in [1, image_max_pixels = {}]",
                                               data.image_min_pixels, data.image_max_pixels));
  }
  if (data.image_max_pixels < factor * factor) {
    return Status::InvalidArgument(fmt::format(
        "data.image_max_pixels = {} is less than one merge window of {}: the tower's patch {} x merge {} = {} "
        "pixels a side; raise it to at least {}",
        data.image_max_pixels, where, vit.patch_size, SpatialMerge(vit), factor, factor * factor));
  }
  return Status::Ok();
}

int64_t VisionRowsPerSample(const ModelDesc& vit, bool native, int64_t max_images, int64_t seq_len) {
  if (native) return seq_len;
  return std::max<int64_t>(1, max_images) * VitOutputTokens(vit);
}

LlmGrid LlmGridOf(const PatchGrid& grid, const ModelDesc& vit) {
  const int64_t m = std::max<int64_t>(1, SpatialMerge(vit));
  LlmGrid g;
  g.t = grid.t;
  g.h = grid.h / m;
  g.w = grid.w / m;
  g.video = grid.video;
  g.seconds_per_t = grid.seconds_per_t;
  return g;
}

std::vector<int64_t> AttentionSequences(const PatchGrid& grid) {
  return std::vector<int64_t>(static_cast<size_t>(std::max<int64_t>(0, grid.t)), grid.h * grid.w);
}

}  // namespace maestro::plan
