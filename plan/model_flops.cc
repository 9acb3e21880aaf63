// SPDX-License-Identifier: Apache-2.0
#include "plan/model_flops.h"

#include <algorithm>

#include "plan/model_desc.h"

namespace maestro::plan {

namespace {

double Extra(const ModelDesc& d, const char* key, double fallback) {
  auto it = d.extra.find(key);
  return it == d.extra.end() ? fallback : it->second;
}

// A decoder: q/k/v/o, the MLP of each layer (dense, or MoE: router, routed
// experts, shared expert with its gate) and the LM head.
int64_t DecoderMatmulParams(const ModelDesc& d) {
  const int64_t h = d.hidden;
  const int64_t hd = HeadDim(d);
  const int64_t q = d.heads * hd, kv = KvHeads(d) * hd;
  const int64_t attn_w = h * q + 2 * h * kv + q * h;
  const int64_t mlp_matrices = Extra(d, "mlp_gated", 1) != 0 ? 3 : 2;
  int64_t moe_mlp = 0;
  if (d.experts > 0) {
    moe_mlp = h * d.experts + d.experts_per_token * mlp_matrices * h * MoeFfnHidden(d);
    const auto shared_ffn = static_cast<int64_t>(Extra(d, "shared_expert_ffn_hidden", 0));
    if (shared_ffn > 0) moe_mlp += mlp_matrices * h * shared_ffn + h;  // + its (1, C) sigmoid gate
  }
  const int64_t moe_layers = MoeLayerCount(d);
  const int64_t dense_layers = d.layers - moe_layers;
  const int64_t dense_mlp = dense_layers > 0 ? mlp_matrices * h * d.ffn_hidden : 0;
  return d.layers * attn_w + moe_layers * moe_mlp + dense_layers * dense_mlp + d.vocab * h;
}

// A ViT: the blocks, the patch stem and the patch merger's share per patch.
int64_t VitMatmulParams(const ModelDesc& d) {
  const int64_t h = d.hidden;
  const auto temporal = static_cast<int64_t>(Extra(d, "temporal_patch", 1));
  const int64_t patch_w = d.channels * temporal * d.patch_size * d.patch_size * h;
  int64_t merger_per_token = 0;
  const auto merge = static_cast<int64_t>(Extra(d, "spatial_merge", 0));
  if (merge > 0) {
    const int64_t in = h * merge * merge;
    const auto merger_hidden = static_cast<int64_t>(Extra(d, "merger_hidden", 0));
    const int64_t mh = merger_hidden > 0 ? merger_hidden : in;
    merger_per_token = (in * mh + mh * d.out_dim) / (merge * merge);
  }
  const int64_t mlp_matrices = VitLayout(d) == kVitLayoutQwen25Vl ? 3 : 2;  // Qwen2.5-VL: SwiGLU
  return d.layers * (4 * h * h + mlp_matrices * h * d.ffn_hidden) + patch_w + merger_per_token;
}

// The keys one ViT query attends, summed over the blocks: its segment's s
// on a full-attention block; on Qwen2.5-VL's window blocks its window's
// (window_size / patch_size)^2 patches, at most s.
double VitLayerKeys(const ModelDesc& d, double s) {
  const int64_t window = VitMergerWindow(d);
  if (window == 0) return static_cast<double>(d.layers) * s;
  const double side = static_cast<double>(window * SpatialMerge(d));
  double keys = 0;
  for (int64_t i = 0; i < d.layers; ++i) keys += IsFullAttentionVitBlock(d, i) ? s : std::min(s, side * side);
  return keys;
}

// A Whisper-style audio encoder: the blocks and the two convolutions
// (kernel 3; conv1 runs at twice the output rate).
int64_t AudioEncoderMatmulParams(const ModelDesc& d) {
  const int64_t h = d.hidden;
  const int64_t conv1 = d.mel_bins * h * 3, conv2 = h * h * 3;
  return d.layers * (4 * h * h + 2 * h * d.ffn_hidden) + 2 * conv1 + conv2;
}

// The keys one query of a decoder attends, summed over its layers: s/2
// under the causal mask; on a sliding layer with a window W shorter than s
// (Mistral, Gemma 3's local layers: plan::IsSlidingLayer), the first W
// queries their prefix and the others W keys: W - W^2 / (2s).
double DecoderLayerKeys(const ModelDesc& d, double s) {
  const auto window = static_cast<double>(SlidingWindow(d));
  const double keys = window > 0 && s > window ? window - window * window / (2.0 * s) : s / 2.0;
  const auto sliding = static_cast<double>(SlidingLayerCount(d));
  return sliding * keys + (static_cast<double>(d.layers) - sliding) * (s / 2.0);
}

}  // namespace

int64_t MatmulParamsPerToken(const ModelDesc& d) {
  switch (d.kind) {
    case ModelKind::kDecoder: return DecoderMatmulParams(d);
    case ModelKind::kVit: return VitMatmulParams(d);
    case ModelKind::kAudioEncoder: return AudioEncoderMatmulParams(d);
    case ModelKind::kProjector: return d.in_dim * d.out_dim + d.out_dim * d.out_dim;
  }
  return 0;
}

double AttentionFlopsPerToken(const ModelDesc& d, double seq_len) {
  switch (d.kind) {
    case ModelKind::kDecoder: return 4.0 * DecoderLayerKeys(d, seq_len) * static_cast<double>(d.heads * HeadDim(d));
    case ModelKind::kVit: return 4.0 * VitLayerKeys(d, seq_len) * static_cast<double>(d.hidden);
    case ModelKind::kAudioEncoder: return 4.0 * static_cast<double>(d.layers) * seq_len * static_cast<double>(d.hidden);
    case ModelKind::kProjector: return 0.0;
  }
  return 0.0;
}

double ForwardFlopsPerToken(const ModelDesc& d, double seq_len) {
  return 2.0 * static_cast<double>(MatmulParamsPerToken(d)) + AttentionFlopsPerToken(d, seq_len);
}

double SequenceForwardFlops(const ModelDesc& d, int64_t tokens) {
  if (tokens <= 0) return 0.0;
  const auto t = static_cast<double>(tokens);
  return t * ForwardFlopsPerToken(d, t);
}

double ModelFlopsOfForward(SectionMode mode, double forward_flops) {
  return mode == SectionMode::kTrain ? 3.0 * forward_flops : forward_flops;
}

int64_t VitSequenceTokens(const ModelDesc& d) {
  const int64_t side = d.patch_size > 0 ? d.image_size / d.patch_size : 0;
  const int layout = VitLayout(d);
  const bool cls_by_layout = layout == kVitLayoutClip || layout == kVitLayoutHfVit;
  return side * side + (Extra(d, "cls_token", cls_by_layout ? 1 : 0) != 0 ? 1 : 0);
}

int64_t AudioSequenceTokens(const ModelDesc& d) {
  return (d.audio_frames + 1) / 2;
}

}  // namespace maestro::plan
