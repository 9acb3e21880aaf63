// SPDX-License-Identifier: Apache-2.0
// compiler/model.h's Hugging Face importers (ModelFromHfConfig and
// ModelFromHfConfigFile): a config.json's model_type and keys read into a
// ModelDesc, with transformers' defaults, every number bounded
// (compiler/model_bounds.h) before it is used, and what the runtime does not
// build refused by its key.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "base/checks.h"
#include "base/read_file.h"
#include "compiler/model.h"
#include "compiler/model_bounds.h"
#include "plan/model_desc.h"
#include "plan/mrope.h"
#include "plan/rope_scaling.h"

namespace maestro::compiler {

using plan::ModelDesc;
using plan::ModelKind;

// ---- Hugging Face config.json ----------------------------------------------

namespace {

class HfReader {
 public:
  HfReader(const nlohmann::json& j, std::string origin) : j_(j), origin_(std::move(origin)) {}

  StatusOr<int64_t> Int(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!j_.contains(key) || j_.at(key).is_null()) {
      if (fallback) return *fallback;
      return Status::InvalidArgument(fmt::format("{}: key '{}' is missing", origin_, key));
    }
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number_integer()) {
      return Status::InvalidArgument(fmt::format("{}: key '{}' must be an integer, got {}", origin_, key, v.dump()));
    }
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      // get<int64_t> would wrap it to a negative number
      return Status::InvalidArgument(fmt::format("{}: key '{}' = {} is out of range", origin_, key, v.dump()));
    }
    return v.get<int64_t>();
  }
  bool Bool(const char* key, bool fallback) const {
    return j_.contains(key) && j_.at(key).is_boolean() ? j_.at(key).get<bool>() : fallback;
  }
  StatusOr<double> Double(const char* key, double fallback) const {
    if (!j_.contains(key) || j_.at(key).is_null()) return fallback;
    const nlohmann::json& v = j_.at(key);
    if (!v.is_number()) {
      return Status::InvalidArgument(fmt::format("{}: key '{}' must be a number, got {}", origin_, key, v.dump()));
    }
    return v.get<double>();
  }
  std::string String(const char* key, const std::string& fallback) const {
    return j_.contains(key) && j_.at(key).is_string() ? j_.at(key).get<std::string>() : fallback;
  }
  // Whether the key is there with a non-null value.
  bool Has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

 private:
  const nlohmann::json& j_;
  std::string origin_;
};

