// SPDX-License-Identifier: Apache-2.0
#include "datasets/jsonl_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <string_view>
#include <thread>

#include "base/checks.h"
#include "base/log.h"

namespace maestro::datasets {

namespace {

// The fix a user reads after an image that does not decode.
constexpr const char* kImageFix =
    "replace or re-encode the image (JPEG or PNG), fix the path, or set [data] on_bad_sample = \"skip\"";
// ... and after an audio clip that does not decode.
constexpr const char* kAudioFix =
    "replace or re-encode the clip (WAV or FLAC), fix the path, or set [data] on_bad_sample = \"skip\"";

// The first of a sample's files that does not decode.
struct MediaCheck {
  const char* key = "images";  // "images", "videos" or "audios"
  int64_t item = -1;           // the first file that failed; -1: none
  Status status;               // why (OK when every file decoded)
  int64_t frame = -1;          // videos: the frame that failed
};

// Decodes each image, video frame and audio clip of `sample` once; the first
// failure.
MediaCheck CheckSampleMedia(const JsonlSample& sample, const DecodeOptions& decode) {
  for (size_t k = 0; k < sample.image_paths.size(); ++k) {
    StatusOr<DecodedImage> image = DecodeImageFile(sample.image_paths[k], decode);
    if (!image.ok()) return {"images", static_cast<int64_t>(k), image.status()};
  }
  for (size_t v = 0; v < sample.videos.size(); ++v) {
    const std::vector<std::string>& frames = sample.videos[v].frame_paths;
    for (size_t f = 0; f < frames.size(); ++f) {
      StatusOr<DecodedImage> frame = DecodeImageFile(frames[f], decode);
      if (!frame.ok()) return {"videos", static_cast<int64_t>(v), frame.status(), static_cast<int64_t>(f)};
    }
  }
  for (size_t k = 0; k < sample.audio_paths.size(); ++k) {
    StatusOr<DecodedAudio> audio = DecodeAudioFile(sample.audio_paths[k]);
    if (!audio.ok()) return {"audios", static_cast<int64_t>(k), audio.status()};
  }
  return {};
}

}  // namespace

std::string JsonlSampleSource::Where(int64_t line, int64_t id, const std::string& user_id) const {
  return fmt::format("{}:{} (sample {}{})", manifest_.path(), line, id, user_id.empty() ? "" : ", id " + user_id);
}

Status JsonlSampleSource::ChangedSinceOpen(const JsonlSample& sample, int64_t id, const char* key, size_t k,
                                           const Status& why) const {
  return Status(why.code(), fmt::format("{}: {}[{}] no longer decodes (it changed after the run opened the manifest): "
                                        "{}; restore the file, or restart the run after fixing it",
                                        Where(sample.line, id, sample.user_id), key, k, why.message()));
}

StatusOr<std::unique_ptr<JsonlSampleSource>> JsonlSampleSource::Open(const std::string& path,
                                                                     const JsonlSourceOptions& options) {
  if (options.max_images_per_sample < 1) {
    return Status::InvalidArgument(fmt::format(
        "{}: max_images_per_sample = {} must be at least 1; set [data] max_images_per_sample to the most images one "
        "line lists",
        path, options.max_images_per_sample));
  }
  if (options.manifest.image_token_id >= 0 && !options.manifest.native_resolution) {
    Status spec = ValidateImageSpec(options.image);
    if (!spec.ok()) return spec.WithContext(path);
  }
  if (options.manifest.audio_token_id >= 0 &&
      (options.max_audios_per_sample < 1 || options.audio.mel_bins < 1 || options.audio.frames < 1)) {
    return Status::InvalidArgument(fmt::format(
        "{}: max_audios_per_sample = {}, mel_bins = {} and frames = {} must each be at least 1 when audio_token_id is "
        "set",
        path, options.max_audios_per_sample, options.audio.mel_bins, options.audio.frames));
  }
  JsonlManifestOptions manifest_options = options.manifest;
  manifest_options.check_images_exist = true;
  MAESTRO_ASSIGN_OR_RETURN(JsonlManifest manifest, JsonlManifest::Open(path, manifest_options));
  std::unique_ptr<JsonlSampleSource> source(new JsonlSampleSource(std::move(manifest), options));
  source->skipped_ = source->manifest_.skipped();
  const bool skip = options.manifest.on_bad_sample == BadSamplePolicy::kSkip;

  // Every image and clip of every line within the limits is decoded once, on up to
  // verify_threads threads (each sample's first failure is kept); then, in
  // file order, a bad line is the error (kError) or left out (kSkip), which
  // renumbers the samples after it.
  const JsonlManifest& m = source->manifest_;
  const int64_t n = m.size();
  const int64_t k_max = options.max_images_per_sample;
  const int64_t audio_max = options.max_audios_per_sample;
  std::vector<MediaCheck> checks(static_cast<size_t>(n));
  if (options.verify_images) {
    DecodeOptions decode = options.decode;
    decode.channels = 0;
    std::atomic<int64_t> next{0};
    const auto work = [&] {
      for (int64_t i = next++; i < n; i = next++) {
        const JsonlTokenCounts counts = m.Counts(i);
        if ((counts.images == 0 && counts.audios == 0) || counts.images > k_max || counts.audios > audio_max) continue;
        StatusOr<JsonlSample> sample = m.Sample(i);
        MediaCheck& check = checks[static_cast<size_t>(i)];
        if (!sample.ok()) {
          check.status = sample.status();
          continue;
        }
        check = CheckSampleMedia(*sample, decode);
      }
    };
    int threads = options.verify_threads;
    if (threads <= 0) threads = static_cast<int>(std::min(16u, std::max(1u, std::thread::hardware_concurrency())));
    threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(1, n)));
    std::vector<std::thread> helpers;
    for (int t = 1; t < threads; ++t) helpers.emplace_back(work);
    work();
    for (auto& h : helpers) h.join();
  }
  std::vector<int64_t> kept;
  kept.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = static_cast<int64_t>(kept.size());  // the id this sample gets when kept
    const JsonlTokenCounts counts = m.Counts(i);
    const MediaCheck& check = checks[static_cast<size_t>(i)];
    Status bad;
    if (counts.images > k_max) {
      MAESTRO_ASSIGN_OR_RETURN(const JsonlSample sample, m.Sample(i));
      bad = Status::InvalidArgument(
          fmt::format("{}: the line lists {} {}, more than max_images_per_sample = {}; raise [data] "
                      "max_images_per_sample, or split the sample",
                      source->Where(sample.line, id, sample.user_id), counts.images,
                      counts.videos > 0 ? "images and videos" : "images", k_max));
    } else if (counts.audios > audio_max) {
      MAESTRO_ASSIGN_OR_RETURN(const JsonlSample sample, m.Sample(i));
      bad = Status::InvalidArgument(
          fmt::format("{}: the line lists {} audio clips, more than max_audios_per_sample = {}; raise [data] "
                      "max_audios_per_sample, or split the sample",
                      source->Where(sample.line, id, sample.user_id), counts.audios, audio_max));
    } else if (check.item < 0 && !check.status.ok()) {
      return check.status;  // the manifest itself failed (Corruption, IOError)
    } else if (check.item >= 0) {
      MAESTRO_ASSIGN_OR_RETURN(const JsonlSample sample, m.Sample(i));
      const bool audio = std::string_view(check.key) == "audios";
      const std::string frame =
          check.frame < 0
              ? std::string()
              : fmt::format(
                    " frame {} ({})", check.frame,
                    sample.videos[static_cast<size_t>(check.item)].frame_paths[static_cast<size_t>(check.frame)]);
      bad = Status(check.status.code(),
                   fmt::format("{}: {}[{}]{}: {}; {}", source->Where(sample.line, id, sample.user_id), check.key,
                               check.item, frame, check.status.message(), audio ? kAudioFix : kImageFix));
    }
    if (bad.ok()) {
      kept.push_back(i);
      continue;
    }
    if (!skip) return bad;
    Log(LogLevel::kWarn, "skipping a bad manifest line: {}", bad.message());
    source->skipped_.push_back({m.LineOf(i), bad});
  }
  if (static_cast<int64_t>(kept.size()) != m.size()) {
    source->kept_ = std::move(kept);
    source->subset_ = true;  // possibly empty: every line was skipped
  }
  if (source->NumSamples(Split::kTrain) == 0) {
    return Status::InvalidArgument(
        fmt::format("{}: no sample to train on ({} lines read, {} skipped); fix the lines "
                    "the log names, or point [data] manifest at another file",
                    path, m.lines(), source->skipped_.size()));
  }
  return source;
}

