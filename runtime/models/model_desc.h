// SPDX-License-Identifier: Apache-2.0
// What the runtime's models accept from a plan::ModelDesc, without torch.
//
// Owns: the checks a ModelDesc must pass before a model is built from it, the
// defaults the models read from ModelDesc::extra, and the parameter count of
// the model the runtime would build. No torch types here: any module may
// include this header (the torch-side models are in decoder.h / encoders.h,
// which only runtime/*.cc include).
// May call: base, plan, hf/name_map.h (the layouts). Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::runtime {

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
double RopeTheta(const plan::ModelDesc& desc);
double RmsNormEps(const plan::ModelDesc& desc);
double LayerNormEps(const plan::ModelDesc& desc);
bool QkvBias(const plan::ModelDesc& desc);
int64_t SlidingWindow(const plan::ModelDesc& desc);
bool QuickGelu(const plan::ModelDesc& desc);
int64_t SharedExpertFfnHidden(const plan::ModelDesc& desc);
bool NormTopkProb(const plan::ModelDesc& desc);
double RouterAuxLossCoef(const plan::ModelDesc& desc);  // 0 for a dense decoder
bool QkNorm(const plan::ModelDesc& desc);

// The ViT the runtime builds (hf::kVitLayout*: built-in, CLIP, Qwen2-VL);
// see hf/name_map.h for how it is chosen.
int VitLayout(const plan::ModelDesc& desc);
// What a ViT section hands on per image (VitEncoderImpl::output_tokens() /
// output_dim() without building it): N / m^2 rows of out_dim with a patch
// merger, N + 1 rows (the class token first) for CLIP, else N rows of hidden.
int64_t VitOutputTokens(const plan::ModelDesc& desc);
int64_t VitOutputDim(const plan::ModelDesc& desc);
// Rows of the audio encoder's position table: extra.max_source_positions, or
// ceil(audio_frames / 2) (what the stride-2 conv makes of audio_frames).
int64_t AudioPositions(const plan::ModelDesc& desc);

// OK when the model of desc can run `tokens` positions; InvalidArgument
// otherwise: a decoder with a sliding window (Mistral) refuses sequences
// longer than the window (the runtime has no windowed mask; within the window
// the model is exact).
Status CheckSequenceLength(const plan::ModelDesc& desc, int64_t tokens, const std::string& where = "model");

// head_dim, or hidden / heads when head_dim is 0.
int64_t HeadDim(const plan::ModelDesc& desc);
// kv_heads, or heads when kv_heads is 0 (plain MHA).
int64_t KvHeads(const plan::ModelDesc& desc);
// moe_ffn_hidden, or ffn_hidden when moe_ffn_hidden is 0.
int64_t MoeFfnHidden(const plan::ModelDesc& desc);
// ViT patch merger: extra.spatial_merge (0 = none) and extra.merger_hidden
// (0 or absent = spatial_merge^2 * hidden).
int64_t SpatialMerge(const plan::ModelDesc& desc);
int64_t MergerHidden(const plan::ModelDesc& desc);

// OK when a model of desc.kind can be built from desc; otherwise
// InvalidArgument naming the field and what it must be. `where` names the
// desc for the message (e.g. "section 'llm'").
Status ValidateModelDesc(const plan::ModelDesc& desc, const std::string& where = "model");

// The number of trainable parameters of the model the runtime builds from
// desc, counted on the built module (on torch's meta device: nothing is
// allocated, so a 70B desc is fine). Tied embeddings count once; the audio
// encoder's position table is a (frozen) parameter, as in Whisper.
StatusOr<int64_t> ParameterCount(const plan::ModelDesc& desc);

}  // namespace maestro::runtime
