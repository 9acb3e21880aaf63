// SPDX-License-Identifier: Apache-2.0
// plan/model_flops.h against numbers worked out by hand from the rule (2
// FLOPs per multiply-accumulate of each weight matrix a token passes, plus
// 4 * keys * heads * head_dim per token and layer of attention; keys = the
// sequence for encoders, half of it for a causal decoder), for models small
// enough to count on paper. The comments show the arithmetic.
#include "plan/model_flops.h"

#include <gtest/gtest.h>

#include <utility>

#include "plan/model_desc.h"

namespace maestro::plan {
namespace {

// hidden 8, 2 layers, 2 heads (head_dim 4), 1 kv head, SwiGLU of 16, vocab 32.
ModelDesc TinyDecoder() {
  ModelDesc d;
  d.kind = ModelKind::kDecoder;
  d.hidden = 8;
  d.layers = 2;
  d.heads = 2;
  d.kv_heads = 1;
  d.ffn_hidden = 16;
  d.vocab = 32;
  return d;
}

TEST(ModelFlops, TinyDecoder) {
  const ModelDesc d = TinyDecoder();
  // Per layer: q 8x8 + k 8x4 + v 8x4 + o 8x8 = 64 + 32 + 32 + 64 = 192;
  // gate, up, down 3 x 8 x 16 = 384. Two layers: 1152; LM head 32 x 8 = 256.
  EXPECT_EQ(MatmulParamsPerToken(d), 1408);
  // 10 tokens, causal: 5 keys on average; 4 * 2 layers * 5 * (2 heads * 4) = 320.
  EXPECT_DOUBLE_EQ(AttentionFlopsPerToken(d, 10), 320.0);
  EXPECT_DOUBLE_EQ(ForwardFlopsPerToken(d, 10), 2 * 1408 + 320.0);
  EXPECT_DOUBLE_EQ(SequenceForwardFlops(d, 10), 10 * (2816.0 + 320.0));
  // A tied embedding still runs its LM head.
  ModelDesc tied = d;
  tied.tie_embeddings = true;
  EXPECT_EQ(MatmulParamsPerToken(tied), 1408);
  EXPECT_EQ(SequenceForwardFlops(d, 0), 0.0);
}

TEST(ModelFlops, TinyMoeDecoderCountsTheRoutedExpertsOnly) {
  ModelDesc d = TinyDecoder();
  d.experts = 4;
  d.experts_per_token = 2;
  d.moe_ffn_hidden = 8;
  // Per layer: attention 192, router 8 x 4 = 32, 2 experts x 3 x 8 x 8 = 384.
  // Two layers: 1216; LM head 256.
  EXPECT_EQ(MatmulParamsPerToken(d), 1472);
  // A shared expert of 4 (3 x 8 x 4 = 96) and its 8 -> 1 gate, per layer.
  d.extra["shared_expert_ffn_hidden"] = 4;
  EXPECT_EQ(MatmulParamsPerToken(d), 1472 + 2 * (96 + 8));
}

TEST(ModelFlops, SlidingWindowDecoder) {
  ModelDesc d = TinyDecoder();
  d.extra[kSlidingWindowKey] = 4;
  // 10 tokens, window 4: 4 - 16 / 20 = 3.2 keys per query on both layers:
  // 4 * 2 * 3.2 * 8 = 204.8.
  EXPECT_DOUBLE_EQ(AttentionFlopsPerToken(d, 10), 204.8);
  // A sequence no longer than the window is plain causal: 4 * 2 * 2 * 8.
  EXPECT_DOUBLE_EQ(AttentionFlopsPerToken(d, 4), 128.0);
}

// hidden 8, 1 layer, 2 heads, MLP 16, 8x8 RGB images in 4x4 patches.
ModelDesc TinyVit() {
  ModelDesc d;
  d.kind = ModelKind::kVit;
  d.hidden = 8;
  d.layers = 1;
  d.heads = 2;
  d.ffn_hidden = 16;
  d.image_size = 8;
  d.patch_size = 4;
  d.channels = 3;
  d.extra["cls_token"] = 0;
  return d;
}

TEST(ModelFlops, TinyVit) {
  const ModelDesc d = TinyVit();
  // q, k, v, o 4 x 8 x 8 = 256; fc1 + fc2 2 x 8 x 16 = 256; the patch stem
  // 3 x 4 x 4 x 8 = 384.
  EXPECT_EQ(MatmulParamsPerToken(d), 896);
  EXPECT_EQ(VitSequenceTokens(d), 4);  // (8 / 4)^2 patches, no class token
  // Not causal: 4 keys; 4 * 1 layer * 4 * 8 = 128.
  EXPECT_DOUBLE_EQ(AttentionFlopsPerToken(d, 4), 128.0);
  EXPECT_DOUBLE_EQ(SequenceForwardFlops(d, 4), 4 * (2 * 896.0 + 128.0));
  // The CLIP layout has a class token: 5 tokens, 4 * 5 * 8 = 160 per token.
  ModelDesc clip = d;
  clip.extra[kVitLayoutKey] = kVitLayoutClip;
  clip.extra["cls_token"] = 1;
  EXPECT_EQ(VitSequenceTokens(clip), 5);
  EXPECT_DOUBLE_EQ(SequenceForwardFlops(clip, 5), 5 * (2 * 896.0 + 160.0));
  // A 2x2 patch merger to 6: (32 x 32 + 32 x 6) / 4 = 304 per patch.
  ModelDesc merged = d;
  merged.extra["spatial_merge"] = 2;
  merged.out_dim = 6;
  EXPECT_EQ(MatmulParamsPerToken(merged), 896 + 304);
}

// Qwen2.5-VL's tower: TinyVit (hidden 8, 2 heads, 4 px patches) with 4
// blocks, a SwiGLU of 16, patches over 2 frames, merge 2, windows of 16 px
// (4 x 4 = 16 patches); block 3 attends over the whole segment.
TEST(ModelFlops, Qwen25VlWindowAttentionCostsByWindowLength) {
  ModelDesc d = TinyVit();
  d.layers = 4;
  d.out_dim = 6;
  for (const auto& [key, value] : {std::pair<const char*, double>{kVitLayoutKey, kVitLayoutQwen25Vl},
                                   {"temporal_patch", 2},
                                   {"spatial_merge", 2},
                                   {kVitWindowSizeKey, 16},
                                   {"fullatt_block_indexes.3", 1}}) {
    d.extra[key] = value;
  }
  // q, k, v, o 4 x 8 x 8 = 256; gate, up, down 3 x 8 x 16 = 384; 4 blocks:
  // 2560; the stem 3 x 2 x 4 x 4 x 8 = 768; the merger (32 x 32 + 32 x 6) / 4 = 304.
  EXPECT_EQ(MatmulParamsPerToken(d), 2560 + 768 + 304);
  // 64 patches: 3 window blocks of 16 keys, 1 full block of 64: 4 * (3 x 16 + 64) x 8.
  EXPECT_DOUBLE_EQ(AttentionFlopsPerToken(d, 64), 4.0 * (3 * 16 + 64) * 8);
  // A segment shorter than a window: every block attends over it.
  EXPECT_DOUBLE_EQ(AttentionFlopsPerToken(d, 8), 4.0 * 4 * 8 * 8);
}

TEST(ModelFlops, TinyAudioEncoder) {
  ModelDesc d;
  d.kind = ModelKind::kAudioEncoder;
  d.hidden = 8;
  d.layers = 1;
  d.heads = 2;
  d.ffn_hidden = 16;
  d.mel_bins = 4;
  d.audio_frames = 5;
  // Blocks 256 + 256; conv1 4 x 8 x 3 = 96 at twice the rate: 192; conv2
  // 8 x 8 x 3 = 192.
  EXPECT_EQ(MatmulParamsPerToken(d), 896);
  EXPECT_EQ(AudioSequenceTokens(d), 3);                  // ceil(5 / 2)
  EXPECT_DOUBLE_EQ(AttentionFlopsPerToken(d, 3), 96.0);  // 4 * 1 * 3 * 8
  EXPECT_DOUBLE_EQ(SequenceForwardFlops(d, 3), 3 * (2 * 896.0 + 96.0));
}

TEST(ModelFlops, ProjectorHasNoAttention) {
  ModelDesc d;
  d.kind = ModelKind::kProjector;
  d.in_dim = 8;
  d.out_dim = 4;
  EXPECT_EQ(MatmulParamsPerToken(d), 8 * 4 + 4 * 4);
  EXPECT_EQ(AttentionFlopsPerToken(d, 100), 0.0);
  EXPECT_DOUBLE_EQ(SequenceForwardFlops(d, 7), 7 * 2 * 48.0);
}

// MoeLayerCount over any span equals counting IsMoeLayer layer by layer
// (Qwen-MoE: every decoder_sparse_step-th layer, less mlp_only_layers; the
// count without listed layers takes no key per layer).
TEST(ModelFlops, MoeLayerCountIsTheLayersIsMoeLayerNames) {
  for (int step : {1, 2, 3}) {
    for (bool listed : {false, true}) {
      ModelDesc d;
      d.kind = ModelKind::kDecoder;
      d.layers = 10;
      d.experts = 4;
      d.extra[kDecoderSparseStepKey] = step;
      if (listed) d.extra[std::string(kMlpOnlyLayerKeyPrefix) + "5"] = 1;
      for (int64_t first = 0; first <= 10; ++first) {
        for (int64_t end = first; end <= 10; ++end) {
          int64_t count = 0;
          for (int64_t i = first; i < end; ++i) count += IsMoeLayer(d, i) ? 1 : 0;
          EXPECT_EQ(MoeLayerCount(d, first, end), count) << step << " " << listed << " " << first << ".." << end;
        }
      }
      EXPECT_EQ(MoeLayerCount(d), MoeLayerCount(d, 0, 10));
      d.experts = 0;
      EXPECT_EQ(MoeLayerCount(d), 0);
    }
  }
}

TEST(ModelFlops, TrainingCostsThreeForwards) {
  EXPECT_EQ(ModelFlopsOfForward(SectionMode::kTrain, 10.0), 30.0);
  EXPECT_EQ(ModelFlopsOfForward(SectionMode::kForward, 10.0), 10.0);
}

}  // namespace
}  // namespace maestro::plan
