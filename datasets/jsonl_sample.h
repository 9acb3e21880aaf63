// SPDX-License-Identifier: Apache-2.0
// A JSONL manifest's options and samples as values (the manifest itself is
// datasets/jsonl_manifest.h, which includes this header): the limits on a
// line, what Open is told (JsonlManifestOptions), and what a sample is to the
// trainer (JsonlSample: inputs, targets, images, videos and their placeholder
// runs, token counts). The rules are in docs/data.md, "## JSONL manifests"
// and "### Native resolution (the Qwen2-VL family)".
//
// Owns: kJsonlIgnoreTarget, kJsonlMaxLineBytes, kJsonlMaxDepth,
// BadSamplePolicy, JsonlManifestOptions, PlaceholderRun (ImageTokenRun),
// JsonlVideo, JsonlTokenCounts, JsonlSample.
// May call: datasets/native_image.h (NativeVisionOptions, VisualGrid: values).
// Thread safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/native_image.h"

namespace maestro::datasets {

// The target of a position that carries no loss (PyTorch's ignore_index; the
// same value as kIgnoreTarget in demo_data.h and kIgnoreLabel in
// megatron_indexed.h).
inline constexpr int64_t kJsonlIgnoreTarget = -100;
// Lines longer than this are refused (a sample of 1 M tokens with labels fits
// in ~16 MiB of JSON); it bounds Open's memory on a file without newlines.
inline constexpr int64_t kJsonlMaxLineBytes = int64_t{64} << 20;
// JSON nested deeper than this is refused before parsing ("meta" may nest a
// little; a manifest line needs depth 2).
inline constexpr int kJsonlMaxDepth = 64;

enum class BadSamplePolicy {
  kError,  // the first bad line is the error of Open; nothing is returned
  kSkip,   // bad lines are logged (file:line and why), counted and left out
};

struct JsonlManifestOptions {
  int64_t seq_len = 0;           // > 0: inputs (and targets) per sample
  int64_t vocab_size = 0;        // > 0: every token id is in [0, vocab_size)
  int64_t image_token_id = -1;   // the placeholder id; -1 = the model takes no images
  int64_t tokens_per_image = 0;  // >= 1 when image_token_id >= 0 (0 with native_resolution): placeholders per image
  int64_t pad_id = 0;            // in [0, vocab_size): fills inputs past a short sample's end
  bool allow_absolute_paths = false;  // also allows relative paths that leave the manifest's folder
  bool check_images_exist = true;     // stat every image, frame and audio file at Open (a regular file)
  int64_t audio_token_id = -1;        // the audio placeholder id; -1 = the model takes no audio
  int64_t tokens_per_audio = 0;       // >= 1 when audio_token_id >= 0: placeholders per clip
  BadSamplePolicy on_bad_sample = BadSamplePolicy::kError;
  // Native resolution (the Qwen2-VL family): image k's placeholder run is
  // NativeImageGrid(its size).tokens(merge) long, its size read from the
  // file's header at Open (so every image is read whatever
  // check_images_exist says); tokens_per_image must stay 0. Lines may list
  // "videos" (with video_token_id >= 0).
  bool native_resolution = false;
  NativeVisionOptions native;   // patch, merge, temporal, pixel budget, mean, std
  int64_t video_token_id = -1;  // the video placeholder id (native_resolution only); -1 = no videos
};

// A run of placeholders in input_ids: image (or audio clip) k of the sample
// fills [start, start + length).
struct PlaceholderRun {
  int64_t start = 0;
  int64_t length = 0;  // = tokens_per_image (tokens_per_audio); native: the item's grid tokens
};
using ImageTokenRun = PlaceholderRun;

// A video of a sample (native_resolution): its frames, its frame rate and
// its grid (NativeVideoGrid of the frame count and the first frame's size).
struct JsonlVideo {
  std::vector<std::string> frame_paths;  // absolute, lexically normalised, in frame order
  double fps = 0;
  VisualGrid grid;
};

// Token counts of one sample, per modality, as the datalayer's SampleIndex
// takes them ("tokens": {"text": text, "image": image}).
struct JsonlTokenCounts {
  int64_t text = 0;  // input positions holding the sample's own tokens, placeholders excluded
  int64_t image =
      0;  // visual placeholder positions: images * tokens_per_image; native: images' and videos' grid tokens
  int64_t images = 0;        // visual items of the sample: images, plus videos (native_resolution)
  int64_t videos = 0;        // videos of the sample (native_resolution; also in `images`)
  int64_t video_frames = 0;  // frames of those videos, as listed (before padding to the temporal patch)
  int64_t audio = 0;         // audio placeholder positions (= audios * tokens_per_audio)
  int64_t audios = 0;        // audio clips of the sample
  int64_t loss = 0;          // targets that carry loss (not kJsonlIgnoreTarget)
};

// One sample as the trainer takes it.
struct JsonlSample {
  int64_t id = 0;                        // index among the accepted samples (0, 1, ... in file order)
  int64_t line = 0;                      // 1-based line of the manifest
  std::string user_id;                   // the line's "id" as written in JSON ("\"cat-1\"", "17"); "" when absent
  std::vector<int64_t> input_ids;        // (seq_len); pad_id past the sample's end
  std::vector<int64_t> target_ids;       // (seq_len); next token of each position or kJsonlIgnoreTarget
  std::vector<std::string> image_paths;  // absolute, lexically normalised; image k fills image_runs[k]
  std::vector<ImageTokenRun> image_runs;
  std::vector<VisualGrid> image_grids;  // native_resolution: image k's grid; else empty
  std::vector<JsonlVideo> videos;       // native_resolution: video v fills video_runs[v]
  std::vector<PlaceholderRun> video_runs;
  std::vector<std::string> audio_paths;  // absolute, lexically normalised; clip k fills audio_runs[k]
  std::vector<PlaceholderRun> audio_runs;
  int64_t real_tokens = 0;  // input positions that are not padding
  JsonlTokenCounts counts;
};

}  // namespace maestro::datasets
