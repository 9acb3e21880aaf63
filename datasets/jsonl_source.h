// SPDX-License-Identifier: Apache-2.0
// A JSONL manifest of pretokenized multimodal samples (datasets/jsonl_manifest.h)
// as a SampleSource: the runtime, the reference and the SampleIndex read a
// user's samples and images through the data seam (datasets/sample_source.h)
// like any other data set. Rules: docs/data.md, "## JSONL manifests" and
// "### Training on a manifest".
//
// Owns: the mapping from JsonlSamples to SampleRecords (inputs, targets, the
// sample's 0..max_images_per_sample images decoded, resized and normalised
// with the vision tower's ImageSpec -- or, with manifest.native_resolution,
// its images and videos preprocessed at their own size in placeholder order
// (datasets/native_image.h); its 0..max_audios_per_sample audio clips
// decoded, resampled and featurised for the audio encoder); the check of every
// image and clip at Open (each is decoded once, so an unreadable file stops
// the run before anything is ingested, or is skipped); the per-sample "text",
// "image" and "audio" token counts the SampleIndex ingests; the count of
// skipped samples.
// May call: datasets/jsonl_manifest, datasets/image_decode, datasets/native_image,
// datasets/audio_features, datasets/sample_source, base. No libtorch.
// Thread safety: immutable after Open() (which decodes the images on a few
// threads of its own); every const method may be called from many threads at
// once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "datasets/audio_features.h"
#include "datasets/image_decode.h"
#include "datasets/jsonl_manifest.h"
#include "datasets/native_image.h"
#include "datasets/sample_source.h"

namespace maestro::datasets {

struct JsonlSourceOptions {
  // seq_len, vocab_size, image_token_id, tokens_per_image (= the vision
  // tower's output rows per image), pad_id, allow_absolute_paths,
  // on_bad_sample; the native-resolution options (native_resolution, native,
  // video_token_id: the Qwen2-VL family). check_images_exist is forced on.
  JsonlManifestOptions manifest;
  ImageSpec image;  // fixed grid: (channels, side, side), mean, std, fit; unused when native
  // max_images_per_sample counts visual items: with native_resolution a
  // video counts as one.
  DecodeOptions decode;               // alpha handling, max_pixels (channels come from `image`)
  int64_t max_images_per_sample = 1;  // K >= 1: a line with more images is a bad sample
  // What the audio encoder takes (mel_bins, frames), with
  // manifest.audio_token_id and tokens_per_audio (its output rows per clip).
  WhisperFeatureSpec audio;
  int64_t max_audios_per_sample = 1;  // >= 1: a line with more clips is a bad sample
  // Decode every image, video frame and audio clip once at Open (a bad one is a bad
  // sample: the error of Open, or skipped). Off only for tests of Load's own
  // checks.
  bool verify_images = true;
  // Threads that decode at Open (0: the machine's hardware threads, at most 16).
  int verify_threads = 0;
};

class JsonlSampleSource final : public SampleSource {
 public:
  // Opens and validates the manifest (JsonlManifest::Open), then, with
  // verify_images, decodes every image and audio clip of every accepted
  // line. A line with more than max_images_per_sample images (or
  // max_audios_per_sample clips), or a file that does not decode, is a bad
  // sample: under BadSamplePolicy::kError the first one is the
  // error (nothing is returned), under kSkip it is logged (file:line and why)
  // and left out. Sample ids are dense over the samples kept, in file order.
  // Every bad sample's message: "<manifest>:<line> (sample <n>[, id <id>]): <what>; <fix>".
  static StatusOr<std::unique_ptr<JsonlSampleSource>> Open(const std::string& path, const JsonlSourceOptions& options);

  // Train: the kept samples; test: none (a held-out manifest is a run of its own).
  int64_t NumSamples(Split split) const override;
  // input_ids / target_ids (seq_len), images (channels, side, side) and
  // audio clips' features (mel_bins, frames) in the order of their
  // placeholder runs. With native_resolution, images holds the sample's
  // images and videos merged in placeholder order, each a native SampleImage
  // (PreprocessNativeImage / PreprocessNativeVideo); a video frame that no
  // longer decodes is an error naming the video and the frame. An image that no longer decodes (changed
  // after Open) is an error naming the manifest, its line, the sample and the
  // image; a line edited in place is Corruption (JsonlManifest::Sample).
  StatusOr<SampleRecord> Load(Split split, int64_t id) const override;
  // Without pixels: each image's SampleImage from the manifest's layout
  // (fixed: the ImageSpec's shape, no file opened; native: its grid from the
  // image's header, as when the manifest opened), nothing decoded; without
  // audio features: each clip's shape, no file opened.
  StatusOr<SampleRecord> LoadParts(Split split, int64_t id, const MediaParts& parts) const override;
  // location "<abs manifest>:<line>"; tokens {"text": n} and, for a sample
  // with images, {"image": images * tokens_per_image} (native resolution:
  // every image's and video's own placeholder count); with audio clips,
  // {"audio": clips * tokens_per_audio}.
  SampleTokens TokensOf(int64_t id) const override;
  // Lines left out under kSkip (bad lines and lines with a bad image).
  int64_t SkippedSamples() const override { return static_cast<int64_t>(skipped_.size()); }

  // Images of train sample `id` (REQUIRES: 0 <= id < NumSamples(kTrain)).
  int64_t ImagesOf(int64_t id) const;
  int64_t AudiosOf(int64_t id) const;
  const std::vector<JsonlSkippedLine>& skipped() const { return skipped_; }
  const JsonlManifest& manifest() const { return manifest_; }
  const JsonlSourceOptions& options() const { return options_; }

 private:
  JsonlSampleSource(JsonlManifest manifest, JsonlSourceOptions options)
      : manifest_(std::move(manifest)), options_(std::move(options)) {}
  // The manifest's sample index of source id `id`.
  int64_t ManifestIndex(int64_t id) const { return subset_ ? kept_[static_cast<size_t>(id)] : id; }
  // "<manifest>:<line> (sample <id>[, id <user id>])".
  std::string Where(int64_t line, int64_t id, const std::string& user_id) const;
  // Load's native images and videos, in placeholder order.
  Status LoadNativeVisuals(const JsonlSample& sample, int64_t id, bool pixels, SampleRecord* record) const;
  // Load's error for file k of `key` ("images", "audios") of a sample that
  // no longer decodes (`why`).
  Status ChangedSinceOpen(const JsonlSample& sample, int64_t id, const char* key, size_t k, const Status& why) const;

  JsonlManifest manifest_;
  JsonlSourceOptions options_;
  std::vector<int64_t> kept_;  // subset_: source id -> manifest sample
  bool subset_ = false;        // false: every manifest sample is kept (ids are the identity)
  std::vector<JsonlSkippedLine> skipped_;
};

}  // namespace maestro::datasets
