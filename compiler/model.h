// SPDX-License-Identifier: Apache-2.0
// Model facts: exact parameter counts and forward FLOPs per token of the
// model kinds Maestro knows, built-in (given by shape) or imported from a
// Hugging Face config.json.
//
// What is counted (docs/spec.md says the same, kind by kind):
//  - decoder (Llama, Mistral, Qwen2, Mixtral): token embedding, per layer
//    q/k/v/o projections (+ biases when the config has them: Qwen2's q/k/v,
//    `attention_bias`), two RMSNorm weights, a gated (SwiGLU) MLP or a MoE
//    block (router without bias + experts), the final norm, and the LM head
//    unless tied. Rotary embeddings have no parameters.
//  - vit (HF ViTModel, CLIPVisionModel, SiglipVisionModel, Qwen2-VL-style): patch embedding
//    (conv weight, + bias unless `patch_bias` is off), class token, learned
//    position embeddings, optional pre-norm (CLIP), per layer two LayerNorms
//    (weight+bias), q/k/v/o with biases, a 2-layer GELU MLP with biases, the
//    final LayerNorm, the pooler (dense h x h + bias) when `pooler` is on (HF
//    ViTModel default), SigLIP's attention-pooling head when
//    `attn_pool_head` is on (vision_use_head: probe, in_proj, out_proj,
//    LayerNorm, MLP; parameters only, no FLOPs) and the optional patch-merger
//    projector. No classification head, no CLIP visual projection.
//  - audio_encoder (HF WhisperEncoder): conv1 + conv2 (with biases), the
//    position embedding table (stored as a parameter in HF, though frozen),
//    per layer q (bias), k (no bias), v (bias), o (bias), two LayerNorms and a
//    2-layer MLP with biases, the final LayerNorm.
//  - projector: a 1- or 2-layer MLP with biases.
// FLOPs: plan/model_flops.h's rule, which the runtime's metrics share: 2 per
// multiply-accumulate of every weight matrix a token passes through (MoE: the
// routed experts only; the LM head included, embedding lookups excluded),
// plus attention scores and weighted values, 4 * layers * context * heads *
// head_dim per token, where the context is the sequence length for encoders
// and half of it for causal decoders.
// May call: base, plan, nlohmann-json. Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::compiler {

struct ModelFacts {
  int64_t params = 0;         // every parameter
  int64_t active_params = 0;  // parameters a token passes through (MoE: routed experts only)
  int64_t matmul_params = 0;  // weights of the matrix products one token goes through
  int64_t embedding_params = 0;
  double flops_per_token = 0;  // forward, at `seq_len`
  // Of flops_per_token, the attention core's (scores and weighted values):
  // what selective recomputation runs again in backward.
  double attention_flops_per_token = 0;
  int64_t seq_len = 0;     // the sequence length the FLOPs assume
  int64_t output_dim = 0;  // width of the tensor the model hands downstream
};

// Reads a flag from desc.extra (absent = `fallback`).
bool ExtraFlag(const plan::ModelDesc& desc, const std::string& key, bool fallback);
double ExtraValue(const plan::ModelDesc& desc, const std::string& key, double fallback);

// Checks the shape (positive sizes, heads divide hidden, ...) and bounds that
// keep every count and product of ComputeModelFacts below 2^62 (a decoder at
// every bound at once stays below 2^59; tests/compiler/model_test.cc computes
// each kind at its bounds under UBSan). `where` prefixes messages; on failure
// `*key` (when given) names the spec key the message is about.
Status CheckModelShape(const plan::ModelDesc& desc, const std::string& where, std::string* key = nullptr);

// Tokens one sample brings to this model when the spec does not say: a ViT's
// patches (+ class token), an audio encoder's frames after the stride-2 conv,
// a decoder's `seq_len`.
int64_t NaturalTokens(const plan::ModelDesc& desc, int64_t seq_len);

// REQUIRES: CheckModelShape(desc).ok(). seq_len <= 0 picks NaturalTokens(desc, 4096).
ModelFacts ComputeModelFacts(const plan::ModelDesc& desc, int64_t seq_len);

// Builds a ModelDesc from a Hugging Face config.json's text. `origin` names
// the file in messages. Knows model_type llama, mistral, qwen2, qwen3,
// mixtral, qwen2_moe, qwen3_moe, gemma3_text, vit, clip (its vision_config),
// clip_vision_model, siglip (its vision_config), siglip_vision_model,
// whisper (the encoder), qwen2_vl and qwen2_5_vl.
// `part` chooses the model of a vision-language config: "text" its language
// model (M-RoPE), "vision" or "" its vision tower (qwen2_vl only);
// any other model_type takes no part.
StatusOr<plan::ModelDesc> ModelFromHfConfig(const std::string& json_text, const std::string& origin,
                                            const std::string& part = "");
StatusOr<plan::ModelDesc> ModelFromHfConfigFile(const std::string& path, const std::string& part = "");

}  // namespace maestro::compiler