// The config's rope_scaling object (absent or null: none) as the
// extra.rope_scaling_* keys (plan/model_desc.h). Its type is "rope_type" or
// the legacy "type"; what the type needs and HF's defaults are read here,
// what it may be is ValidateModelDesc's (dynamic is imported to be refused
// by name). YaRN: original_max_position_embeddings defaults to the config's
// max_position_embeddings, factor (when absent) to their ratio, as
// transformers >= 4.57 standardizes them.
Status ImportRopeScaling(const nlohmann::json& j, const std::string& origin, int64_t max_positions, ModelDesc& d) {
  if (!j.contains("rope_scaling") || j.at("rope_scaling").is_null()) return Status::Ok();
  const nlohmann::json& o = j.at("rope_scaling");
  if (!o.is_object()) {
    return Status::InvalidArgument(
        fmt::format("{}: key 'rope_scaling' must be an object (or null), got {}", origin, o.dump()));
  }
  const char* type_key = o.contains("rope_type") ? "rope_type" : "type";
  if (!o.contains(type_key) || !o.at(type_key).is_string()) {
    return Status::InvalidArgument(fmt::format(
        "{}: rope_scaling needs a string 'rope_type' (or the legacy 'type'): default, linear, llama3 or yarn; got {}",
        origin, o.dump()));
  }
  const std::string name = o.at(type_key).get<std::string>();
  const std::optional<plan::RopeType> type = plan::RopeTypeOfName(name);
  if (!type) {
    return Status::InvalidArgument(fmt::format(
        "{}: rope_scaling.{} '{}' is not implemented: Maestro trains rope_type default, linear, llama3 and yarn "
        "(change the config, or describe the model by shape in the spec)",
        origin, type_key, name));
  }
  if (*type == plan::RopeType::kDefault) return Status::Ok();
  HfReader r(o, origin + ": rope_scaling");
  d.extra[plan::kRopeScalingTypeKey] = static_cast<double>(static_cast<int>(*type));
  const bool yarn = *type == plan::RopeType::kYarn;
  // Required (HF raises KeyError without them) unless a fallback is given.
  auto number = [&](const char* key, const char* extra_key, std::optional<double> fallback) -> Status {
    if (!r.Has(key) && !fallback) {
      return Status::InvalidArgument(
          fmt::format("{}: rope_scaling of rope_type '{}' needs the key '{}'", origin, name, key));
    }
    MAESTRO_ASSIGN_OR_RETURN(d.extra[extra_key], r.Double(key, fallback.value_or(0.0)));
    return Status::Ok();
  };
  std::optional<double> original;
  if (yarn && max_positions > 0) original = static_cast<double>(max_positions);
  if (*type == plan::RopeType::kLlama3 || yarn) {
    MAESTRO_RETURN_IF_ERROR(
        number("original_max_position_embeddings", plan::kRopeScalingOriginalMaxPositionsKey, original));
  }
  std::optional<double> implied_factor;
  const double stated_original = ExtraValue(d, plan::kRopeScalingOriginalMaxPositionsKey, 0);
  if (yarn && max_positions > 0 && stated_original > 0) implied_factor = max_positions / stated_original;
  MAESTRO_RETURN_IF_ERROR(number("factor", plan::kRopeScalingFactorKey, implied_factor));
  if (*type == plan::RopeType::kLlama3) {
    MAESTRO_RETURN_IF_ERROR(number("low_freq_factor", plan::kRopeScalingLowFreqFactorKey, std::nullopt));
    MAESTRO_RETURN_IF_ERROR(number("high_freq_factor", plan::kRopeScalingHighFreqFactorKey, std::nullopt));
  }
  if (yarn) {
    // HF reads beta_fast / beta_slow with `or`: null or 0 is the default.
    MAESTRO_RETURN_IF_ERROR(number("beta_fast", plan::kRopeScalingBetaFastKey, 32.0));
    MAESTRO_RETURN_IF_ERROR(number("beta_slow", plan::kRopeScalingBetaSlowKey, 1.0));
    if (d.extra[plan::kRopeScalingBetaFastKey] == 0) d.extra[plan::kRopeScalingBetaFastKey] = 32.0;
    if (d.extra[plan::kRopeScalingBetaSlowKey] == 0) d.extra[plan::kRopeScalingBetaSlowKey] = 1.0;
    for (const auto& [key, extra_key] : {std::pair{"attention_factor", plan::kRopeScalingAttentionFactorKey},
                                         {"mscale", plan::kRopeScalingMscaleKey},
                                         {"mscale_all_dim", plan::kRopeScalingMscaleAllDimKey}}) {
      if (r.Has(key)) MAESTRO_RETURN_IF_ERROR(number(key, extra_key, 0.0));
    }
    if (r.Has("truncate") && !o.at("truncate").is_boolean()) {
      return Status::InvalidArgument(
          fmt::format("{}: rope_scaling.truncate must be true or false, got {}", origin, o.at("truncate").dump()));
    }
    d.extra[plan::kRopeScalingTruncateKey] = r.Bool("truncate", true) ? 1 : 0;
  }
  return Status::Ok();
}