int64_t JsonlSampleSource::NumSamples(Split split) const {
  if (split != Split::kTrain) return 0;
  return subset_ ? static_cast<int64_t>(kept_.size()) : manifest_.size();
}

int64_t JsonlSampleSource::ImagesOf(int64_t id) const {
  return manifest_.Counts(ManifestIndex(id)).images;
}

int64_t JsonlSampleSource::AudiosOf(int64_t id) const {
  return manifest_.Counts(ManifestIndex(id)).audios;
}

StatusOr<SampleRecord> JsonlSampleSource::Load(Split split, int64_t id) const {
  return LoadParts(split, id, MediaParts());
}

StatusOr<SampleRecord> JsonlSampleSource::LoadParts(Split split, int64_t id, const MediaParts& parts) const {
  if (split != Split::kTrain || id < 0 || id >= NumSamples(Split::kTrain)) {
    return Status::InvalidArgument(
        fmt::format("manifest '{}': no {} sample {} (it has {} train samples, no test split)", manifest_.path(),
                    split == Split::kTrain ? "train" : "test", id, NumSamples(Split::kTrain)));
  }
  MAESTRO_ASSIGN_OR_RETURN(JsonlSample sample, manifest_.Sample(ManifestIndex(id)));
  SampleRecord record;
  record.id = id;
  record.input_ids = std::move(sample.input_ids);
  record.target_ids = std::move(sample.target_ids);
  if (options_.manifest.native_resolution) {
    MAESTRO_RETURN_IF_ERROR(LoadNativeVisuals(sample, id, parts.pixels, &record));
  }
  record.images.reserve(sample.image_paths.size());
  for (size_t k = 0; k < sample.image_paths.size() && !options_.manifest.native_resolution; ++k) {
    SampleImage image;
    image.channels = options_.image.channels;
    image.height = options_.image.height;
    image.width = options_.image.width;
    if (parts.pixels) {
      StatusOr<std::vector<float>> pixels = LoadImageForModel(sample.image_paths[k], options_.image, options_.decode);
      if (!pixels.ok()) return ChangedSinceOpen(sample, id, "images", k, pixels.status());
      image.pixels = std::move(*pixels);
    }
    record.images.push_back(std::move(image));
  }
  record.audios.reserve(sample.audio_paths.size());
  for (size_t k = 0; k < sample.audio_paths.size(); ++k) {
    SampleAudio audio;
    audio.mel_bins = options_.audio.mel_bins;
    audio.frames = options_.audio.frames;
    if (parts.audio_features) {
      StatusOr<std::vector<float>> features = LoadAudioForWhisper(sample.audio_paths[k], options_.audio);
      if (!features.ok()) return ChangedSinceOpen(sample, id, "audios", k, features.status());
      audio.features = std::move(*features);
    }
    record.audios.push_back(std::move(audio));
  }
  return record;
}

