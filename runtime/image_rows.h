// SPDX-License-Identifier: Apache-2.0
// Image rows between a vision section and a decoder: how a ViT hands on 0..K
// images per sample, and how a decoder splices them into its sequence.
//
// Owns: VitRows (a micro-batch's real images encoded, padded to K images'
// rows per sample) and SpliceImageRows (each sample's rows placed at its
// image placeholder positions; padding gets zero gradient). docs/data.md,
// "### Training on a manifest".
// May call: runtime/micro_batch, runtime/models (the ViT), plan (the plan
// graph's activation rule), libtorch. Torch-internal: include only from
// runtime/*.cc and tests/runtime. Thread safety: pure functions.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "plan/plan.h"
#include "runtime/micro_batch.h"

namespace maestro::runtime {

class VitEncoderImpl;  // runtime/models/encoders.h

// A ViT section's micro-batch with 0..max_images images per sample:
// data.images (sum of data.image_counts, C, H, W) are encoded (only the real
// images), and sample b's rows are its images' rows in order, then zeros:
// returns (B, max_images * vit.output_tokens(), vit.output_dim()). Padding
// rows are constants, so they carry no gradient into the ViT.
torch::Tensor VitRows(VitEncoderImpl& vit, const MicroBatchData& data, int64_t max_images, torch::Device device);

// A decoder's input embeddings with an upstream section's image rows spliced
// in. embeds: (B, T, C); ids: (B, T) int64; rows: (n, max_images * P, C) for
// the n samples of the micro-batch that activate `upstream` (in micro-batch
// order; plan::SectionActivates with image_counts[b] > 0), P rows per image.
// Sample b's first image_counts[b] * P rows fill, in order, its positions
// holding image_token_id, which must number exactly that many; its other
// rows (the padding) are not read and get zero gradient. Returns (B, T, C).
torch::Tensor SpliceImageRows(const torch::Tensor& embeds, const torch::Tensor& ids, int64_t image_token_id,
                              const torch::Tensor& rows, const MicroBatchData& data, const plan::SectionPlan& upstream,
                              int64_t max_images);

}  // namespace maestro::runtime
