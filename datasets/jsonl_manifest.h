// SPDX-License-Identifier: Apache-2.0
// A JSONL manifest of pretokenized multimodal samples, the format users bring
// when they have already run their Hugging Face processor (at a fixed image
// grid, or at native resolution for the Qwen2-VL family: each image and video
// its own run length): one JSON object per line,
//
//   {"input_ids": [151644, 872, 151652, 151655, 151655, 151653, 3838, ...],
//    "labels": [-100, -100, ..., 3838, ...],       // optional; or "loss_mask"
//    "images": ["photos/cat.jpg"],                 // optional, 0..N paths
//    "image_positions": [3],                       // optional cross-check
//    "id": "cat-0001", "meta": {...}}              // optional, not used
//
// with the image placeholder token (the spec's image_token_id, e.g. Qwen2-VL's
// <|image_pad|>) repeated tokens_per_image times in a row per image, image k
// filling the k-th run. The rules (what each key means, how targets are made,
// what is refused) are in docs/data.md, "## JSONL manifests", and at
// JsonlManifest::Open below.
//
// Owns: JsonlManifest (Open: read and validate every line; Sample: re-read
// one line and build its inputs and targets; TokenCounts /
// WriteIndexManifest: what the datalayer's SampleIndex ingests),
// JsonlSkippedLine, ParseJsonlLocation. The options and the sample as values
// (JsonlManifestOptions, JsonlSample, the limits) are in
// datasets/jsonl_sample.h, which this header includes; one line's checks are
// in datasets/jsonl_line.h (internal).
// May call: base (Status, files, log), nlohmann-json (in the .cc only), POSIX
// (open, pread, stat), std::filesystem (lexical path normalisation). No
// libtorch; images are not decoded here (datasets/image_decode.h does that
// from Sample()'s resolved paths); at native resolution their headers are
// read (ReadImageSize) and their grids computed (datasets/native_image.h).
// Thread safety: a JsonlManifest is immutable after Open; every const method
// may be called from many threads at once (Sample uses pread on a descriptor
// opened once). Copies share the descriptor and the per-sample table.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "datasets/jsonl_sample.h"

