// SPDX-License-Identifier: Apache-2.0
// RoPE frequencies: the one home of a decoder's rotary inverse frequencies
// and of the scale its cos and sin tables are multiplied by.
//
// Owns: RopeScaling (the parameters of a Hugging Face config's
// `rope_scaling` object: rope_type default | linear | llama3 | yarn |
// dynamic and its numbers), the rope_type names and their numeric codes
// (what ModelDesc::extra carries, plan/model_desc.h's kRopeScaling*Key),
// RopeInverseFrequencies and RopeAttentionFactor, as doubles. The math is
// that of transformers' modeling_rope_utils.py (_compute_default_rope_parameters,
// _compute_linear_scaling_rope_parameters, _compute_llama3_parameters,
// _compute_yarn_parameters), YaRN with the rule of transformers >= 4.57
// (PR #40320, issue #38224): the config's `factor` is used as written
// (max_position_embeddings / original_max_position_embeddings only when it is
// absent, which the importer resolves), the correction range is computed at
// original_max_position_embeddings, and `truncate` (default true) rounds its
// bounds to whole dimensions (floor, ceil) before the ramp.
// `dynamic` (dynamic NTK) has a code so that it can be named and refused:
// its frequencies depend on the live sequence length (ValidateModelDesc).
// The compiler (compiler/model.cc's HF import), the validation
// (plan/model_desc.cc), the runtime's decoder (MakeRopeTables) and the
// export (runtime/hf_export.cc) all read it here.
// May call: base. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace maestro::plan {

// The codes are what plan.json carries: never renumber them.
enum class RopeType : int {
  kDefault = 0,
  kLinear = 1,
  kLlama3 = 2,
  kYarn = 3,
  kDynamic = 4,  // named so that it is refused by name; never computed
};
inline constexpr int kRopeTypeCount = 5;

// HF's rope_type name ("default", "linear", "llama3", "yarn", "dynamic").
const char* RopeTypeName(RopeType type);
// The type of an HF rope_type (or legacy "type") name; nullopt when unknown.
std::optional<RopeType> RopeTypeOfName(const std::string& name);

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;                            // linear, llama3, yarn (>= 1)
  double low_freq_factor = 1.0;                   // llama3
  double high_freq_factor = 4.0;                  // llama3 (> low_freq_factor)
  double original_max_position_embeddings = 0.0;  // llama3, yarn (> 0)
  double beta_fast = 32.0;                        // yarn
  double beta_slow = 1.0;                         // yarn
  double attention_factor = 0.0;                  // yarn: 0 = derived from factor (and mscale)
  double mscale = 0.0;                            // yarn (DeepSeek): 0 = unset
  double mscale_all_dim = 0.0;                    // yarn (DeepSeek): 0 = unset
  bool truncate = true;                           // yarn: floor/ceil the correction range
};

// The D/2 inverse frequencies of a head of `head_dim` (even) dimensions with
// base `theta`: theta^(-2i/D) for i in [0, D/2), scaled as `s.type` says.
// Precondition: s is not kDynamic (refused before any model is built).
std::vector<double> RopeInverseFrequencies(double theta, int64_t head_dim, const RopeScaling& s);

// What HF multiplies cos and sin by ("attention_scaling"): 1 except for
// YaRN, where it is s.attention_factor when set, else
// mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are set,
// else mscale(factor) = 0.1 ln(factor) + 1 (1 for factor <= 1).
double RopeAttentionFactor(const RopeScaling& s);

}  // namespace maestro::plan
