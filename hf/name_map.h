// SPDX-License-Identifier: Apache-2.0
// Which published layout a runtime model follows, and for each layout ONE
// table from Hugging Face tensor names to the runtime module's parameter
// names (what named_parameters() gives), with every tensor's full shape and
// the dimension tensor parallelism splits. Torch-free: the compiler-facing
// tools, the runtime's loader (runtime/hf_weights.h) and `maestro export`
// read the same tables. docs/weights.md lists every table.
//
// Layouts (ModelDesc::extra["vit_layout"] picks the ViT one; the compiler's
// ModelFromHfConfig sets it, compiler/model.cc writes the same numbers):
//   decoder        Llama / Mistral / Qwen2 (q/k/v bias when extra.qkv_bias),
//                  and Maestro's built-in decoder, which is the same module:
//                  model.embed_tokens, model.layers.{i}.*, model.norm, lm_head
//                  (absent when tie_embeddings: not in the file, not exported).
//   mixtral        the MoE decoder (desc.experts > 0): block_sparse_moe.gate,
//                  block_sparse_moe.experts.{e}.w1 / w2 / w3.
//   qwen_moe       Qwen2-MoE / Qwen3-MoE (extra.moe_layout = 1, or a shared
//                  expert): mlp.gate, mlp.experts.{e}.{gate,up,down}_proj,
//                  mlp.shared_expert.*, mlp.shared_expert_gate (Qwen2-MoE);
//                  self_attn.{q,k}_norm with extra.qk_norm (Qwen3).
//   gemma3         Gemma 3 text (extra.gemma3): the decoder's tensors with
//                  four norms per layer -- input_layernorm, post_attention_layernorm
//                  (the attention's output norm), pre_feedforward_layernorm (the
//                  MLP's input norm), post_feedforward_layernorm -- and q/k norms.
//   clip_vision    CLIPVisionModel under "vision_model." (clip and
//                  clip_vision_model checkpoints).
//   siglip_vision  SiglipVisionModel under "vision_model." (siglip and
//                  siglip_vision_model checkpoints); head.* with
//                  extra.attn_pool_head (vision_use_head).
//   qwen2_vl_vision  Qwen2-VL's vision tower under "visual.".
//   qwen2_5_vl_vision  Qwen2.5-VL's vision tower under "visual." (RMSNorm
//                  norm1 / norm2 / merger.ln_q weights, mlp.{gate,up,down}_proj).
//   whisper_encoder  WhisperEncoder under "model.encoder.".
//   llava_projector  LLaVA's multi_modal_projector (linear_1, GELU, linear_2).
//   builtin_vit    Maestro's own ViT: no published layout, nothing to load.
// A checkpoint may hold more than the model a section builds (a CLIP file
// has the text tower, a Qwen2-VL file has the LLM and the vision tower):
// tensors outside the layout's own prefixes belong to another section and are
// passed over; a tensor under an own prefix that the table does not name is
// unexpected (a wrong desc, a different architecture).
//
// May call: base, plan. Thread safety: pure functions over immutable tables.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/model_desc.h"
#include "plan/plan.h"

namespace maestro::hf {

enum class WeightLayout {
  kDecoder,
  kMixtral,
  kQwenMoe,
  kClipVision,
  kQwen2VlVision,
  kWhisperEncoder,
  kLlavaProjector,
  kGemma3,
  kBuiltinVit,  // no published layout
  kSiglipVision,
  kQwen25VlVision,
};
const char* WeightLayoutName(WeightLayout layout);  // "decoder", "clip_vision", ...

// ModelDesc::extra["moe_layout"]: the HF names of a MoE decoder's tensors
// (compiler/model.cc writes the same numbers).
inline constexpr const char* kMoeLayoutKey = "moe_layout";
inline constexpr int kMoeLayoutMixtral = 0;
inline constexpr int kMoeLayoutQwen = 1;

// Which ViT a desc is (the weight layout follows it): plan/model_desc.h
// VitLayout and its kVitLayout* values.
// The weight layout of any desc (decoder: kDecoder when dense; a MoE one is
// kQwenMoe when the import said so (extra.moe_layout) or it has what only
// Qwen-MoE has -- a shared expert, dense layers, q/k norms, q/k/v biases,
// unnormalized top-k weights -- else kMixtral).
WeightLayout WeightLayoutOf(const plan::ModelDesc& desc);

// One tensor of a model, as named on both sides.
struct WeightName {
  std::string hf_name;         // "model.layers.3.self_attn.q_proj.weight"
  std::string maestro_name;    // "blocks.3.attn.q_proj.weight"
  std::vector<int64_t> shape;  // the full (un-sharded) shape
  int tp_dim = -1;             // the dim TP splits in equal contiguous slices; -1: replicated
  int tp_parts = 1;            // blocks along tp_dim each split so (3: a fused qkv's q, k, v rows)
};

// A layout's table expanded for one desc, in the order the HF modules
// declare the tensors (the order ExportHfTensors writes them).
struct WeightNames {
  WeightLayout layout = WeightLayout::kDecoder;
  std::vector<WeightName> weights;
  // Prefixes of the tensors this model owns in a checkpoint file.
  std::vector<std::string> own_prefixes;
  // Names under an own prefix that published files carry but that are no
  // parameter here (persistent position_ids buffers of older CLIP files; a
  // tied lm_head.weight some writers keep): passed over on load.
  std::vector<std::string> passed_over;

  // Index into `weights` by either name; nullptr when absent.
  const WeightName* ByHfName(const std::string& hf_name) const;
  const WeightName* ByMaestroName(const std::string& maestro_name) const;
  // Whether `hf_name` lies under one of own_prefixes.
  bool Owns(const std::string& hf_name) const;
  bool PassedOver(const std::string& hf_name) const;

  std::map<std::string, size_t> by_hf, by_maestro;  // filled by ExpandWeightNames
};

// The table of desc's layout expanded over its layers / experts with the
// shapes desc implies. InvalidArgument for a desc with no published layout
// (the built-in ViT, HF ViTModel) or one the table cannot describe.
StatusOr<WeightNames> ExpandWeightNames(const plan::ModelDesc& desc);

// A rule of a table with its placeholders, for docs and tests: "{i}" is the
// layer, "{e}" the expert.
struct WeightNameRule {
  std::string hf_pattern;       // "model.layers.{i}.self_attn.q_proj.weight"
  std::string maestro_pattern;  // "blocks.{i}.attn.q_proj.weight"
  std::string shape;            // "(H*D, C)"
  std::string when;             // "" or the condition, e.g. "qkv_bias"
  int tp_dim = -1;
  int tp_parts = 1;
};
std::vector<WeightNameRule> WeightNameRules(WeightLayout layout);

// The reverse direction on patterns: the HF name of a runtime parameter
// name, or of HF name -> runtime name, without a desc (layer and expert
// indices carried over). NotFound when no rule matches.
StatusOr<std::string> HfNameOf(WeightLayout layout, const std::string& maestro_name);
StatusOr<std::string> MaestroNameOf(WeightLayout layout, const std::string& hf_name);

}  // namespace maestro::hf
