// SPDX-License-Identifier: Apache-2.0
// A micro-batch's payloads as tensors: what every section's forward reads.
//
// Owns: MicroBatchData (a micro-batch's samples stacked: token ids, targets,
// images, caption answers), stacking it from a datasets::SampleSource, and
// taking a subset of its samples (the samples that activate one component of
// a fused section).
// May call: datasets (SampleSource), base, libtorch. Torch-internal: include
// only from runtime/*.cc and tests/runtime. Thread safety: pure functions.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "datasets/sample_source.h"

namespace maestro::runtime {

// The payloads of one micro-batch, stacked. B samples; a section reads the
// fields it needs.
struct MicroBatchData {
  std::vector<int64_t> sample_ids;        // (B)
  torch::Tensor input_ids;                // (B, T) int64 (decoder sections)
  torch::Tensor target_ids;               // (B, T) int64, -100 where no loss
  torch::Tensor images;                   // (N_img, channels, H, W) fp32: every sample's images, in sample order
  std::vector<int64_t> image_counts;      // (B) images of each sample
  std::vector<int64_t> answer_positions;  // (B), -1 when the sample has no caption answer
  std::vector<int> labels;                // (B), -1 when none
};

// Loads the payloads of `sample_ids` (in that order) of `split` (train ids
// or test indices) from `samples` and stacks them. Every sample has the same
// token count, every image the same (channels, H, W).
StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids,
                                        datasets::Split split);
StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids);

// The samples at `positions` (indices into data.sample_ids, increasing) of a
// micro-batch, as LoadMicroBatch would have stacked them: input_ids and
// target_ids (n, T), their images (sum of their counts, C, H, W).
MicroBatchData SelectSamples(const MicroBatchData& data, const std::vector<int64_t>& positions);

}  // namespace maestro::runtime