StatusOr<ModelDesc> DecoderFromHf(const nlohmann::json& j, const std::string& origin, const std::string& type) {
  HfReader r(j, origin);
  ModelDesc d;
  d.kind = ModelKind::kDecoder;
  MAESTRO_ASSIGN_OR_RETURN(d.hidden, r.Int("hidden_size"));
  MAESTRO_ASSIGN_OR_RETURN(d.layers, r.Int("num_hidden_layers"));
  MAESTRO_ASSIGN_OR_RETURN(d.heads, r.Int("num_attention_heads"));
  MAESTRO_ASSIGN_OR_RETURN(d.kv_heads, r.Int("num_key_value_heads", d.heads));
  // transformers' Qwen3Config defaults head_dim to 128, not hidden / heads.
  MAESTRO_ASSIGN_OR_RETURN(d.head_dim, r.Int("head_dim", type == "qwen3" ? 128 : 0));
  MAESTRO_ASSIGN_OR_RETURN(d.vocab, r.Int("vocab_size"));
  d.tie_embeddings = r.Bool("tie_word_embeddings", false);
  int64_t ffn = 0;
  MAESTRO_ASSIGN_OR_RETURN(ffn, r.Int("intermediate_size"));
  const bool qwen_moe = type == "qwen2_moe" || type == "qwen3_moe";
  if (type == "mixtral") {
    MAESTRO_ASSIGN_OR_RETURN(d.experts, r.Int("num_local_experts", 8));
    MAESTRO_ASSIGN_OR_RETURN(d.experts_per_token, r.Int("num_experts_per_tok", 2));
    d.moe_ffn_hidden = ffn;
  } else if (qwen_moe) {
    // Defaults are those of transformers' Qwen2MoeConfig / Qwen3MoeConfig.
    const bool qwen2 = type == "qwen2_moe";
    MAESTRO_ASSIGN_OR_RETURN(d.experts, r.Int("num_experts", qwen2 ? 60 : 128));
    MAESTRO_ASSIGN_OR_RETURN(d.experts_per_token, r.Int("num_experts_per_tok", qwen2 ? 4 : 8));
    MAESTRO_ASSIGN_OR_RETURN(d.moe_ffn_hidden, r.Int("moe_intermediate_size", qwen2 ? 1408 : 768));
    // Dense layers between MoE layers (transformers' Qwen2MoeDecoderLayer:
    // layer i is sparse when (i + 1) % decoder_sparse_step == 0 and i is not
    // in mlp_only_layers), a Llama MLP of intermediate_size each
    // (plan::IsMoeLayer reads them back).
    int64_t sparse_step = 1;
    MAESTRO_ASSIGN_OR_RETURN(sparse_step, r.Int("decoder_sparse_step", 1));
    if (sparse_step < 1) {
      return Status::InvalidArgument(fmt::format(
          "{}: decoder_sparse_step must be >= 1, got {} (1: every layer a MoE layer)", origin, sparse_step));
    }
    if (sparse_step != 1) d.extra[plan::kDecoderSparseStepKey] = static_cast<double>(sparse_step);
    if (j.contains("mlp_only_layers") && !j.at("mlp_only_layers").is_null()) {
      const auto& dense = j.at("mlp_only_layers");
      if (!dense.is_array()) {
        return Status::InvalidArgument(
            fmt::format("{}: mlp_only_layers must be a list of layer indices, got {}", origin, dense.dump()));
      }
      for (const auto& layer : dense) {
        if (!layer.is_number_integer() || layer.get<int64_t>() < 0 || layer.get<int64_t>() >= d.layers) {
          return Status::InvalidArgument(
              fmt::format("{}: mlp_only_layers holds {}, not a layer index in [0, {}) (num_hidden_layers)", origin,
                          layer.dump(), d.layers));
        }
        d.extra[plan::kMlpOnlyLayerKeyPrefix + std::to_string(layer.get<int64_t>())] = 1;
      }
    }
    if (plan::MoeLayerCount(d) < d.layers) d.ffn_hidden = ffn;  // the dense layers' width
    if (qwen2) {
      int64_t shared = 0;
      MAESTRO_ASSIGN_OR_RETURN(shared, r.Int("shared_expert_intermediate_size", 5632));
      if (shared > 0) d.extra["shared_expert_ffn_hidden"] = static_cast<double>(shared);
    } else {
      d.extra["qk_norm"] = 1;  // Qwen3's q_norm / k_norm
    }
    d.extra["norm_topk_prob"] = r.Bool("norm_topk_prob", false) ? 1 : 0;
    d.extra["moe_layout"] = 1;  // hf/name_map.h's kMoeLayoutQwen (hf is not a compiler dependency)
  } else {
    d.ffn_hidden = ffn;
    if (type == "qwen3") d.extra["qk_norm"] = 1;  // Qwen3's q_norm / k_norm, dense as in its MoE
  }
  if (d.experts > 0) {
    // The load-balancing loss's weight (transformers' default 0.001); the
    // runtime adds it to the sink's loss (docs/moe.md).
    MAESTRO_ASSIGN_OR_RETURN(d.extra["router_aux_loss_coef"], r.Double("router_aux_loss_coef", 0.001));
  }
  const bool attention_bias = r.Bool("attention_bias", false);
  if (type == "qwen2_moe") {
    if (r.Bool("qkv_bias", true)) d.extra["qkv_bias"] = 1;  // Qwen2MoeAttention: q/k/v biases
  } else if (type == "qwen2") {
    d.extra["qkv_bias"] = 1;
  } else if (attention_bias) {
    d.extra["qkv_bias"] = 1;
    d.extra["attn_out_bias"] = 1;
  }
  if (r.Bool("mlp_bias", false)) d.extra["mlp_bias"] = 1;
  int64_t max_pos = 0;
  MAESTRO_ASSIGN_OR_RETURN(max_pos, r.Int("max_position_embeddings", 0));
  if (max_pos > 0) d.extra["max_position_embeddings"] = static_cast<double>(max_pos);
  // What the runtime's decoder computes with (plan/model_desc.h);
  // the defaults are those of transformers' LlamaConfig / MistralConfig /
  // Qwen2Config (rms_norm_eps 1e-6) and MixtralConfig (1e-5).
  MAESTRO_ASSIGN_OR_RETURN(d.extra["rope_theta"], r.Double("rope_theta", 10000.0));
  MAESTRO_ASSIGN_OR_RETURN(d.extra["rms_norm_eps"], r.Double("rms_norm_eps", type == "mixtral" ? 1e-5 : 1e-6));
  // Mistral's window (null in later Mistral configs); Qwen2 only with use_sliding_window.
  const bool window_on = type == "qwen2" || type == "qwen3" || qwen_moe ? r.Bool("use_sliding_window", false) : true;
  int64_t window = 0;
  MAESTRO_ASSIGN_OR_RETURN(window, r.Int("sliding_window", 0));
  if (window_on && window > 0) d.extra["sliding_window"] = static_cast<double>(window);
  // rope_scaling (Llama 3.1's "llama3", Qwen2.5's YaRN, ...) changes every
  // position's angles (plan/rope_scaling.h).
  MAESTRO_RETURN_IF_ERROR(ImportRopeScaling(j, origin, max_pos, d));
  return d;
}

