// SPDX-License-Identifier: Apache-2.0
// A micro-batch's payloads as tensors: what every section's forward reads.
//
// Owns: MicroBatchData (a micro-batch's samples stacked: token ids, targets,
// images, audio clips' features, caption answers), stacking it from a
// datasets::SampleSource, what each sample carries (MediaOf), and
// taking a subset of its samples (the samples that activate one component of
// a fused section).
// May call: datasets (SampleSource), plan (plan_graph.h: SampleMedia), base,
// libtorch. Torch-internal: include
// only from runtime/*.cc and tests/runtime. Thread safety: pure functions.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "datasets/sample_source.h"
#include "plan/native_vision.h"
#include "plan/plan_graph.h"

namespace maestro::runtime {

// The payloads of one micro-batch, stacked. B samples; a section reads the
// fields it needs.
struct MicroBatchData {
  std::vector<int64_t> sample_ids;  // (B)
  torch::Tensor input_ids;          // (B, T) int64 (decoder sections)
  torch::Tensor target_ids;         // (B, T) int64, -100 where no loss
  // Fixed grid: (N_img, channels, H, W) fp32, every sample's images in
  // sample order. Native resolution (image_grids not empty): (N_patches,
  // patch_dim) fp32, every image's (and video's) patches in HF's order
  // (datasets/sample_source.h SampleImage), the items in sample order.
  torch::Tensor images;
  std::vector<int64_t> image_counts;         // (B) images (and videos) of each sample
  std::vector<plan::PatchGrid> image_grids;  // native: (N_img) each item's grid; empty on a fixed grid
  torch::Tensor audios;                      // (N_aud, mel_bins, frames) fp32: every sample's clips, in sample order
  std::vector<int64_t> audio_counts;         // (B) audio clips of each sample
  std::vector<int64_t> answer_positions;     // (B), -1 when the sample has no caption answer
  std::vector<int> labels;                   // (B), -1 when none
};

// What sample b (an index into data.sample_ids) carries: its images and
// audio clips (plan::SectionActivates reads it).
plan::SampleMedia MediaOf(const MicroBatchData& data, size_t b);

// Loads the payloads of `sample_ids` (in that order) of `split` (train ids
// or test indices) from `samples` and stacks them. Every sample has the same
// token count, every image the same (channels, H, W) (or every image native,
// of one patch_dim), every audio clip the same (mel_bins, frames).
StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids,
                                        datasets::Split split);
StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids);
// ... with only `parts` of the media read (SampleSource::LoadParts): without
// pixels `images` stays undefined (image_counts and, native, image_grids are
// filled); without features `audios` stays undefined (audio_counts filled).
StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids,
                                        datasets::Split split, const datasets::MediaParts& parts);

// What section `section` (a fused one: any of its components) reads of a
// sample's media: pixels when it encodes images (a ViT), features when it
// encodes audio; an LLM splices the encoders' rows by the layout alone.
datasets::MediaParts MediaPartsOf(const plan::SectionPlan& section);

// The samples at `positions` (indices into data.sample_ids, increasing) of a
// micro-batch, as LoadMicroBatch would have stacked them: input_ids and
// target_ids (n, T), their images (sum of their counts, C, H, W; native:
// their patches and grids) and audio clips (sum of their counts, mel_bins,
// frames).
MicroBatchData SelectSamples(const MicroBatchData& data, const std::vector<int64_t>& positions);

}  // namespace maestro::runtime
