// SPDX-License-Identifier: Apache-2.0
// Media rows between an encoder section and a decoder: how a ViT (an audio
// encoder) hands on 0..K images (clips) per sample, and how a decoder splices
// them into its sequence at the placeholder positions of their kind.
//
// Owns: VitRows and AudioRows (a micro-batch's real images or clips encoded,
// padded to K items' rows per sample), SpliceRows (each sample's rows placed
// at its placeholder positions of the upstream section's kind; padding gets
// zero gradient), MropePositionIds (the 3-D positions of an M-RoPE decoder's
// tokens, images at their placeholders). docs/data.md, "### Training on a manifest" and "## Audio".
// May call: runtime/micro_batch, runtime/plan_data (placeholder ids and K),
// runtime/models (the encoders), plan (the plan graph's activation rule,
// plan/mrope),
// libtorch. Torch-internal: include only from runtime/*.cc and tests/runtime.
// Thread safety: pure functions.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "plan/plan.h"
#include "runtime/micro_batch.h"

namespace maestro::runtime {

class VitEncoderImpl;    // runtime/models/encoders.h
class AudioEncoderImpl;  // runtime/models/encoders.h

// A ViT section's micro-batch with 0..K images per sample (K =
// MaxImagesPerSample(plan)): only the real images are encoded, and sample
// b's rows are its images' rows in order, then zeros up to
// plan::VisionRowsPerSample rows. Fixed grid: data.images (sum of
// data.image_counts, C, H, W) -> (B, K * vit.output_tokens(),
// vit.output_dim()). Native resolution: data.images (N_patches, patch_dim)
// with data.image_grids, packed into one call of vit.ForwardPacked (no
// padding to a common size) -> (B, seq_len, vit.output_dim()). Padding rows
// are constants, so they carry no gradient into the ViT.
torch::Tensor VitRows(VitEncoderImpl& vit, const MicroBatchData& data, const plan::Plan& plan, torch::Device device);

// The rows sample b of `data` takes from a vision section whose tower is
// `vit`: its images' output rows (fixed: count * VitOutputTokens; native: the
// sum of its items' LLM tokens).
int64_t VisionRowsOfSample(const MicroBatchData& data, size_t b, const plan::ModelDesc& vit);

// The same for an audio encoder section: data.audios (sum of
// data.audio_counts, mel_bins, frames) -> (B, max_audios * ceil(frames / 2),
// hidden).
torch::Tensor AudioRows(AudioEncoderImpl& audio, const MicroBatchData& data, int64_t max_audios, torch::Device device);

// A decoder's input embeddings with an upstream section's rows spliced in.
// The upstream's activation names the kind: "audio" rows fill the positions
// holding plan.data.audio_token_id, one clip per data.audio_counts; any
// other the image placeholder's (ImageTokenIdOf), per data.image_counts, and
// under native resolution the video placeholder's too (each sample's first
// VisionRowsOfSample rows, its items in placeholder order).
// embeds: (B, T, C); ids: (B, T) int64; rows: (n, K * P, C) for the n
// samples of the micro-batch that activate `upstream` (in micro-batch order;
// plan::SectionActivates), P rows per item. Sample b's first count[b] * P
// rows fill, in order, its positions holding the placeholder, which must
// number exactly that many; its other rows (the padding) are not read and get
// zero gradient. Returns (B, T, C).
torch::Tensor SpliceRows(const torch::Tensor& embeds, const torch::Tensor& ids, const torch::Tensor& rows,
                         const MicroBatchData& data, const plan::Plan& plan, const plan::SectionPlan& upstream);

// An M-RoPE decoder's position ids (plan/mrope.h): (3, B, T) int64 from
// ids (B, T) and each sample's data.image_counts images, each of the LLM
// grid of the vision section that feeds `decoder` (plan::MropeVisionSection,
// plan::MropeImageGrid), placed at the image placeholders. Undefined when
// `decoder` has no M-RoPE or no vision section feeds it (every token text:
// positions 0..T-1, which ForwardEmbeds computes itself). A sample whose
// placeholders do not hold its images' grids is an error naming it.
torch::Tensor MropePositionIds(const torch::Tensor& ids, const MicroBatchData& data, const plan::Plan& plan,
                               const plan::SectionPlan& decoder);

}  // namespace maestro::runtime