// Gemma 3 text (transformers' Gemma3TextConfig, model_type gemma3_text): read
// as a decoder, then Gemma's defaults (tied, head_dim 256, rope_theta 1e6,
// window 4096) and keys (plan/model_desc.h kGemma3Key): q/k norms, the local
// RoPE base, query_pre_attn_scalar and which layers slide (layer_types, else
// sliding_window_pattern). What the runtime does not compute is refused by
// its key.
StatusOr<ModelDesc> Gemma3TextFromHf(const nlohmann::json& j, const std::string& origin) {
  HfReader r(j, origin);
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (r.Has(key)) {
      return Status::InvalidArgument(fmt::format(
          "{}: {} = {} is not supported: Maestro's decoder does not soft-cap logits (Gemma 3's published configs set "
          "it to null; Gemma 2's tanh capping is not built)",
          origin, key, j.at(key).dump()));
    }
  }
  if (r.Bool("use_bidirectional_attention", false)) {
    return Status::InvalidArgument(origin +
                                   ": use_bidirectional_attention = true is not supported (the decoder is causal)");
  }
  if (const std::string act = r.String("hidden_activation", "gelu_pytorch_tanh"); act != "gelu_pytorch_tanh") {
    return Status::InvalidArgument(fmt::format(
        "{}: hidden_activation '{}' is not supported; Gemma 3's MLP is built with gelu_pytorch_tanh", origin, act));
  }
  if (r.Bool("attention_bias", false)) {
    return Status::InvalidArgument(origin + ": attention_bias = true is not supported for gemma3_text (no biases)");
  }
  MAESTRO_ASSIGN_OR_RETURN(ModelDesc d, DecoderFromHf(j, origin, "gemma3_text"));
  d.tie_embeddings = r.Bool("tie_word_embeddings", true);
  MAESTRO_ASSIGN_OR_RETURN(d.head_dim, r.Int("head_dim", 256));
  MAESTRO_ASSIGN_OR_RETURN(d.extra[plan::kRopeThetaKey], r.Double("rope_theta", 1e6));
  MAESTRO_ASSIGN_OR_RETURN(d.extra[plan::kRopeLocalBaseFreqKey], r.Double("rope_local_base_freq", 10000.0));
  MAESTRO_ASSIGN_OR_RETURN(d.extra[plan::kQueryPreAttnScalarKey], r.Double("query_pre_attn_scalar", 256.0));
  d.extra[plan::kGemma3Key] = 1;
  d.extra[plan::kQkNormKey] = 1;
  int64_t window = 0;
  MAESTRO_ASSIGN_OR_RETURN(window, r.Int("sliding_window", 4096));
  d.extra.erase(plan::kSlidingWindowKey);
  if (window > 0) d.extra[plan::kSlidingWindowKey] = static_cast<double>(window);
  if (j.contains("layer_types") && !j.at("layer_types").is_null()) {
    const nlohmann::json& types = j.at("layer_types");
    if (!types.is_array() || static_cast<int64_t>(types.size()) != d.layers) {
      return Status::InvalidArgument(
          fmt::format("{}: layer_types must be a list of num_hidden_layers = {} entries", origin, d.layers));
    }
    for (int64_t i = 0; i < d.layers; ++i) {
      const nlohmann::json& t = types.at(static_cast<size_t>(i));
      const std::string type = t.is_string() ? t.get<std::string>() : t.dump();
      if (type == "full_attention") {
        d.extra[plan::kFullAttentionLayerKeyPrefix + std::to_string(i)] = 1;
      } else if (type != "sliding_attention") {
        return Status::InvalidArgument(
            fmt::format("{}: layer_types[{}] = {}: each entry must be \"sliding_attention\" or \"full_attention\"",
                        origin, i, t.dump()));
      }
    }
  } else {
    int64_t pattern = 6;
    MAESTRO_ASSIGN_OR_RETURN(pattern, r.Int("sliding_window_pattern", 6));
    MAESTRO_RETURN_IF_ERROR(RequireRange(nullptr, origin, "sliding_window_pattern", pattern, 1, kMaxLayers));
    d.extra[plan::kSlidingWindowPatternKey] = static_cast<double>(pattern);
  }
  return d;
}

