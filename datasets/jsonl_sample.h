// SPDX-License-Identifier: Apache-2.0
// A JSONL manifest's options and samples as values (the manifest itself is
// datasets/jsonl_manifest.h, which includes this header): the limits on a
// line, what Open is told (JsonlManifestOptions), and what a sample is to the
// trainer (JsonlSample: inputs, targets, images and their placeholder runs,
// token counts). The rules are in docs/data.md, "## JSONL manifests".
//
// Owns: kJsonlIgnoreTarget, kJsonlMaxLineBytes, kJsonlMaxDepth,
// BadSamplePolicy, JsonlManifestOptions, PlaceholderRun (ImageTokenRun),
// JsonlTokenCounts, JsonlSample.
// May call: nothing of maestro (the standard library only).
// Thread safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  int64_t seq_len = 0;                // > 0: inputs (and targets) per sample
  int64_t vocab_size = 0;             // > 0: every token id is in [0, vocab_size)
  int64_t image_token_id = -1;        // the placeholder id; -1 = the model takes no images
  int64_t tokens_per_image = 0;       // >= 1 when image_token_id >= 0: placeholders per image
  int64_t pad_id = 0;                 // in [0, vocab_size): fills inputs past a short sample's end
  bool allow_absolute_paths = false;  // also allows relative paths that leave the manifest's folder
  bool check_images_exist = true;     // stat every image and audio file at Open (a regular file)
  int64_t audio_token_id = -1;        // the audio placeholder id; -1 = the model takes no audio
  int64_t tokens_per_audio = 0;       // >= 1 when audio_token_id >= 0: placeholders per clip
  BadSamplePolicy on_bad_sample = BadSamplePolicy::kError;
};

// A run of placeholders in input_ids: image (or audio clip) k of the sample
// fills [start, start + length).
struct PlaceholderRun {
  int64_t start = 0;
  int64_t length = 0;  // = tokens_per_image (tokens_per_audio)
};
using ImageTokenRun = PlaceholderRun;

// Token counts of one sample, per modality, as the datalayer's SampleIndex
// takes them ("tokens": {"text": text, "image": image}).
struct JsonlTokenCounts {
  int64_t text = 0;    // input positions holding the sample's own tokens, placeholders excluded
  int64_t image = 0;   // placeholder positions (= images * tokens_per_image)
  int64_t images = 0;  // images of the sample
  int64_t audio = 0;   // audio placeholder positions (= audios * tokens_per_audio)
  int64_t audios = 0;  // audio clips of the sample
  int64_t loss = 0;    // targets that carry loss (not kJsonlIgnoreTarget)
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
  std::vector<std::string> audio_paths;  // absolute, lexically normalised; clip k fills audio_runs[k]
  std::vector<PlaceholderRun> audio_runs;
  int64_t real_tokens = 0;  // input positions that are not padding
  JsonlTokenCounts counts;
};

}  // namespace maestro::datasets
