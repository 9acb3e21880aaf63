// SPDX-License-Identifier: Apache-2.0
// What the runtime's models accept from a plan::ModelDesc, without torch.
//
// Owns: the checks a ModelDesc must pass before a model is built from it, the
// defaults the models read from ModelDesc::extra, and the parameter count of
// the model the runtime would build. No torch types here: any module may
// include this header (the torch-side models are in decoder.h / encoders.h,
// which only runtime/*.cc include).
// May call: base, plan. Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::runtime {

// Keys of ModelDesc::extra the models read (HF config.json names), with the
// value used when the key is absent.
inline constexpr const char* kRopeThetaKey = "rope_theta";         // decoder, 10000
inline constexpr const char* kRmsNormEpsKey = "rms_norm_eps";      // decoder, 1e-5
inline constexpr const char* kLayerNormEpsKey = "layer_norm_eps";  // ViT / audio, 1e-5
double RopeTheta(const plan::ModelDesc& desc);
double RmsNormEps(const plan::ModelDesc& desc);
double LayerNormEps(const plan::ModelDesc& desc);

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
// allocated, so a 70B desc is fine). Tied embeddings count once; fixed
// sinusoidal positions (audio encoder) are buffers, not parameters.
StatusOr<int64_t> ParameterCount(const plan::ModelDesc& desc);

}  // namespace maestro::runtime