// The towers of HF ViTModel, CLIPVisionModel and SiglipVisionModel (their
// configs read the same keys). SigLIP's MLP is built with gelu_pytorch_tanh only.
enum class VitFlavor { kVit, kClip, kSiglip };
StatusOr<ModelDesc> VitFromHf(const nlohmann::json& j, const std::string& origin, VitFlavor flavor) {
  HfReader r(j, origin);
  ModelDesc d;
  d.kind = ModelKind::kVit;
  const bool clip = flavor == VitFlavor::kClip, siglip = flavor == VitFlavor::kSiglip;
  // Defaults are those of transformers' ViTConfig / CLIPVisionConfig / SiglipVisionConfig.
  MAESTRO_ASSIGN_OR_RETURN(d.hidden, r.Int("hidden_size", 768));
  MAESTRO_ASSIGN_OR_RETURN(d.layers, r.Int("num_hidden_layers", 12));
  MAESTRO_ASSIGN_OR_RETURN(d.heads, r.Int("num_attention_heads", 12));
  MAESTRO_ASSIGN_OR_RETURN(d.ffn_hidden, r.Int("intermediate_size", 3072));
  MAESTRO_ASSIGN_OR_RETURN(d.image_size, r.Int("image_size", 224));
  MAESTRO_ASSIGN_OR_RETURN(d.patch_size, r.Int("patch_size", clip ? 32 : 16));
  MAESTRO_ASSIGN_OR_RETURN(d.channels, r.Int("num_channels", 3));
  d.kv_heads = d.heads;
  // The layouts are plan/model_desc.h's kVitLayout*.
  if (clip) {
    d.extra["vit_layout"] = 1;  // CLIPVisionModel
    d.extra["cls_token"] = 1;
    d.extra["patch_bias"] = 0;
    d.extra["pre_norm"] = 1;
    d.extra["pooler"] = 0;
    d.extra["quick_gelu"] = r.String("hidden_act", "quick_gelu") == "quick_gelu" ? 1 : 0;
  } else if (siglip) {
    if (const std::string act = r.String("hidden_act", "gelu_pytorch_tanh"); act != "gelu_pytorch_tanh") {
      return Status::InvalidArgument(fmt::format(
          "{}: hidden_act '{}' is not supported; SigLIP's MLP is built with gelu_pytorch_tanh", origin, act));
    }
    d.extra["vit_layout"] = plan::kVitLayoutSiglip;
    for (const char* off : {"cls_token", "pre_norm", "pooler", "quick_gelu"}) d.extra[off] = 0;
    d.extra[plan::kAttnPoolHeadKey] = r.Bool("vision_use_head", true) ? 1 : 0;
  } else {
    d.extra["vit_layout"] = 3;  // HF ViTModel: planned, not built by the runtime
    d.extra["qkv_bias"] = r.Bool("qkv_bias", true) ? 1 : 0;
    d.extra["pooler"] = 1;  // ViTModel(add_pooling_layer=True), as from_pretrained builds it
  }
  MAESTRO_ASSIGN_OR_RETURN(d.extra["layer_norm_eps"], r.Double("layer_norm_eps", clip ? 1e-5 : siglip ? 1e-6 : 1e-12));
  return d;
}

// Qwen2-VL's vision tower (transformers' Qwen2VisionTransformerPretrainedModel)
// from a qwen2_vl config's vision_config. Qwen2-VL takes any resolution; a
// section takes one: image_size when the vision_config has it, else 448.
Status QwenVisionCommonFromHf(const HfReader& r, const std::string& origin, ModelDesc& d);

StatusOr<ModelDesc> Qwen2VlVisionFromHf(const nlohmann::json& j, const std::string& origin) {
  HfReader r(j, origin);
  ModelDesc d;
  d.kind = ModelKind::kVit;
  // Defaults are those of transformers' Qwen2VLVisionConfig.
  MAESTRO_ASSIGN_OR_RETURN(d.hidden, r.Int("embed_dim", 1280));
  MAESTRO_ASSIGN_OR_RETURN(d.layers, r.Int("depth", 32));
  MAESTRO_ASSIGN_OR_RETURN(d.heads, r.Int("num_heads", 16));
  double mlp_ratio = 4;
  MAESTRO_ASSIGN_OR_RETURN(mlp_ratio, r.Double("mlp_ratio", 4.0));
  // The products below are bounded before they are computed (CheckModelShape
  // sees only their results).
  MAESTRO_RETURN_IF_ERROR(RequireRange(nullptr, origin, "embed_dim", d.hidden, 1, kMaxHidden));
  const double ffn = static_cast<double>(d.hidden) * mlp_ratio;
  if (!(ffn >= 1 && ffn <= static_cast<double>(kMaxFfn))) {
    return Status::InvalidArgument(
        fmt::format("{}: embed_dim * mlp_ratio = {} * {} is out of range; it must be in "
                    "[1, {}]",
                    origin, d.hidden, mlp_ratio, kMaxFfn));
  }
  d.ffn_hidden = static_cast<int64_t>(ffn);  // int(embed_dim * mlp_ratio)
  MAESTRO_ASSIGN_OR_RETURN(d.out_dim, r.Int("hidden_size", 3584));
  MAESTRO_RETURN_IF_ERROR(QwenVisionCommonFromHf(r, origin, d));
  d.extra["vit_layout"] = 2;  // hf/name_map.h kVitLayoutQwen2Vl
  d.extra["layer_norm_eps"] = 1e-6;
  d.extra["quick_gelu"] = r.String("hidden_act", "quick_gelu") == "quick_gelu" ? 1 : 0;
  return d;
}