namespace maestro::datasets {

// A line Open left out under BadSamplePolicy::kSkip.
struct JsonlSkippedLine {
  int64_t line = 0;  // 1-based
  Status status;     // why; its message names the file and the line
};

class JsonlManifest {
 public:
  // Reads the whole manifest once and validates every line before returning;
  // keeps per accepted sample only its line's byte offset, length and hash,
  // its line number and its counts (56 bytes), not its tokens. Lines holding
  // only whitespace are ignored (a trailing newline, blank separators).
  //
  // Each line must be a JSON object whose keys are among "input_ids",
  // "labels", "loss_mask", "images", "image_positions", "videos",
  // "video_positions", "audios", "audio_positions", "id", "meta":
  //   - input_ids: a non-empty array of integers in [0, vocab_size), at most
  //     seq_len + 1 of them (seq_len inputs plus the next-token target of the
  //     last one). Shorter samples are padded with pad_id; padded positions
  //     and the last real one have target kJsonlIgnoreTarget. Never truncated.
  //   - labels (HF convention: aligned with input_ids, the model shifts):
  //     same length, each -100 or in [0, vocab_size). target[t] = labels[t+1].
  //   - loss_mask (HF assistant_masks convention: aligned with input_ids, 1 =
  //     this token is predicted): same length, each 0 or 1. target[t] =
  //     input_ids[t+1] where loss_mask[t+1] = 1. Not together with labels.
  //     Neither: every next token carries loss.
  //   - images: an array of strings, paths relative to the manifest's folder
  //     (absolute ones, or ones leaving the folder via "..", only with
  //     allow_absolute_paths); with check_images_exist each must be a file.
  //   - placeholders: image_token_id appears in input_ids exactly
  //     images.size() * tokens_per_image times, in runs whose lengths are
  //     multiples of tokens_per_image (back-to-back images make one long run);
  //     every run lies within the first seq_len positions (an image cut by the
  //     seq_len boundary is refused). Without an image token (-1) no line may
  //     list images.
  //   - image_positions: optional, one non-negative integer per image, the
  //     start of its run; each must equal the start found in input_ids.
  //   - native_resolution (the Qwen2-VL family): image k's run is
  //     NativeImageGrid(its size).tokens(merge) long, the size read from the
  //     file's header (ReadImageSize) whatever check_images_exist says;
  //     maximal runs are cut by those lengths in order; tokens_per_image
  //     must be 0. "videos": an array of {"frames": [paths], "fps": x} or
  //     {"folder": path, "fps": x} (the folder's *.jpg/*.jpeg/*.png sorted
  //     by name, at least one), each filling a run of video_token_id that is
  //     NativeVideoGrid(frames, first frame's size).tokens(merge) long;
  //     "video_positions" cross-checks like image_positions. Videos need
  //     native_resolution and video_token_id >= 0. Counts: image = every
  //     visual placeholder, images = images + videos.
  //   - id: a string or an integer, the user's name for the sample, echoed in
  //     errors and JsonlSample::user_id; it is not the sample id.
  //   - meta: anything; ignored.
  // Targets also follow the demo data set's rule (demo_data.cc FillTargets):
  // kJsonlIgnoreTarget at every placeholder position and at the position
  // before a placeholder, whatever labels / loss_mask say.
  //
  // Errors: NotFound (no manifest; with check_images_exist, a missing image),
  // IOError (unreadable), InvalidArgument (bad options; a bad line). A bad
  // line's message is "<manifest>:<line> (sample <n>[, id <id>]): <what>;
  // <fix>", where n is the id the line would have had. Nothing partial is
  // returned: under kError the first bad line fails Open; under kSkip only
  // the manifest itself (missing, unreadable, bad options) can fail Open.
  static StatusOr<JsonlManifest> Open(const std::string& path, const JsonlManifestOptions& options);

  const std::string& path() const;  // as given to Open
  const std::string& absolute_path() const;
  const JsonlManifestOptions& options() const;
  int64_t size() const;                                  // accepted samples
  int64_t lines() const;                                 // lines read (blank ones included)
  const std::vector<JsonlSkippedLine>& skipped() const;  // kSkip: the left-out lines, in order

  // REQUIRES for the accessors: 0 <= i < size() (std::out_of_range otherwise).
  int64_t LineOf(int64_t i) const;           // 1-based manifest line of sample i
  JsonlTokenCounts Counts(int64_t i) const;  // from Open, without reading the file
  // The sample whose manifest line is `line`, or -1 when that line is not a
  // sample (blank, skipped, past the end).
  int64_t SampleOfLine(int64_t line) const;

  // Re-reads sample i's line (pread) and builds it. InvalidArgument when i is
  // out of range; Corruption when the line's bytes changed since Open (an
  // in-place edit; a file replaced by rename is still read from the copy
  // Open opened); IOError when the read fails.
  StatusOr<JsonlSample> Sample(int64_t i) const;

  // Counts(i) of every sample, in id order.
  std::vector<JsonlTokenCounts> TokenCounts() const;
  // The manifest the datalayer's SampleIndex ingests (the format of
  // DemoDataset::WriteManifest and datalayer/manifest_line.h), one line per
  // sample in id order:
  //   {"id": 0, "location": "/abs/manifest.jsonl:3", "tokens": {"text": 412, "image": 576}}
  // ("image" only for samples with images). Written atomically. Returns the
  // number of lines.
  StatusOr<int64_t> WriteIndexManifest(const std::string& path) const;
  // The location WriteIndexManifest writes for sample i.
  std::string Location(int64_t i) const;

  struct Impl;

 private:
  explicit JsonlManifest(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// Splits "<manifest>:<line>" at its last ':' (paths may hold ':'). InvalidArgument
// when there is no ':' or the line is not a positive integer.
StatusOr<std::pair<std::string, int64_t>> ParseJsonlLocation(const std::string& location);

}  // namespace maestro::datasets
