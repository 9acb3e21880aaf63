// SPDX-License-Identifier: Apache-2.0
// Internal to datasets/: one line of a JSONL manifest (jsonl_manifest.h),
// checked against the manifest's rules and turned into a sample. The rules
// are in docs/data.md ("## JSONL manifests").
//
// Owns: ParsedLine, LineContext, ParseJsonlLine (the checks of one line, in
// order, each message naming file:line, the sample and its id, and the fix),
// BuildSample (a checked line's inputs, targets and counts).
// May call: base (Status), datasets/jsonl_sample.h (the options and the
// sample), nlohmann-json (in the .cc only), POSIX stat (whether an image
// or audio file exists), std::filesystem (lexical path normalisation; a
// video's frame folder), datasets/image_decode.h (ReadImageSize: a native
// image's or first frame's size) and datasets/native_image.h (its grid).
// Called by: jsonl_manifest.cc (Open and Sample) only.
// Thread safety: pure functions (ParseJsonlLine stats image files when the
// context asks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"
#include "datasets/jsonl_sample.h"

namespace maestro::datasets::internal {

// A validated line.
struct ParsedLine {
  std::string user_id;
  std::vector<int64_t> tokens;
  std::vector<int64_t> labels;     // empty unless given
  std::vector<uint8_t> loss_mask;  // empty unless given
  bool has_labels = false;
  bool has_loss_mask = false;
  std::vector<std::string> image_paths;  // resolved
  std::vector<ImageTokenRun> runs;
  std::vector<VisualGrid> image_grids;  // native_resolution only
  std::vector<JsonlVideo> videos;       // native_resolution only
  std::vector<PlaceholderRun> video_runs;
  std::vector<std::string> audio_paths;  // resolved
  std::vector<PlaceholderRun> audio_runs;
};

// What the line parser needs to know about the manifest.
struct LineContext {
  const std::string* path = nullptr;           // as given to Open
  const std::filesystem::path* dir = nullptr;  // the manifest's folder, absolute
  const JsonlManifestOptions* options = nullptr;
  bool check_images_exist = false;
};

// Checks line `line` (sample `sample`) of the manifest, `size` bytes at
// `data`, in this order: a JSON object within kJsonlMaxLineBytes and
// kJsonlMaxDepth, its "id", no unknown key, "input_ids", "labels" or
// "loss_mask", "images" (resolved against the manifest's folder), the image
// placeholders and "image_positions" (native_resolution: each image's own
// run length, from its header), "videos" and "video_positions"
// (native_resolution), then the same for "audios" and "audio_positions".
// The first problem is the error.
StatusOr<ParsedLine> ParseJsonlLine(const LineContext& ctx, int64_t line, int64_t sample, const char* data,
                                    size_t size);

// The sample of a checked line: seq_len inputs (padded), their next-token
// targets (kJsonlIgnoreTarget at placeholders, labels of -100, a 0 in the
// loss mask and past the end), the counts, the images, the videos, the audio
// clips and their runs.
void BuildSample(const ParsedLine& p, const JsonlManifestOptions& o, JsonlSample* s);

}  // namespace maestro::datasets::internal
