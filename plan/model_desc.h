// SPDX-License-Identifier: Apache-2.0
// What a ModelDesc means beyond its fields, as the runtime builds it.
//
// Owns: the checks a ModelDesc must pass before the runtime builds a model
// from it, the defaults the models read from ModelDesc::extra (with the HF
// config.json names), the ViT layout, and the shapes derived from a desc
// (head_dim, kv_heads, a ViT's rows per image). The runtime's models
// (runtime/models), the compiler (what it plans and refuses) and hf (which
// names a layout has) read them here, so they agree. The parameter count of
// a built model is runtime/models/encoders.h ParameterCount.
// May call: base, plan. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "plan/plan.h"
#include "plan/rope_scaling.h"

namespace maestro::plan {

// Keys of ModelDesc::extra the models read (HF config.json names where HF
// has one), with the value used when the key is absent. compiler/model.cc
// sets them when it imports a config.json and counts parameters by them.
inline constexpr const char* kRopeThetaKey = "rope_theta";          // decoder, 10000
inline constexpr const char* kRmsNormEpsKey = "rms_norm_eps";       // decoder, 1e-5
inline constexpr const char* kLayerNormEpsKey = "layer_norm_eps";   // ViT / audio, 1e-5 (Qwen2-VL tower: 1e-6)
inline constexpr const char* kQkvBiasKey = "qkv_bias";              // decoder: q/k/v biases (Qwen2), 0
inline constexpr const char* kSlidingWindowKey = "sliding_window";  // decoder: Mistral's window, 0 = none
inline constexpr const char* kQuickGeluKey = "quick_gelu";  // ViT MLP activation; CLIP / Qwen2-VL: 1, built-in: 0
// MoE decoders (docs/moe.md):
inline constexpr const char* kSharedExpertFfnHiddenKey =
    "shared_expert_ffn_hidden";                                               // Qwen2-MoE's shared expert, 0 = none
inline constexpr const char* kNormTopkProbKey = "norm_topk_prob";             // top-k weights renormalized; 1 (Mixtral)
inline constexpr const char* kRouterAuxLossCoefKey = "router_aux_loss_coef";  // load-balancing loss weight, 0
inline constexpr const char* kQkNormKey = "qk_norm";  // decoder: RMSNorm of q and k heads (Qwen3), 0
// Qwen2-MoE / Qwen3-MoE with dense layers: layer i (from 0) is a MoE layer
// when (i + 1) % decoder_sparse_step == 0 and extra["mlp_only_layers.<i>"]
// is not set (transformers' Qwen2MoeDecoderLayer rule); a dense layer is a
// SwiGLU MLP of ffn_hidden (the config's intermediate_size).
inline constexpr const char* kDecoderSparseStepKey = "decoder_sparse_step";  // 1: every layer MoE
inline constexpr const char* kMlpOnlyLayerKeyPrefix = "mlp_only_layers.";    // + the layer's index, 1 = dense
// Gemma 3 text (transformers' Gemma3ForCausalLM; docs/weights.md): extra.gemma3
// = 1 makes every RMSNorm scale by (1 + weight) (weights start at 0), adds a
// norm after the attention and after the MLP of each block (sandwich
// norms), multiplies the token embeddings by sqrt(hidden) and makes the MLP
// GeGLU (tanh-approximated GELU). Its layers alternate local and global
// attention: with extra.sliding_window W > 0, layer i (from 0) is a sliding
// (local) layer unless (i + 1) % sliding_window_pattern == 0 (pattern 0 or
// absent: every layer slides, as Mistral) or extra["full_attention_layers.<i>"]
// is set (an explicit layer_types list); a sliding layer uses RoPE base
// rope_local_base_freq without rope scaling when that key is set, a global
// one rope_theta and the config's rope_scaling. Attention scores are scaled
// by query_pre_attn_scalar^-0.5 when that key is set (else head_dim^-0.5).
inline constexpr const char* kGemma3Key = "gemma3";                                    // 0
inline constexpr const char* kSlidingWindowPatternKey = "sliding_window_pattern";      // 0: every layer slides
inline constexpr const char* kFullAttentionLayerKeyPrefix = "full_attention_layers.";  // + the layer, 1 = global
inline constexpr const char* kRopeLocalBaseFreqKey = "rope_local_base_freq";           // absent: rope_theta
inline constexpr const char* kQueryPreAttnScalarKey = "query_pre_attn_scalar";         // absent: head_dim
// A decoder's rope scaling (plan/rope_scaling.h), one key per parameter of
// the config's `rope_scaling` object (compiler/model.cc imports them,
// runtime/hf_export.cc writes them back); absent keys take RopeScaling's
// defaults, an absent type is no scaling.
inline constexpr const char* kRopeScalingTypeKey = "rope_scaling_type";  // a RopeType code, 0 = none
inline constexpr const char* kRopeScalingFactorKey = "rope_scaling_factor";
inline constexpr const char* kRopeScalingLowFreqFactorKey = "rope_scaling_low_freq_factor";
inline constexpr const char* kRopeScalingHighFreqFactorKey = "rope_scaling_high_freq_factor";
inline constexpr const char* kRopeScalingOriginalMaxPositionsKey = "rope_scaling_original_max_position_embeddings";
inline constexpr const char* kRopeScalingBetaFastKey = "rope_scaling_beta_fast";
inline constexpr const char* kRopeScalingBetaSlowKey = "rope_scaling_beta_slow";
inline constexpr const char* kRopeScalingAttentionFactorKey = "rope_scaling_attention_factor";  // 0 = derived
inline constexpr const char* kRopeScalingMscaleKey = "rope_scaling_mscale";
inline constexpr const char* kRopeScalingMscaleAllDimKey = "rope_scaling_mscale_all_dim";
inline constexpr const char* kRopeScalingTruncateKey = "rope_scaling_truncate";  // 1 (HF's default) or 0
// The marker of plans compiled before rope scaling was read (any nonzero
// value): refused, the spec must be compiled again.
inline constexpr const char* kLegacyRopeScalingKey = "rope_scaling";
double RopeTheta(const ModelDesc& desc);
// The rope scaling of desc's extra. A type code that is no RopeType reads
// as kDynamic: never computed, and ValidateModelDesc refuses both.
RopeScaling RopeScalingOf(const ModelDesc& desc);
double RmsNormEps(const ModelDesc& desc);
double LayerNormEps(const ModelDesc& desc);
bool QkvBias(const ModelDesc& desc);
int64_t SlidingWindow(const ModelDesc& desc);
bool QuickGelu(const ModelDesc& desc);
int64_t SharedExpertFfnHidden(const ModelDesc& desc);
bool NormTopkProb(const ModelDesc& desc);
double RouterAuxLossCoef(const ModelDesc& desc);  // 0 for a dense decoder
bool QkNorm(const ModelDesc& desc);
bool Gemma3(const ModelDesc& desc);
// Whether decoder layer `layer` (0-based) attends through the sliding window
// (the rule above; false for every layer without a window). The runtime
// masks, the compiler prices and counts FLOPs by it.
bool IsSlidingLayer(const ModelDesc& desc, int64_t layer);
// How many of layers [first, end) are sliding layers (end < 0: desc.layers).
int64_t SlidingLayerCount(const ModelDesc& desc, int64_t first = 0, int64_t end = -1);
// Whether layer `layer` takes the local RoPE (rope_local_base_freq, no
// scaling): a sliding layer of a desc with that key.
bool UsesLocalRope(const ModelDesc& desc, int64_t layer);
// The RoPE base and scaling of layer `layer`.
double RopeThetaOf(const ModelDesc& desc, int64_t layer);
RopeScaling RopeScalingOf(const ModelDesc& desc, int64_t layer);
// The factor of q k^T in attention: query_pre_attn_scalar^-0.5, or
// head_dim^-0.5.
double AttentionScale(const ModelDesc& desc);
// Whether decoder layer `layer` (0-based) has a MoE MLP: desc.experts > 0
// and the sparse-step / mlp_only_layers rule above. The runtime builds, hf
// names, and the compiler counts and prices layers by it.
bool IsMoeLayer(const ModelDesc& desc, int64_t layer);
// How many of layers [first, end) are MoE layers (end < 0: desc.layers).
int64_t MoeLayerCount(const ModelDesc& desc, int64_t first = 0, int64_t end = -1);

// ModelDesc::extra["vit_layout"]: which ViT the runtime builds.
inline constexpr const char* kVitLayoutKey = "vit_layout";
inline constexpr int kVitLayoutBuiltin = 0;  // Maestro's ViT (fused qkv, learned positions, no class token)
inline constexpr int kVitLayoutClip = 1;     // CLIPVisionModel
inline constexpr int kVitLayoutQwen2Vl = 2;  // Qwen2-VL's vision tower (2-D RoPE, Conv3d, PatchMerger)
inline constexpr int kVitLayoutHfVit = 3;    // HF ViTModel: counted by the compiler, not built by the runtime
inline constexpr int kVitLayoutSiglip = 4;   // SiglipVisionModel (no class token, gelu_tanh, post_layernorm)
// Qwen2.5-VL's vision tower (Qwen2_5_VisionTransformerPretrainedModel): as
// Qwen2-VL's, with RMSNorms (eps 1e-6), a SwiGLU MLP with biases and window
// attention on every block not listed in fullatt_block_indexes.
inline constexpr int kVitLayoutQwen25Vl = 5;
// Qwen2.5-VL's window attention: extra.window_size is vision_config.window_size
// in pixels (a window is window_size / spatial_merge / patch_size merged
// units a side); extra["fullatt_block_indexes.<i>"] = 1 for each block i of
// vision_config.fullatt_block_indexes (one key per full-attention block,
// i in [0, layers): ValidateModelDesc checks it); every other block attends
// inside its window.
inline constexpr const char* kVitWindowSizeKey = "window_size";
inline constexpr const char* kFullAttBlockKeyPrefix = "fullatt_block_indexes.";
// Whether `layout` is one of the Qwen vision towers (2-D RoPE, Conv3d stem,
// PatchMerger, packed input): Qwen2-VL or Qwen2.5-VL.
bool IsQwenVisionLayout(int layout);
// Merged units a window side (window_size / spatial_merge / patch_size), 0
// when the tower has no window attention (not Qwen2.5-VL).
int64_t VitMergerWindow(const ModelDesc& desc);
// Whether ViT block `layer` attends over its whole segment: every block of a
// tower without window attention, a listed block of Qwen2.5-VL's.
bool IsFullAttentionVitBlock(const ModelDesc& desc, int64_t layer);
// ModelDesc::extra["attn_pool_head"]: SigLIP's attention-pooling head
// (vision_use_head, HF's default true): its parameters are built, loaded,
// exported and counted; it computes the pooled output only, never a
// section's output (VitEncoderImpl::Pool).
inline constexpr const char* kAttnPoolHeadKey = "attn_pool_head";
bool AttnPoolHead(const ModelDesc& desc);  // extra.attn_pool_head != 0 on a SigLIP ViT
// The ViT layout of desc (kVitLayout*): extra.vit_layout when set; otherwise
// Qwen2-VL when the spec turned learned positions off (pos_embed = false: the
// only ViT without them is the 2-D RoPE one), else the built-in one.
int VitLayout(const ModelDesc& desc);
// What a ViT section hands on per image (VitEncoderImpl::output_tokens() /
// output_dim() without building it): N / m^2 rows of out_dim with a patch
// merger, N + 1 rows (the class token first) for CLIP, else N rows of hidden
// (SigLIP: N = floor(image_size / patch_size)^2, as its "valid" conv).
int64_t VitOutputTokens(const ModelDesc& desc);
int64_t VitOutputDim(const ModelDesc& desc);
// Rows of the audio encoder's position table: extra.max_source_positions, or
// ceil(audio_frames / 2) (what the stride-2 conv makes of audio_frames).
int64_t AudioPositions(const ModelDesc& desc);

// head_dim, or hidden / heads when head_dim is 0.
int64_t HeadDim(const ModelDesc& desc);
// kv_heads, or heads when kv_heads is 0 (plain MHA).
int64_t KvHeads(const ModelDesc& desc);
// moe_ffn_hidden, or ffn_hidden when moe_ffn_hidden is 0.
int64_t MoeFfnHidden(const ModelDesc& desc);
// ViT patch merger: extra.spatial_merge (0 = none) and extra.merger_hidden
// (0 or absent = spatial_merge^2 * hidden).
int64_t SpatialMerge(const ModelDesc& desc);
int64_t MergerHidden(const ModelDesc& desc);

// OK when a model of desc.kind can be built from desc; otherwise
// InvalidArgument naming the field and what it must be. `where` names the
// desc for the message (e.g. "section 'llm'").
Status ValidateModelDesc(const ModelDesc& desc, const std::string& where = "model");

}  // namespace maestro::plan
