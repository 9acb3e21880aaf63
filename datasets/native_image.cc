// SPDX-License-Identifier: Apache-2.0
// Native-resolution images and videos for the Qwen2-VL family. Rules:
// native_image.h.
#include "datasets/native_image.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "base/checks.h"

namespace maestro::datasets {

namespace {

constexpr int kMaxPatchParam = 64;

ImageSpec ResizeSpec(const NativeVisionOptions& o, int64_t height, int64_t width) {
  ImageSpec spec;
  spec.channels = o.channels;
  spec.height = static_cast<int>(height);
  spec.width = static_cast<int>(width);
  spec.mean = o.mean;
  spec.std = o.std;
  spec.fit = ImageFit::kStretch;
  return spec;
}

// frames: grid_t * temporal normalised frames, each (C, H, W) contiguous.
// Writes HF's layout: rows (t, gh/m, gw/m, m, m), columns (C, temporal, p, p).
void LayOutPatches(const std::vector<const std::vector<float>*>& frames, const NativeVisionOptions& o,
                   SampleImage* out) {
  const size_t p = static_cast<size_t>(o.patch);
  const size_t m = static_cast<size_t>(o.merge);
  const size_t tp = static_cast<size_t>(o.temporal);
  const size_t c_n = static_cast<size_t>(o.channels);
  const size_t h = static_cast<size_t>(out->height);
  const size_t w = static_cast<size_t>(out->width);
  const size_t gh = static_cast<size_t>(out->grid_h);
  const size_t gw = static_cast<size_t>(out->grid_w);
  const size_t gt = static_cast<size_t>(out->grid_t);
  const size_t dim = static_cast<size_t>(out->patch_dim);
  out->pixels.assign(gt * gh * gw * dim, 0.0f);
  float* dst = out->pixels.data();
  for (size_t t = 0; t < gt; ++t) {
    for (size_t bh = 0; bh < gh / m; ++bh) {
      for (size_t bw = 0; bw < gw / m; ++bw) {
        for (size_t mh = 0; mh < m; ++mh) {
          for (size_t mw = 0; mw < m; ++mw) {
            const size_t y0 = (bh * m + mh) * p;
            const size_t x0 = (bw * m + mw) * p;
            for (size_t c = 0; c < c_n; ++c) {
              for (size_t k = 0; k < tp; ++k) {
                const float* frame = frames[t * tp + k]->data() + c * h * w;
                for (size_t dy = 0; dy < p; ++dy) {
                  const float* src = frame + (y0 + dy) * w + x0;
                  std::memcpy(dst, src, p * sizeof(float));
                  dst += p;
                }
              }
            }
          }
        }
      }
    }
  }
}

Status CheckFrame(const DecodedImage& image, const std::string& what) {
  if (image.height < 1 || image.width < 1 || (image.channels != 1 && image.channels != 3) ||
      image.pixels.size() !=
          static_cast<size_t>(image.height) * static_cast<size_t>(image.width) * static_cast<size_t>(image.channels)) {
    return Status::InvalidArgument(fmt::format("{}: the image is empty or its pixels do not match {}x{}x{}", what,
                                               image.height, image.width, image.channels));
  }
  return Status::Ok();
}

// Resizes `frames` to (h_bar, w_bar) and lays their patches out; grid_t =
// ceil(frames / temporal), the last frame repeated to fill the last temporal
// patch.
StatusOr<SampleImage> Preprocess(const std::vector<const DecodedImage*>& frames, const NativeVisionOptions& o) {
  MAESTRO_RETURN_IF_ERROR(ValidateNativeVisionOptions(o));
  for (size_t k = 0; k < frames.size(); ++k) {
    MAESTRO_RETURN_IF_ERROR(CheckFrame(*frames[k], fmt::format("native-resolution frame {}", k)));
  }
  const DecodedImage& first = *frames.front();
  MAESTRO_ASSIGN_OR_RETURN(const VisualGrid grid,
                           NativeVideoGrid(static_cast<int64_t>(frames.size()), first.height, first.width, o));
  SampleImage out = NativeLayout(grid, /*video=*/false, 0.0, o);
  const ImageSpec spec = ResizeSpec(o, out.height, out.width);
  std::vector<std::vector<float>> resized(frames.size());
  for (size_t k = 0; k < frames.size(); ++k) {
    StatusOr<std::vector<float>> chw = ResizeAndNormalize(*frames[k], spec);
    if (!chw.ok()) return chw.status().WithContext(fmt::format("native-resolution frame {}", k));
    resized[k] = std::move(*chw);
  }
  std::vector<const std::vector<float>*> padded;
  const size_t total = static_cast<size_t>(grid.t * o.temporal);
  for (size_t k = 0; k < total; ++k) padded.push_back(&resized[std::min(k, resized.size() - 1)]);
  LayOutPatches(padded, o, &out);
  return out;
}

}  // namespace

Status ValidateNativeVisionOptions(const NativeVisionOptions& o) {
  const auto bad = [](const std::string& what) {
    return Status::InvalidArgument("native vision options: " + what + " (see the model's preprocessor_config.json)");
  };
  for (const auto& [name, v] :
       {std::pair<const char*, int>{"patch", o.patch}, {"merge", o.merge}, {"temporal", o.temporal}}) {
    if (v < 1 || v > kMaxPatchParam) return bad(fmt::format("{} = {} must be in [1, {}]", name, v, kMaxPatchParam));
  }
  if (o.min_pixels < 1 || o.max_pixels < o.min_pixels || o.max_pixels > kDefaultMaxPixels) {
    return bad(fmt::format("min_pixels = {} and max_pixels = {} must satisfy 1 <= min_pixels <= max_pixels <= {}",
                           o.min_pixels, o.max_pixels, kDefaultMaxPixels));
  }
  Status spec = ValidateImageSpec(ResizeSpec(o, 1, 1));
  if (!spec.ok()) return bad(spec.message());
  return Status::Ok();
}

StatusOr<VisualGrid> NativeImageGrid(int64_t height, int64_t width, const NativeVisionOptions& options) {
  return NativeVideoGrid(1, height, width, options);
}

StatusOr<VisualGrid> NativeVideoGrid(int64_t frames, int64_t height, int64_t width,
                                     const NativeVisionOptions& options) {
  MAESTRO_RETURN_IF_ERROR(ValidateNativeVisionOptions(options));
  if (frames < 1) return Status::InvalidArgument(fmt::format("a video needs at least 1 frame, got {}", frames));
  MAESTRO_ASSIGN_OR_RETURN(const auto size,
                           SmartResize(height, width, options.factor(), options.min_pixels, options.max_pixels));
  VisualGrid grid;
  grid.t = (frames + options.temporal - 1) / options.temporal;
  grid.h = size.first / options.patch;
  grid.w = size.second / options.patch;
  return grid;
}

SampleImage NativeLayout(const VisualGrid& grid, bool video, double fps, const NativeVisionOptions& o) {
  SampleImage out;
  out.channels = o.channels;
  out.height = grid.h * o.patch;
  out.width = grid.w * o.patch;
  out.grid_t = grid.t;
  out.grid_h = grid.h;
  out.grid_w = grid.w;
  out.patch_dim = int64_t{o.channels} * o.temporal * o.patch * o.patch;
  out.video = video;
  out.seconds_per_grid_t = video && fps > 0 ? static_cast<double>(o.temporal) / fps : 0.0;
  return out;
}

StatusOr<SampleImage> PreprocessNativeImage(const DecodedImage& image, const NativeVisionOptions& options) {
  return Preprocess({&image}, options);
}

StatusOr<SampleImage> PreprocessNativeVideo(const std::vector<DecodedImage>& frames, double fps,
                                            const NativeVisionOptions& options) {
  if (frames.empty()) return Status::InvalidArgument("a video needs at least 1 frame, got none");
  if (!std::isfinite(fps) || !(fps > 0)) {
    return Status::InvalidArgument(fmt::format("a video's fps must be a finite number > 0, got {}", fps));
  }
  std::vector<const DecodedImage*> pointers;
  pointers.reserve(frames.size());
  for (const DecodedImage& f : frames) pointers.push_back(&f);
  MAESTRO_ASSIGN_OR_RETURN(SampleImage out, Preprocess(pointers, options));
  out.video = true;
  out.seconds_per_grid_t = static_cast<double>(options.temporal) / fps;
  return out;
}

}  // namespace maestro::datasets