// Qwen2.5-VL's vision tower (transformers' Qwen2_5_VLVisionConfig, its
// defaults): depth, hidden_size, intermediate_size (the SwiGLU MLP's),
// num_heads, out_hidden_size (the merger's output), window_size (pixels)
// and fullatt_block_indexes (extra["fullatt_block_indexes.<i>"] = 1 each,
// plan/model_desc.h), hidden_act silu (the only one the runtime builds).
StatusOr<ModelDesc> Qwen25VlVisionFromHf(const nlohmann::json& j, const std::string& origin) {
  HfReader r(j, origin);
  ModelDesc d;
  d.kind = ModelKind::kVit;
  const std::pair<int64_t*, std::pair<const char*, int64_t>> sizes[] = {
      {&d.hidden, {"hidden_size", 3584}},      {&d.layers, {"depth", 32}},
      {&d.heads, {"num_heads", 16}},           {&d.ffn_hidden, {"intermediate_size", 3420}},
      {&d.out_dim, {"out_hidden_size", 3584}},
  };
  for (const auto& [field, key] : sizes) {
    MAESTRO_ASSIGN_OR_RETURN(*field, r.Int(key.first, key.second));
  }
  MAESTRO_RETURN_IF_ERROR(RequireRange(nullptr, origin, "depth", d.layers, 1, kMaxLayers));
  MAESTRO_RETURN_IF_ERROR(QwenVisionCommonFromHf(r, origin, d));
  const std::string act = r.String("hidden_act", "silu");
  if (act != "silu") {
    return Status::InvalidArgument(
        fmt::format("{}: hidden_act '{}': the Qwen2.5-VL tower's SwiGLU MLP is built with silu only", origin, act));
  }
  int64_t window = 112;
  MAESTRO_ASSIGN_OR_RETURN(window, r.Int("window_size", 112));
  const auto unit = static_cast<int64_t>(d.extra.at("spatial_merge")) * d.patch_size;
  if (window < unit || window > 1 << 20) {
    return Status::InvalidArgument(
        fmt::format("{}: window_size = {} px must be at least spatial_merge_size * patch_size = {} (one merged unit)",
                    origin, window, unit));
  }
  d.extra["vit_layout"] = 5;  // plan::kVitLayoutQwen25Vl
  d.extra["window_size"] = static_cast<double>(window);
  d.extra["quick_gelu"] = 0;
  if (j.contains("fullatt_block_indexes") && !j.at("fullatt_block_indexes").is_null()) {
    const nlohmann::json& full = j.at("fullatt_block_indexes");
    if (!full.is_array()) return Status::InvalidArgument(origin + ": fullatt_block_indexes must be a list");
    for (const nlohmann::json& index : full) {
      if (!index.is_number_integer() || index.get<int64_t>() < 0 || index.get<int64_t>() >= d.layers) {
        return Status::InvalidArgument(
            fmt::format("{}: fullatt_block_indexes holds {}: each must be a block index in [0, depth = {})", origin,
                        index.dump(), d.layers));
      }
      d.extra["fullatt_block_indexes." + std::to_string(index.get<int64_t>())] = 1;
    }
  } else {
    for (int64_t i : {7, 15, 23, 31}) {  // transformers' default (depth 32)
      if (i < d.layers) d.extra["fullatt_block_indexes." + std::to_string(i)] = 1;
    }
  }
  return d;
}

// What the Qwen vision towers' configs share: patch_size, in_chans /
// in_channels, spatial_merge_size, temporal_patch_size, image_size (not in
// HF's config: the images a section trains on) and the layout flags.
Status QwenVisionCommonFromHf(const HfReader& r, const std::string& origin, ModelDesc& d) {
  MAESTRO_ASSIGN_OR_RETURN(d.patch_size, r.Int("patch_size", 14));
  int64_t channels = 3;
  MAESTRO_ASSIGN_OR_RETURN(channels, r.Int("in_chans", 3));  // older configs
  MAESTRO_ASSIGN_OR_RETURN(d.channels, r.Int("in_channels", channels));
  int64_t merge = 2, temporal = 2;
  MAESTRO_ASSIGN_OR_RETURN(merge, r.Int("spatial_merge_size", 2));
  MAESTRO_ASSIGN_OR_RETURN(temporal, r.Int("temporal_patch_size", 2));
  MAESTRO_ASSIGN_OR_RETURN(d.image_size, r.Int("image_size", 448));
  MAESTRO_RETURN_IF_ERROR(RequireRange(nullptr, origin, "spatial_merge_size", merge, 1, 8));
  d.kv_heads = d.heads;
  d.extra["temporal_patch"] = static_cast<double>(temporal);
  d.extra["spatial_merge"] = static_cast<double>(merge);
  d.extra["merger_hidden"] = static_cast<double>(merge * merge * d.hidden);
  d.extra["cls_token"] = 0;
  d.extra["pos_embed"] = 0;  // 2-D rotary embeddings
  d.extra["patch_bias"] = 0;
  d.extra["final_norm"] = 0;  // the merger's ln_q is the last norm
  d.extra["pooler"] = 0;
  d.extra["qkv_bias"] = 1;
  return Status::Ok();
}

