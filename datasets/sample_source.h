// SPDX-License-Identifier: Apache-2.0
// The data seam: what the runtime (executor, section runner, reference,
// profiler) and ingestion read samples through, torch-free. A data set is one
// implementation of SampleSource (the built-in demo sets: DemoDataset in
// demo_data.h; Megatron .bin/.idx: megatron_source.h; JSONL + images:
// jsonl_source.h; new sets arrive as new classes beside them, not as branches).
//
// Owns: the sample record (token ids, targets, 0..N images of (channels, H,
// W), 0..N audio clips' features, the optional caption answer), the splits, the per-sample token counts
// per modality that the datalayer's SampleIndex ingests, and the one writer of
// the JSONL manifest built from them.
// May call: base.
// Thread safety: a SampleSource is immutable once opened; every const method
// may be called from many threads at once (implementations promise it).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace maestro::datasets {

enum class Split { kTrain, kTest };

// One image (or video) of a sample, already normalized the way the encoder
// expects. Two layouts:
//   fixed grid (grid_t == 0): fp32 pixels, row-major (channels, height, width);
//   native resolution (grid_t > 0; the Qwen2-VL family's processor,
//     datasets/native_image.h): pixels are (grid_t * grid_h * grid_w,
//     patch_dim) patches in the order Hugging Face's Qwen2VLImageProcessor
//     emits them (each merge window's patches together; each patch flattened
//     as (channels, temporal_patch, patch, patch)); height and width are the
//     resized size in pixels, grid_h = height / patch, grid_w = width / patch,
//     grid_t = frames / temporal_patch (1 for a still image).
struct SampleImage {
  int64_t channels = 0, height = 0, width = 0;
  std::vector<float> pixels;                   // (channels * height * width), or (patches, patch_dim) when native
  int64_t grid_t = 0, grid_h = 0, grid_w = 0;  // native: temporal patches, patch rows, patch columns
  int64_t patch_dim = 0;                       // native: channels * temporal_patch * patch * patch
  bool video = false;                          // native: a video's frames (its own placeholder id)
  double seconds_per_grid_t = 0;               // video: temporal_patch / fps (Qwen2.5-VL's M-RoPE time); 0 for images
  bool native() const { return grid_t > 0; }
};

// One audio clip of a sample: the encoder's input features, row-major
// (mel_bins, frames) (Whisper's log-mel: datasets/audio_features.h).
struct SampleAudio {
  int64_t mel_bins = 0, frames = 0;
  std::vector<float> features;  // (mel_bins * frames)
};

// A sample as the runtime turns it into tensors.
struct SampleRecord {
  int64_t id = 0;                   // train: the manifest id; test: the test index
  std::vector<int64_t> input_ids;   // (seq_len); image placeholders where image embeddings are spliced in
  std::vector<int64_t> target_ids;  // (seq_len); the loss target of each position, -100 where none
  std::vector<SampleImage> images;  // 0..N, in the order of their placeholders in input_ids
  std::vector<SampleAudio> audios;  // 0..N clips, in the order of their placeholders in input_ids
  // Optional, for caption evaluation (SampleSource::HasCaptionAnswers()):
  // the position t whose logits predict the answer token input_ids[t+1], and
  // the answer's class; -1 when the sample has none.
  int64_t answer_position = -1;
  int label = -1;
};

// What the SampleIndex knows of a train sample: where it lives (a free-form
// string of the data set) and its tokens per modality, in manifest order
// ("text" first).
struct SampleTokens {
  std::string location;
  std::vector<std::pair<std::string, int64_t>> tokens;
};

// What a reader of a sample needs of its media: a section that encodes
// images reads their pixels, one that encodes audio their features; the
// others (an LLM that splices their rows) need only each item's shape and,
// at native resolution, its grid.
struct MediaParts {
  bool pixels = true;
  bool audio_features = true;
  bool all() const { return pixels && audio_features; }
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;

  // Samples of `split`: train ids are [0, NumSamples(kTrain)), test indices
  // [0, NumSamples(kTest)).
  virtual int64_t NumSamples(Split split) const = 0;
  // The payload of sample `id` of `split`; an id out of range is
  // InvalidArgument. Deterministic: the same source gives the same record.
  virtual StatusOr<SampleRecord> Load(Split split, int64_t id) const = 0;
  // Sample `id` with only `parts` of its media read: images without pixels
  // keep every other field (native: the grid; SampleImage::pixels empty),
  // clips without features their shape (SampleAudio::features empty). What
  // a section that does not encode them reads, at the cost of the token ids
  // alone where the source knows the layouts (a JSONL manifest). The
  // default reads everything.
  virtual StatusOr<SampleRecord> LoadParts(Split split, int64_t id, const MediaParts& parts) const {
    (void)parts;
    return Load(split, id);
  }
  // The token counts of train sample `id` (REQUIRES: 0 <= id < NumSamples(kTrain)).
  virtual SampleTokens TokensOf(int64_t id) const = 0;
  // True when the test split's samples carry caption answers
  // (SampleRecord::answer_position, label): caption accuracy can be measured.
  virtual bool HasCaptionAnswers() const { return false; }
  // Checks a source may need before its samples enter a run's SampleIndex
  // (once, at ingestion): a corpus scans every token id against the
  // vocabulary. OK by default.
  virtual Status CheckBeforeIngest() const { return Status::Ok(); }
  // Samples the source left out when it opened (a manifest with
  // on_bad_sample = "skip": each one logged with its file:line and why);
  // metrics.jsonl reports the count as "skipped_samples". 0 by default.
  virtual int64_t SkippedSamples() const { return 0; }
};

// JSONL manifest of the TRAIN split of `source` for the datalayer's
// SampleIndex, one line per sample in id order:
//   {"id": 17, "location": "<location>", "tokens": {"text": n, "image": 16}}
// Written atomically (base/files.h). Returns the sample count.
StatusOr<int64_t> WriteManifest(const SampleSource& source, const std::string& path);

}  // namespace maestro::datasets