Status JsonlSampleSource::LoadNativeVisuals(const JsonlSample& sample, int64_t id, bool pixels,
                                            SampleRecord* record) const {
  // Images and videos in the order of their placeholder runs (run starts
  // differ: the runs never overlap).
  struct Item {
    int64_t start;
    bool video;
    size_t k;
  };
  std::vector<Item> items;
  for (size_t k = 0; k < sample.image_runs.size(); ++k) items.push_back({sample.image_runs[k].start, false, k});
  for (size_t v = 0; v < sample.video_runs.size(); ++v) items.push_back({sample.video_runs[v].start, true, v});
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.start < b.start; });
  DecodeOptions decode = options_.decode;
  decode.channels = 0;  // PreprocessNativeImage converts
  const NativeVisionOptions& native = options_.manifest.native;
  record->images.reserve(items.size());
  for (const Item& item : items) {
    if (!pixels) {  // the layout the manifest read at open: no file opened
      record->images.push_back(item.video
                                   ? NativeLayout(sample.videos[item.k].grid, true, sample.videos[item.k].fps, native)
                                   : NativeLayout(sample.image_grids[item.k], false, 0.0, native));
      continue;
    }
    if (!item.video) {
      StatusOr<DecodedImage> image = DecodeImageFile(sample.image_paths[item.k], decode);
      StatusOr<SampleImage> pre = image.ok() ? PreprocessNativeImage(*image, native) : image.status();
      if (!pre.ok()) return ChangedSinceOpen(sample, id, "images", item.k, pre.status());
      record->images.push_back(*std::move(pre));
      continue;
    }
    const JsonlVideo& video = sample.videos[item.k];
    std::vector<DecodedImage> frames;
    frames.reserve(video.frame_paths.size());
    for (size_t f = 0; f < video.frame_paths.size(); ++f) {
      StatusOr<DecodedImage> frame = DecodeImageFile(video.frame_paths[f], decode);
      if (!frame.ok()) {
        return ChangedSinceOpen(sample, id, "videos", item.k,
                                Status(frame.status().code(), fmt::format("frame {} ({}): {}", f, video.frame_paths[f],
                                                                          frame.status().message())));
      }
      frames.push_back(*std::move(frame));
    }
    StatusOr<SampleImage> pre = PreprocessNativeVideo(frames, video.fps, native);
    if (!pre.ok()) return ChangedSinceOpen(sample, id, "videos", item.k, pre.status());
    record->images.push_back(*std::move(pre));
  }
  return Status::Ok();
}

SampleTokens JsonlSampleSource::TokensOf(int64_t id) const {
  const int64_t i = ManifestIndex(id);
  const JsonlTokenCounts c = manifest_.Counts(i);
  SampleTokens t;
  t.location = manifest_.Location(i);
  t.tokens = {{"text", c.text}};
  if (c.images > 0) t.tokens.emplace_back("image", c.image);
  if (c.audios > 0) t.tokens.emplace_back("audio", c.audio);
  return t;
}

}  // namespace maestro::datasets
