// SPDX-License-Identifier: Apache-2.0
// ModelDesc checks and defaults (no torch in this file).
#include "plan/model_desc.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>

namespace maestro::plan {
namespace {

double ExtraOr(const ModelDesc& desc, const char* key, double fallback) {
  auto it = desc.extra.find(key);
  return it == desc.extra.end() ? fallback : it->second;
}

// A number as people write it: 4, 0.5, 1e+06.
std::string Num(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

const char* VitLayoutName(int layout) {
  switch (layout) {
    case kVitLayoutBuiltin: return "built-in";
    case kVitLayoutClip: return "CLIP";
    case kVitLayoutQwen2Vl: return "Qwen2-VL";
    case kVitLayoutHfVit: return "HF ViTModel";
    case kVitLayoutSiglip: return "SigLIP";
    case kVitLayoutQwen25Vl: return "Qwen2.5-VL";
  }
  return "unknown";
}

// Collects the first failed requirement as an InvalidArgument.
class DescChecker {
 public:
  DescChecker(const ModelDesc& desc, const std::string& where) : desc_(desc), where_(where) {}

  // Requires `ok`; `what` says what the field must be, e.g. "heads > 0".
  void Require(bool ok, const std::string& what) {
    if (ok || !status_.ok()) return;
    status_ = Status::InvalidArgument(where_ + ": " + ModelKindName(desc_.kind) + " model needs " + what +
                                      " (fix the section's [model] in the spec, or the imported config.json)");
  }
  void Positive(int64_t value, const char* field) {
    Require(value > 0, std::string(field) + " > 0, got " + std::to_string(value));
  }
  void NonNegative(int64_t value, const char* field) {
    Require(value >= 0, std::string(field) + " >= 0, got " + std::to_string(value));
  }
  Status status() const { return status_; }

 private:
  const ModelDesc& desc_;
  std::string where_;
  Status status_;
};

// The pre-LN encoder blocks of the ViT and the audio encoder.
void CheckEncoderBlocks(const ModelDesc& d, DescChecker& c) {
  c.Positive(d.hidden, "hidden");
  c.Positive(d.layers, "layers");
  c.Positive(d.heads, "heads");
  c.Positive(d.ffn_hidden, "ffn_hidden");
  c.Require(d.heads <= 0 || d.hidden % d.heads == 0,
            "hidden divisible by heads (" + std::to_string(d.hidden) + " % " + std::to_string(d.heads) + " != 0)");
  c.Require(d.head_dim == 0 || d.head_dim * d.heads == d.hidden, "head_dim == 0 or head_dim * heads == hidden");
  c.Require(d.kv_heads == 0 || d.kv_heads == d.heads, "kv_heads == 0 or kv_heads == heads (encoders use plain MHA)");
  c.Require(d.experts == 0, "experts == 0 (encoders have no MoE)");
  c.Require(LayerNormEps(d) > 0, "extra.layer_norm_eps > 0");
}

// The structure flags the compiler counts parameters by (compiler/model.cc,
// with its defaults) must describe what the layout builds, or the planner
// would plan a model that never runs.
void CheckVitFlags(const ModelDesc& d, DescChecker& c) {
  const int layout = VitLayout(d);
  const std::string name = VitLayoutName(layout);
  c.Require((layout >= kVitLayoutBuiltin && layout <= kVitLayoutQwen2Vl) || layout == kVitLayoutSiglip ||
                layout == kVitLayoutQwen25Vl,
            "extra.vit_layout 0 (built-in), 1 (CLIP), 2 (Qwen2-VL), 4 (SigLIP) or 5 (Qwen2.5-VL); " + name +
                " is counted by the planner but not built by the runtime");
  struct Flag {
    const char* key;
    double compiler_default;
    double builtin, clip, qwen2_vl, siglip, qwen25_vl;  // what each layout builds; -1: any
  };
  static const Flag flags[] = {
      {"pos_embed", 1, 1, 1, 0, 1, 0},       {"patch_bias", 1, 1, 0, 0, 1, 0},
      {"pre_norm", 0, 0, 1, 0, 0, 0},        {"final_norm", 1, 1, 1, 0, 1, 0},
      {"pooler", 0, 0, 0, 0, 0, 0},          {"qkv_bias", 1, 1, 1, 1, 1, 1},
      {"cls_token", 1, 0, 1, 0, 0, 0},       {"temporal_patch", 1, 1, 1, -1, 1, -1},
      {kQuickGeluKey, 0, -1, -1, -1, 0, 0},  // SigLIP's MLP is gelu_tanh, Qwen2.5-VL's SwiGLU (silu)
      {kAttnPoolHeadKey, 0, 0, 0, 0, -1, 0},
  };
  for (const Flag& f : flags) {
    const double want = layout == kVitLayoutClip       ? f.clip
                        : layout == kVitLayoutQwen2Vl  ? f.qwen2_vl
                        : layout == kVitLayoutSiglip   ? f.siglip
                        : layout == kVitLayoutQwen25Vl ? f.qwen25_vl
                                                       : f.builtin;
    if (want < 0) continue;
    // The built-in ViT predates cls_token: absent means no class token there.
    const bool lenient = layout == kVitLayoutBuiltin && std::string(f.key) == "cls_token";
    const double got = lenient ? ExtraOr(d, f.key, 0) : ExtraOr(d, f.key, f.compiler_default);
    c.Require(got == want, "extra." + std::string(f.key) + " = " + std::to_string(static_cast<int>(want)) + " (the " +
                               name + " ViT is built that way), got " + std::to_string(static_cast<int>(got)));
  }
  const int64_t merge = SpatialMerge(d);
  if (layout == kVitLayoutClip || layout == kVitLayoutSiglip) {
    c.Require(merge == 0, "no extra.spatial_merge: the " + name + " tower has no patch merger");
  }
  if (IsQwenVisionLayout(layout)) {
    c.Require(merge >= 1, "extra.spatial_merge >= 1: the " + name + " tower ends in its PatchMerger");
    c.Require(MergerHidden(d) == merge * merge * d.hidden,
              "extra.merger_hidden = spatial_merge^2 * hidden (" + name + ")");
    c.Require(d.heads > 0 && (d.hidden / std::max<int64_t>(d.heads, 1)) % 4 == 0,
              "a head dim (hidden / heads) divisible by 4 for the 2-D rotary embedding");
    c.Require(ExtraOr(d, "temporal_patch", 1) >= 1, "extra.temporal_patch >= 1");
  }
  if (layout == kVitLayoutQwen25Vl) {
    c.Require(VitMergerWindow(d) >= 1,
              "extra.window_size >= spatial_merge * patch_size (a window of at least one "
              "merged unit a side), got " +
                  Num(ExtraOr(d, kVitWindowSizeKey, 0)));
  } else {
    c.Require(ExtraOr(d, kVitWindowSizeKey, 0) == 0, "no extra.window_size: only the Qwen2.5-VL tower has windows");
  }
  const std::string prefix = kFullAttBlockKeyPrefix;
  for (const auto& [key, value] : d.extra) {
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string index = key.substr(prefix.size());
    const bool digits = !index.empty() && index.size() < 10 &&
                        std::all_of(index.begin(), index.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
    c.Require(layout == kVitLayoutQwen25Vl,
              "no extra." + key + ": only the Qwen2.5-VL tower lists full-attention blocks");
    c.Require(digits && std::stoll(index) < d.layers && value == 1,
              "extra." + key + " = 1 with a block index in [0, layers = " + std::to_string(d.layers) +
                  ") (vision_config.fullatt_block_indexes)");
  }
}

// The rope scaling keys (plan/rope_scaling.h); each message names the extra
// key and the config.json field it comes from.
void CheckRopeScaling(const ModelDesc& d, DescChecker& c) {
  c.Require(ExtraOr(d, kLegacyRopeScalingKey, 0) == 0,
            "no extra.rope_scaling marker (a plan.json compiled before rope scaling was read: compile the spec "
            "again, which imports the config's rope_scaling as extra.rope_scaling_*)");
  const double code = ExtraOr(d, kRopeScalingTypeKey, 0);
  const bool known = code >= 0 && code < kRopeTypeCount && code == std::floor(code);
  c.Require(known, "extra.rope_scaling_type one of 0 (default), 1 (linear), 2 (llama3), 3 (yarn), got " + Num(code));
  if (!known) return;
  const RopeScaling s = RopeScalingOf(d);
  c.Require(s.type != RopeType::kDynamic,
            "a rope_scaling the runtime can train, not extra.rope_scaling_type 4 (rope_type \"dynamic\", dynamic "
            "NTK): it rescales the frequencies with the live sequence length, so a trained position's frequency "
            "would depend on the batch; train with linear, llama3 or yarn scaling, or none");
  if (s.type == RopeType::kDefault || s.type == RopeType::kDynamic) return;
  c.Require(s.factor >= 1, "extra.rope_scaling_factor >= 1 (rope_scaling.factor), got " + Num(s.factor));
  if (s.type == RopeType::kLinear) return;
  c.Require(s.original_max_position_embeddings > 0,
            "extra.rope_scaling_original_max_position_embeddings > 0 (rope_scaling.original_max_position_embeddings)");
  if (s.type == RopeType::kLlama3) {
    c.Require(s.low_freq_factor > 0, "extra.rope_scaling_low_freq_factor > 0 (rope_scaling.low_freq_factor)");
    c.Require(s.high_freq_factor > s.low_freq_factor,
              "extra.rope_scaling_high_freq_factor > extra.rope_scaling_low_freq_factor (rope_scaling."
              "high_freq_factor > low_freq_factor), got " +
                  Num(s.high_freq_factor) + " and " + Num(s.low_freq_factor));
    return;
  }
  c.Require(s.beta_fast > 0 && s.beta_slow > 0,
            "extra.rope_scaling_beta_fast > 0 and extra.rope_scaling_beta_slow > 0 (rope_scaling.beta_fast, "
            "beta_slow)");
  c.Require(s.attention_factor >= 0 && s.mscale >= 0 && s.mscale_all_dim >= 0,
            "extra.rope_scaling_attention_factor, _mscale and _mscale_all_dim >= 0 (rope_scaling.attention_factor, "
            "mscale, mscale_all_dim)");
}

}  // namespace

RopeScaling RopeScalingOf(const ModelDesc& desc) {
  RopeScaling s;
  const double code = ExtraOr(desc, kRopeScalingTypeKey, 0);
  const bool known = code >= 0 && code < kRopeTypeCount;  // false for NaN too
  s.type = known ? static_cast<RopeType>(static_cast<int>(code)) : RopeType::kDynamic;
  s.factor = ExtraOr(desc, kRopeScalingFactorKey, s.factor);
  s.low_freq_factor = ExtraOr(desc, kRopeScalingLowFreqFactorKey, s.low_freq_factor);
  s.high_freq_factor = ExtraOr(desc, kRopeScalingHighFreqFactorKey, s.high_freq_factor);
  s.original_max_position_embeddings =
      ExtraOr(desc, kRopeScalingOriginalMaxPositionsKey, s.original_max_position_embeddings);
  s.beta_fast = ExtraOr(desc, kRopeScalingBetaFastKey, s.beta_fast);
  s.beta_slow = ExtraOr(desc, kRopeScalingBetaSlowKey, s.beta_slow);
  s.attention_factor = ExtraOr(desc, kRopeScalingAttentionFactorKey, s.attention_factor);
  s.mscale = ExtraOr(desc, kRopeScalingMscaleKey, s.mscale);
  s.mscale_all_dim = ExtraOr(desc, kRopeScalingMscaleAllDimKey, s.mscale_all_dim);
  s.truncate = ExtraOr(desc, kRopeScalingTruncateKey, 1) != 0;
  return s;
}

double RopeTheta(const ModelDesc& desc) {
  return ExtraOr(desc, kRopeThetaKey, 10000.0);
}
double RmsNormEps(const ModelDesc& desc) {
  return ExtraOr(desc, kRmsNormEpsKey, 1e-5);
}
double LayerNormEps(const ModelDesc& desc) {
  const int layout = desc.kind == ModelKind::kVit ? VitLayout(desc) : kVitLayoutBuiltin;
  const bool eps_1e6 = IsQwenVisionLayout(layout) || layout == kVitLayoutSiglip;
  return ExtraOr(desc, kLayerNormEpsKey, eps_1e6 ? 1e-6 : 1e-5);
}
bool QkvBias(const ModelDesc& desc) {
  return ExtraOr(desc, kQkvBiasKey, 0) != 0;
}
int64_t SlidingWindow(const ModelDesc& desc) {
  return static_cast<int64_t>(ExtraOr(desc, kSlidingWindowKey, 0));
}
bool QuickGelu(const ModelDesc& desc) {
  const int layout = VitLayout(desc);
  const bool published = layout == kVitLayoutClip || layout == kVitLayoutQwen2Vl;
  return ExtraOr(desc, kQuickGeluKey, published ? 1 : 0) != 0;
}
int64_t SharedExpertFfnHidden(const ModelDesc& desc) {
  return desc.experts > 0 ? static_cast<int64_t>(ExtraOr(desc, kSharedExpertFfnHiddenKey, 0)) : 0;
}
bool NormTopkProb(const ModelDesc& desc) {
  return ExtraOr(desc, kNormTopkProbKey, 1) != 0;
}
double RouterAuxLossCoef(const ModelDesc& desc) {
  return desc.experts > 0 ? ExtraOr(desc, kRouterAuxLossCoefKey, 0) : 0.0;
}
bool AttnPoolHead(const ModelDesc& desc) {
  return desc.kind == ModelKind::kVit && VitLayout(desc) == kVitLayoutSiglip && ExtraOr(desc, kAttnPoolHeadKey, 0) != 0;
}
bool QkNorm(const ModelDesc& desc) {
  return ExtraOr(desc, kQkNormKey, 0) != 0;
}
bool IsMoeLayer(const ModelDesc& desc, int64_t layer) {
  if (desc.experts <= 0) return false;
  const auto step = static_cast<int64_t>(ExtraOr(desc, kDecoderSparseStepKey, 1));
  if (step <= 0 || (layer + 1) % step != 0) return false;
  return ExtraOr(desc, (kMlpOnlyLayerKeyPrefix + std::to_string(layer)).c_str(), 0) == 0;
}
int64_t MoeLayerCount(const ModelDesc& desc, int64_t first, int64_t end) {
  if (end < 0) end = desc.layers;
  if (desc.experts <= 0 || end <= first) return 0;
  // No mlp_only_layers: the layers i with (i + 1) % step == 0, counted
  // without a key per layer (the planner asks this for every candidate).
  const auto listed = desc.extra.lower_bound(kMlpOnlyLayerKeyPrefix);
  if (listed == desc.extra.end() || listed->first.rfind(kMlpOnlyLayerKeyPrefix, 0) != 0) {
    const auto step = static_cast<int64_t>(ExtraOr(desc, kDecoderSparseStepKey, 1));
    return step <= 0 ? 0 : end / step - first / step;
  }
  int64_t count = 0;
  for (int64_t i = first; i < end; ++i) count += IsMoeLayer(desc, i) ? 1 : 0;
  return count;
}
bool Gemma3(const ModelDesc& desc) {
  return ExtraOr(desc, kGemma3Key, 0) != 0;
}
bool IsSlidingLayer(const ModelDesc& desc, int64_t layer) {
  if (SlidingWindow(desc) <= 0) return false;
  const auto pattern = static_cast<int64_t>(ExtraOr(desc, kSlidingWindowPatternKey, 0));
  if (pattern > 0 && (layer + 1) % pattern == 0) return false;
  return ExtraOr(desc, (kFullAttentionLayerKeyPrefix + std::to_string(layer)).c_str(), 0) == 0;
}
int64_t SlidingLayerCount(const ModelDesc& desc, int64_t first, int64_t end) {
  if (end < 0) end = desc.layers;
  int64_t count = 0;
  for (int64_t i = first; i < end; ++i) count += IsSlidingLayer(desc, i) ? 1 : 0;
  return count;
}
bool UsesLocalRope(const ModelDesc& desc, int64_t layer) {
  return desc.extra.count(kRopeLocalBaseFreqKey) > 0 && IsSlidingLayer(desc, layer);
}
double RopeThetaOf(const ModelDesc& desc, int64_t layer) {
  return UsesLocalRope(desc, layer) ? ExtraOr(desc, kRopeLocalBaseFreqKey, 10000.0) : RopeTheta(desc);
}
RopeScaling RopeScalingOf(const ModelDesc& desc, int64_t layer) {
  return UsesLocalRope(desc, layer) ? RopeScaling{} : RopeScalingOf(desc);
}
double AttentionScale(const ModelDesc& desc) {
  const double scalar = ExtraOr(desc, kQueryPreAttnScalarKey, static_cast<double>(HeadDim(desc)));
  return 1.0 / std::sqrt(scalar);
}
int VitLayout(const ModelDesc& desc) {
  auto it = desc.extra.find(kVitLayoutKey);
  if (it != desc.extra.end()) return static_cast<int>(it->second);
  auto pos = desc.extra.find("pos_embed");
  if (pos != desc.extra.end() && pos->second == 0.0) return kVitLayoutQwen2Vl;
  return kVitLayoutBuiltin;
}
bool IsQwenVisionLayout(int layout) {
  return layout == kVitLayoutQwen2Vl || layout == kVitLayoutQwen25Vl;
}
int64_t VitMergerWindow(const ModelDesc& desc) {
  if (desc.kind != ModelKind::kVit || VitLayout(desc) != kVitLayoutQwen25Vl) return 0;
  const int64_t unit = SpatialMerge(desc) * desc.patch_size;
  return unit > 0 ? static_cast<int64_t>(ExtraOr(desc, kVitWindowSizeKey, 0)) / unit : 0;
}
bool IsFullAttentionVitBlock(const ModelDesc& desc, int64_t layer) {
  if (VitMergerWindow(desc) == 0) return true;
  return ExtraOr(desc, (kFullAttBlockKeyPrefix + std::to_string(layer)).c_str(), 0) != 0;
}
int64_t VitOutputTokens(const ModelDesc& desc) {
  const int64_t side = desc.patch_size > 0 ? desc.image_size / desc.patch_size : 0;
  const int64_t merge = SpatialMerge(desc);
  if (merge > 0) return side * side / (merge * merge);
  return VitLayout(desc) == kVitLayoutClip ? side * side + 1 : side * side;
}
int64_t VitOutputDim(const ModelDesc& desc) {
  return SpatialMerge(desc) > 0 ? desc.out_dim : desc.hidden;
}
int64_t AudioPositions(const ModelDesc& desc) {
  return static_cast<int64_t>(ExtraOr(desc, "max_source_positions", static_cast<double>((desc.audio_frames + 1) / 2)));
}

int64_t HeadDim(const ModelDesc& desc) {
  if (desc.head_dim != 0) return desc.head_dim;
  return desc.heads > 0 ? desc.hidden / desc.heads : 0;
}
int64_t KvHeads(const ModelDesc& desc) {
  return desc.kv_heads != 0 ? desc.kv_heads : desc.heads;
}
int64_t MoeFfnHidden(const ModelDesc& desc) {
  return desc.moe_ffn_hidden != 0 ? desc.moe_ffn_hidden : desc.ffn_hidden;
}

int64_t SpatialMerge(const ModelDesc& desc) {
  return static_cast<int64_t>(ExtraOr(desc, "spatial_merge", 0));
}

int64_t MergerHidden(const ModelDesc& desc) {
  const auto mid = static_cast<int64_t>(ExtraOr(desc, "merger_hidden", 0));
  const int64_t merge = SpatialMerge(desc);
  return mid > 0 ? mid : merge * merge * desc.hidden;
}

Status ValidateModelDesc(const ModelDesc& d, const std::string& where) {
  DescChecker c(d, where);
  for (auto [value, field] : {std::pair{d.hidden, "hidden"},
                              {d.layers, "layers"},
                              {d.heads, "heads"},
                              {d.kv_heads, "kv_heads"},
                              {d.head_dim, "head_dim"},
                              {d.ffn_hidden, "ffn_hidden"},
                              {d.vocab, "vocab"},
                              {d.experts, "experts"},
                              {d.experts_per_token, "experts_per_token"},
                              {d.moe_ffn_hidden, "moe_ffn_hidden"},
                              {d.image_size, "image_size"},
                              {d.patch_size, "patch_size"},
                              {d.channels, "channels"},
                              {d.mel_bins, "mel_bins"},
                              {d.audio_frames, "audio_frames"},
                              {d.in_dim, "in_dim"},
                              {d.out_dim, "out_dim"}}) {
    c.NonNegative(value, field);
  }
  switch (d.kind) {
    case ModelKind::kDecoder: {
      c.Positive(d.hidden, "hidden");
      c.Positive(d.layers, "layers");
      c.Positive(d.heads, "heads");
      c.Positive(d.vocab, "vocab");
      c.Require(d.head_dim != 0 || d.heads <= 0 || d.hidden % d.heads == 0,
                "head_dim set, or hidden divisible by heads (" + std::to_string(d.hidden) + " % " +
                    std::to_string(d.heads) + " != 0)");
      c.Require(HeadDim(d) % 2 == 0, "an even head_dim for RoPE, got " + std::to_string(HeadDim(d)));
      const int64_t kv = KvHeads(d);
      c.Require(kv > 0 && d.heads % kv == 0, "heads divisible by kv_heads (GQA), got heads " + std::to_string(d.heads) +
                                                 ", kv_heads " + std::to_string(kv));
      if (d.experts == 0) {
        c.Positive(d.ffn_hidden, "ffn_hidden");
      } else {
        c.Require(d.experts_per_token >= 1 && d.experts_per_token <= d.experts,
                  "1 <= experts_per_token <= experts, got " + std::to_string(d.experts_per_token) + " of " +
                      std::to_string(d.experts));
        c.Require(MoeFfnHidden(d) > 0, "moe_ffn_hidden > 0 (or ffn_hidden > 0) for MoE");
        c.Require(SharedExpertFfnHidden(d) >= 0, "extra.shared_expert_ffn_hidden >= 0");
        c.Require(RouterAuxLossCoef(d) >= 0, "extra.router_aux_loss_coef >= 0");
        c.Require(ExtraOr(d, kDecoderSparseStepKey, 1) >= 1, "extra.decoder_sparse_step >= 1");
        c.Require(MoeLayerCount(d) == d.layers || d.ffn_hidden > 0,
                  "ffn_hidden > 0 for the dense layers between MoE layers (decoder_sparse_step, mlp_only_layers: "
                  "the config's intermediate_size)");
      }
      c.Require(RopeTheta(d) > 0, "extra.rope_theta > 0");
      c.Require(RmsNormEps(d) > 0, "extra.rms_norm_eps > 0");
      c.Require(SlidingWindow(d) >= 0, "extra.sliding_window >= 0");
      c.Require(ExtraOr(d, kSlidingWindowPatternKey, 0) >= 0, "extra.sliding_window_pattern >= 0");
      c.Require(ExtraOr(d, kQueryPreAttnScalarKey, 1) > 0, "extra.query_pre_attn_scalar > 0");
      c.Require(ExtraOr(d, kRopeLocalBaseFreqKey, 1) > 0, "extra.rope_local_base_freq > 0");
      c.Require(!Gemma3(d) || d.experts == 0, "no experts with extra.gemma3 (Gemma 3's MLP is a dense GeGLU)");
      // Counted by the compiler for some configs, not built by the runtime.
      c.Require(ExtraOr(d, "attn_out_bias", 0) == 0, "no extra.attn_out_bias (an o_proj bias is not built)");
      c.Require(ExtraOr(d, "mlp_bias", 0) == 0, "no extra.mlp_bias (MLP biases are not built)");
      c.Require(ExtraOr(d, "mlp_gated", 1) != 0, "a gated (SwiGLU) MLP (extra.mlp_gated = 0 is not built)");
      c.Require(ExtraOr(d, "norm_bias", 0) == 0, "no extra.norm_bias (RMSNorm has no bias)");
      CheckRopeScaling(d, c);
      break;
    }
    case ModelKind::kVit:
      CheckEncoderBlocks(d, c);
      c.Positive(d.image_size, "image_size");
      c.Positive(d.patch_size, "patch_size");
      c.Positive(d.channels, "channels");
      // SigLIP's "valid" conv drops the last image_size % patch_size rows and
      // columns (so400m-patch14-384: 27 x 27 patches of 384 px); the others need none.
      c.Require(d.patch_size <= 0 || d.image_size % d.patch_size == 0 || VitLayout(d) == kVitLayoutSiglip,
                "image_size divisible by patch_size (" + std::to_string(d.image_size) + " % " +
                    std::to_string(d.patch_size) + " != 0)");
      c.Require(d.patch_size <= 0 || d.image_size >= d.patch_size, "image_size >= patch_size");
      c.Require(SpatialMerge(d) >= 0 && SpatialMerge(d) <= 8, "0 <= extra.spatial_merge <= 8");
      CheckVitFlags(d, c);
      if (SpatialMerge(d) > 0 && d.patch_size > 0 && d.image_size % d.patch_size == 0) {
        c.Require((d.image_size / d.patch_size) % SpatialMerge(d) == 0,
                  "patches per side (image_size / patch_size) divisible by extra.spatial_merge");
        c.Positive(d.out_dim, "out_dim (the patch merger's output width)");
      }
      break;
    case ModelKind::kAudioEncoder:
      CheckEncoderBlocks(d, c);
      c.Positive(d.mel_bins, "mel_bins");
      c.Positive(d.audio_frames, "audio_frames");
      c.Require(d.hidden % 2 == 0 && d.hidden >= 4, "an even hidden >= 4 (sinusoidal positions)");
      c.Require(AudioPositions(d) >= (d.audio_frames + 1) / 2,
                "2 * extra.max_source_positions >= audio_frames (the position table covers the conv output)");
      break;
    case ModelKind::kProjector:
      c.Positive(d.in_dim, "in_dim");
      c.Positive(d.out_dim, "out_dim");
      break;
  }
  return c.status();
}

}  // namespace maestro::plan
