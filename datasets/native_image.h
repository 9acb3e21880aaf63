// SPDX-License-Identifier: Apache-2.0
// Native-resolution images and video frames for the Qwen2-VL family's vision
// tower (Qwen2-VL, Qwen2.5-VL), torch-free: each image keeps (about) its own
// size instead of being stretched to one fixed grid, exactly as Hugging Face's
// Qwen2VLImageProcessor decides it. Rules and HF parity: docs/data.md,
// "### Native resolution (the Qwen2-VL family)".
//
// Owns: NativeVisionOptions (the processor's patch, merge, temporal patch,
// pixel budget, mean and std) and their validation (SmartResize, transformers'
// smart_resize to the bit, is plan/smart_resize.h's);
// VisualGrid (an image's or video's patch grid and its placeholder count);
// PreprocessNativeImage / PreprocessNativeVideo (decoded pixels -> a
// SampleImage of patches in HF's order: each merge window's patches together,
// each patch flattened as (channels, temporal_patch, patch, patch)).
// May call: base, plan/smart_resize.h, datasets/image_decode.h (ConvertChannels through
// ResizeAndNormalize; the resize filter and normalisation are that file's),
// datasets/sample_source.h (the SampleImage value).
// Thread safety: pure functions; any of them may run on many threads at once.
//
// What is HF's and what is ours
//   - SmartResize and the patch order equal transformers' smart_resize and
//     Qwen2VLImageProcessor._preprocess exactly (the tests compare with a
//     Python reference of both).
//   - The resize is ours: the antialiased triangle filter of image_decode.h
//     (= torch F.interpolate(mode="bilinear", antialias=True)); HF resizes
//     with PIL BICUBIC, which differs by a few grey levels at edges.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/status.h"
#include "datasets/image_decode.h"
#include "datasets/sample_source.h"
#include "plan/smart_resize.h"

namespace maestro::datasets {

// HF Qwen2VLImageProcessor's defaults (preprocessor_config.json of
// Qwen/Qwen2-VL-*-Instruct and Qwen2.5-VL): 14-pixel patches merged 2x2 into
// one LLM token, 2 frames per temporal patch, 56*56 .. 28*28*1280 pixels.
struct NativeVisionOptions {
  int patch = 14;                       // patch_size
  int merge = 2;                        // merge_size: merge x merge patches make one token
  int temporal = 2;                     // temporal_patch_size: frames per temporal patch
  int64_t min_pixels = 56 * 56;         // smart_resize's lower pixel budget
  int64_t max_pixels = 28 * 28 * 1280;  // ... and upper (1280 tokens at merge 2)
  int channels = 3;                     // 1 or 3
  std::array<float, 3> mean = kOpenAiClipMean;
  std::array<float, 3> std = kOpenAiClipStd;

  int64_t factor() const { return int64_t{patch} * merge; }  // sides are multiples of it
};

// OK, or InvalidArgument naming the field: patch, merge, temporal in
// [1, 64]; 1 <= min_pixels <= max_pixels <= kDefaultMaxPixels; channels 1 or
// 3; mean and std finite, std > 0.
Status ValidateNativeVisionOptions(const NativeVisionOptions& options);

// An image's or video's patch grid, in patch units before the merge.
struct VisualGrid {
  int64_t t = 1, h = 0, w = 0;  // temporal patches, patch rows, patch columns
  int64_t patches() const { return t * h * w; }
  int64_t tokens(int merge) const { return t * h * w / (int64_t{merge} * merge); }  // LLM placeholders
};

// SmartResize: plan/smart_resize.h (transformers' smart_resize, to the bit).
using plan::SmartResize;

// The grid of a still image of (height, width) pixels: t = 1, (h, w) =
// SmartResize / patch. Errors as SmartResize (and invalid options).
StatusOr<VisualGrid> NativeImageGrid(int64_t height, int64_t width, const NativeVisionOptions& options);
// The grid of `frames` frames of (height, width): t = ceil(frames /
// temporal). InvalidArgument also when frames < 1.
StatusOr<VisualGrid> NativeVideoGrid(int64_t frames, int64_t height, int64_t width, const NativeVisionOptions& options);

// What a SampleImage of `grid` says without its pixels (channels, the
// resized height and width, the grid, patch_dim; a video's flag and
// seconds_per_grid_t = temporal / fps): what PreprocessNativeImage /
// PreprocessNativeVideo set besides the pixels, for a reader that needs only
// the layout (an LLM section: SampleSource::LoadParts).
SampleImage NativeLayout(const VisualGrid& grid, bool video, double fps, const NativeVisionOptions& options);

// A still image -> its patches as HF's processor lays them out: channels
// converted, resized (stretch) to SmartResize's (h_bar, w_bar), normalised,
// the frame repeated `temporal` times, then
//   reshape(1, temporal, C, gh/m, m, p, gw/m, m, p)
//   .transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(gh*gw, C*temporal*p*p).
// Every SampleImage field is set (video = false, seconds_per_grid_t = 0).
StatusOr<SampleImage> PreprocessNativeImage(const DecodedImage& image, const NativeVisionOptions& options);

// Video frames -> one SampleImage: every frame resized to the SmartResize of
// the FIRST frame's size, the frame count padded to a multiple of temporal by
// repeating the last frame (as HF's processor does), the same patch layout
// over grid_t = ceil(frames / temporal); video = true, seconds_per_grid_t =
// temporal / fps. InvalidArgument for no frames, fps <= 0 or not finite, or a
// frame that is empty.
StatusOr<SampleImage> PreprocessNativeVideo(const std::vector<DecodedImage>& frames, double fps,
                                            const NativeVisionOptions& options);

}  // namespace maestro::datasets