// The language model of a Qwen2-VL or Qwen2.5-VL config (transformers'
// Qwen2VLTextModel: a Qwen2 decoder with M-RoPE, plan/mrope.h): its keys at
// the top level (published configs) or under text_config (transformers >=
// 4.52), rope_scaling {"type": "mrope", "mrope_section": [t, h, w]} as the
// extra.mrope_section_* keys. Its tensors are named as Qwen2's
// (model.layers.*, lm_head), so the decoder's weight layout loads them.
StatusOr<ModelDesc> Qwen2VlTextFromHf(const nlohmann::json& j, const std::string& origin) {
  nlohmann::json text = j;
  if (j.contains("text_config") && j.at("text_config").is_object()) {
    for (const auto& [key, value] : j.at("text_config").items()) text[key] = value;
  }
  text.erase("text_config");
  text.erase("vision_config");
  if (!text.contains("rope_scaling") || !text.at("rope_scaling").is_object() ||
      !text.at("rope_scaling").contains("mrope_section")) {
    return Status::InvalidArgument(fmt::format(
        "{}: a Qwen2-VL language model needs rope_scaling.mrope_section ([t, h, w], e.g. [16, 24, 24])", origin));
  }
  const nlohmann::json scaling = text.at("rope_scaling");
  const nlohmann::json& section = scaling.at("mrope_section");
  if (!section.is_array() || section.size() != 3 ||
      !std::all_of(section.begin(), section.end(), [](const nlohmann::json& v) { return v.is_number_integer(); })) {
    return Status::InvalidArgument(
        fmt::format("{}: rope_scaling.mrope_section must be three integers [t, h, w], got {}", origin, section.dump()));
  }
  const HfReader scaling_reader(scaling, origin + ": rope_scaling");
  const std::string rope_type = scaling_reader.String("rope_type", scaling_reader.String("type", "default"));
  if (rope_type != "mrope" && rope_type != "default") {
    return Status::InvalidArgument(fmt::format(
        "{}: rope_scaling of type '{}' with mrope_section is not implemented (M-RoPE over the default frequencies "
        "only)",
        origin, rope_type));
  }
  text.erase("rope_scaling");  // the frequencies are the default ones; M-RoPE is the section split below
  MAESTRO_ASSIGN_OR_RETURN(ModelDesc d, DecoderFromHf(text, origin, "qwen2"));
  const char* keys[3] = {plan::kMropeSectionTKey, plan::kMropeSectionHKey, plan::kMropeSectionWKey};
  for (size_t i = 0; i < 3; ++i) {
    const int64_t v = section[i].get<int64_t>();
    MAESTRO_RETURN_IF_ERROR(RequireRange(nullptr, origin, "rope_scaling.mrope_section", v, 0, kMaxHidden));
    d.extra[keys[i]] = static_cast<double>(v);
  }
  if (scaling_reader.Bool("mrope_interleaved", false)) {
    d.extra[plan::kMropeInterleavedKey] = 1;
  }
  // Qwen2.5-VL scales a video's time row by vision_config.tokens_per_second
  // (transformers' Qwen2_5_VLVisionConfig default: 4).
  if (HfReader(j, origin).String("model_type", "") == "qwen2_5_vl") {
    int64_t tokens_per_second = 4;
    if (j.contains("vision_config") && j.at("vision_config").is_object()) {
      const HfReader vision(j.at("vision_config"), origin + " (vision_config)");
      MAESTRO_ASSIGN_OR_RETURN(tokens_per_second, vision.Int("tokens_per_second", 4));
    }
    MAESTRO_RETURN_IF_ERROR(
        RequireRange(nullptr, origin, "vision_config.tokens_per_second", tokens_per_second, 1, 1 << 20));
    d.extra[plan::kMropeTokensPerSecondKey] = static_cast<double>(tokens_per_second);
  }
  MAESTRO_RETURN_IF_ERROR(plan::CheckMrope(d, origin));
  return d;
}

StatusOr<ModelDesc> WhisperEncoderFromHf(const nlohmann::json& j, const std::string& origin) {
  HfReader r(j, origin);
  ModelDesc d;
  d.kind = ModelKind::kAudioEncoder;
  // Defaults are those of transformers' WhisperConfig.
  MAESTRO_ASSIGN_OR_RETURN(d.hidden, r.Int("d_model", 384));
  MAESTRO_ASSIGN_OR_RETURN(d.layers, r.Int("encoder_layers", 4));
  MAESTRO_ASSIGN_OR_RETURN(d.heads, r.Int("encoder_attention_heads", 6));
  MAESTRO_ASSIGN_OR_RETURN(d.ffn_hidden, r.Int("encoder_ffn_dim", 1536));
  MAESTRO_ASSIGN_OR_RETURN(d.mel_bins, r.Int("num_mel_bins", 80));
  int64_t positions = 0;
  MAESTRO_ASSIGN_OR_RETURN(positions, r.Int("max_source_positions", 1500));
  // audio_frames = 2 * positions: bounded before it is computed.
  MAESTRO_RETURN_IF_ERROR(RequireRange(nullptr, origin, "max_source_positions", positions, 1, kMaxFrames / 2));
  d.kv_heads = d.heads;
  d.audio_frames = 2 * positions;
  d.extra["max_source_positions"] = static_cast<double>(positions);
  return d;
}

}  // namespace

StatusOr<ModelDesc> ModelFromHfConfig(const std::string& json_text, const std::string& origin,
                                      const std::string& part) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  if (!j.is_object()) return Status::InvalidArgument(origin + ": a config.json must be a JSON object");
  if (!j.contains("model_type") || !j.at("model_type").is_string()) {
    return Status::InvalidArgument(origin + ": key 'model_type' is missing (is this a Hugging Face config.json?)");
  }
  const std::string type = j.at("model_type").get<std::string>();
  const bool vision_language = type == "qwen2_vl" || type == "qwen2_5_vl";
  if (!part.empty() && part != "text" && part != "vision") {
    return Status::InvalidArgument(
        fmt::format("{}: part '{}' is not one of text, vision (a vision-language config's two models)", origin, part));
  }
  if (!part.empty() && !vision_language) {
    return Status::InvalidArgument(fmt::format(
        "{}: part = '{}' chooses a model of a vision-language config (qwen2_vl, qwen2_5_vl); model_type '{}' holds "
        "one model: drop 'part'",
        origin, part, type));
  }
  StatusOr<ModelDesc> d = Status::InvalidArgument("unset");
  if (type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3" || type == "mixtral" ||
      type == "qwen2_moe" || type == "qwen3_moe") {
    d = DecoderFromHf(j, origin, type);
  } else if (type == "gemma3_text") {
    d = Gemma3TextFromHf(j, origin);
  } else if (type == "gemma3") {
    return Status::InvalidArgument(fmt::format(
        "{}: model_type 'gemma3' is Gemma 3's multimodal model (a SigLIP tower and the language model under "
        "text_config), which Maestro does not build; use the text model: a gemma3_text config.json (its text_config "
        "with \"model_type\": \"gemma3_text\", e.g. google/gemma-3-1b-pt's)",
        origin));
  } else if (type == "vit") {
    d = VitFromHf(j, origin, VitFlavor::kVit);
  } else if (type == "clip_vision_model") {
    d = VitFromHf(j, origin, VitFlavor::kClip);
  } else if (type == "clip") {
    if (!j.contains("vision_config") || !j.at("vision_config").is_object()) {
      return Status::InvalidArgument(origin + ": a clip config needs an object 'vision_config'");
    }
    d = VitFromHf(j.at("vision_config"), origin + " (vision_config)", VitFlavor::kClip);
  } else if (type == "siglip_vision_model") {
    d = VitFromHf(j, origin, VitFlavor::kSiglip);
  } else if (type == "siglip") {
    if (!j.contains("vision_config") || !j.at("vision_config").is_object()) {
      return Status::InvalidArgument(origin + ": a siglip config needs an object 'vision_config'");
    }
    d = VitFromHf(j.at("vision_config"), origin + " (vision_config)", VitFlavor::kSiglip);
  } else if (type == "whisper") {
    d = WhisperEncoderFromHf(j, origin);
  } else if (vision_language && part == "text") {
    d = Qwen2VlTextFromHf(j, origin);
  } else if (type == "qwen2_5_vl") {  // the vision tower: part "vision", or no part
    if (!j.contains("vision_config") || !j.at("vision_config").is_object()) {
      return Status::InvalidArgument(origin + ": a qwen2_5_vl config needs an object 'vision_config'");
    }
    d = Qwen25VlVisionFromHf(j.at("vision_config"), origin + " (vision_config)");
  } else if (type == "qwen2_vl") {
    if (!j.contains("vision_config") || !j.at("vision_config").is_object()) {
      return Status::InvalidArgument(origin + ": a qwen2_vl config needs an object 'vision_config'");
    }
    d = Qwen2VlVisionFromHf(j.at("vision_config"), origin + " (vision_config)");
  } else {
    return Status::InvalidArgument(fmt::format(
        "{}: model_type '{}' is not supported; supported: llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, "
        "gemma3_text, vit, clip, clip_vision_model, siglip, siglip_vision_model, whisper, qwen2_vl, qwen2_5_vl (or "
        "describe the model by shape in the spec)",
        origin, type));
  }
  if (!d.ok()) return d.status();
  d->source = origin;
  MAESTRO_RETURN_IF_ERROR(CheckModelShape(*d, origin));
  return d;
}

StatusOr<ModelDesc> ModelFromHfConfigFile(const std::string& path, const std::string& part) {
  MAESTRO_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxConfigBytes, "the Hugging Face config"));
  return ModelFromHfConfig(text, path, part);
}

}  // namespace maestro::compiler
