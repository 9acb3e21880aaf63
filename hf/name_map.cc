// SPDX-License-Identifier: Apache-2.0
// The name tables (one per layout) and their expansion for a ModelDesc.
#include "hf/name_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>

#include "base/checks.h"
#include "plan/model_desc.h"

namespace maestro::hf {
namespace {

double Extra(const plan::ModelDesc& d, const char* key, double fallback) {
  auto it = d.extra.find(key);
  return it == d.extra.end() ? fallback : it->second;
}

// The sizes the shapes are written in (letters as in docs/weights.md).
struct Dims {
  int64_t C = 0;    // hidden
  int64_t H = 0;    // heads
  int64_t K = 0;    // kv heads
  int64_t D = 0;    // head dim
  int64_t F = 0;    // ffn hidden (MoE: per expert)
  int64_t V = 0;    // vocab
  int64_t E = 0;    // experts
  int64_t Cin = 0;  // image channels
  int64_t P = 0;    // patch side
  int64_t T = 1;    // temporal patch
  int64_t N = 0;    // patches per image
  int64_t M = 0;    // mel bins
  int64_t Pos = 0;  // audio positions
  int64_t G = 0;    // merge^2 * C: the merger's input width
  int64_t MH = 0;   // merger hidden
  int64_t Out = 0;  // out_dim
  int64_t In = 0;   // in_dim
  bool qkv_bias = false;
  bool tied = false;
  bool qk_norm = false;         // Qwen3: q_norm / k_norm
  bool pool_head = false;       // SigLIP: the attention-pooling head
  int64_t SF = 0;               // Qwen2-MoE: the shared expert's ffn hidden, 0 = none
  int64_t DF = 0;               // a MoE decoder's dense layers' ffn hidden (Qwen-MoE's intermediate_size)
  std::vector<bool> moe_layer;  // per layer: plan::IsMoeLayer
};

Dims DimsOf(const plan::ModelDesc& d) {
  Dims x;
  x.C = d.hidden;
  x.H = d.heads;
  x.K = d.kv_heads != 0 ? d.kv_heads : d.heads;
  x.D = d.head_dim != 0 ? d.head_dim : (d.heads > 0 ? d.hidden / d.heads : 0);
  x.F = d.experts > 0 ? (d.moe_ffn_hidden != 0 ? d.moe_ffn_hidden : d.ffn_hidden) : d.ffn_hidden;
  x.V = d.vocab;
  x.E = d.experts;
  x.Cin = d.channels;
  x.P = d.patch_size;
  x.T = static_cast<int64_t>(Extra(d, "temporal_patch", 1));
  const int64_t side = d.patch_size > 0 ? d.image_size / d.patch_size : 0;
  x.N = side * side;
  x.M = d.mel_bins;
  x.Pos = static_cast<int64_t>(Extra(d, "max_source_positions", static_cast<double>((d.audio_frames + 1) / 2)));
  const auto merge = static_cast<int64_t>(Extra(d, "spatial_merge", 0));
  x.G = merge * merge * d.hidden;
  const auto mh = static_cast<int64_t>(Extra(d, "merger_hidden", 0));
  x.MH = mh > 0 ? mh : x.G;
  x.Out = d.out_dim;
  x.In = d.in_dim;
  x.qkv_bias = Extra(d, "qkv_bias", 0) != 0;
  x.tied = d.tie_embeddings;
  x.qk_norm = Extra(d, "qk_norm", 0) != 0;
  x.pool_head = plan::AttnPoolHead(d);
  x.SF = d.experts > 0 ? static_cast<int64_t>(Extra(d, "shared_expert_ffn_hidden", 0)) : 0;
  x.DF = d.ffn_hidden;
  for (int64_t i = 0; i < d.layers; ++i) x.moe_layer.push_back(plan::IsMoeLayer(d, i));
  return x;
}

using Shape = std::vector<int64_t>;
using ShapeOf = Shape (*)(const Dims&);
enum class Scope { kModel, kLayer, kExpert };

// One row of a table. "{p}" in `hf` is the layout's prefix, "{i}" the layer,
// "{e}" the expert.
struct Rule {
  std::string hf;
  std::string maestro;
  std::string shape_text;
  ShapeOf shape;
  int tp_dim = -1;
  Scope scope = Scope::kModel;
  // "", "qkv_bias", "untied", "qk_norm", "shared_expert", "pool_head"; per layer
  // "moe_layer" or "dense_layer" (plan::IsMoeLayer).
  std::string when;
  int tp_parts = 1;  // blocks along tp_dim each split over TP (3: a fused qkv)
};

// Whether a rule applies; `layer` is the layer of a layer or expert rule
// (-1 for a model-scope rule).
bool Holds(const std::string& when, const Dims& x, int64_t layer = -1) {
  if (when.empty()) return true;
  if (when == "moe_layer" || when == "dense_layer") {
    const bool moe = layer >= 0 && static_cast<size_t>(layer) < x.moe_layer.size() && x.moe_layer[layer];
    return moe == (when == "moe_layer");
  }
  if (when == "qkv_bias") return x.qkv_bias;
  if (when == "untied") return !x.tied;
  if (when == "qk_norm") return x.qk_norm;
  if (when == "pool_head") return x.pool_head;
  if (when == "shared_expert") {
    return x.SF > 0 && (layer < 0 || static_cast<size_t>(layer) >= x.moe_layer.size() || x.moe_layer[layer]);
  }
  return false;
}

#define SHAPE(...) [](const Dims& x) -> Shape { return {__VA_ARGS__}; }

// How tensor parallelism splits a Linear (runtime/models/encoders.h):
// replicated, column-parallel (weight and bias rows; `parts` blocks of rows
// for a fused qkv) or row-parallel (weight columns; the bias whole).
struct TpPair {
  int weight_dim = -1;
  bool bias_split = false;
  int parts = 1;
};
constexpr TpPair kReplicated{}, kColumnParallel{0, true, 1}, kFusedQkv{0, true, 3}, kRowParallel{1, false, 1};

// weight + bias of a Linear, Conv or LayerNorm ("{p}" prepended to hf).
void AddPair(std::vector<Rule>& rules, const std::string& hf, const std::string& ours, Scope scope,
             const std::string& weight_text, ShapeOf weight_shape, const std::string& bias_text, ShapeOf bias_shape,
             TpPair tp = kReplicated) {
  rules.push_back({"{p}" + hf + ".weight", ours + ".weight", weight_text, weight_shape, tp.weight_dim, scope, "",
                   tp.weight_dim >= 0 ? tp.parts : 1});
  rules.push_back({"{p}" + hf + ".bias", ours + ".bias", bias_text, bias_shape, tp.bias_split ? 0 : -1, scope, "",
                   tp.bias_split ? tp.parts : 1});
}

// Embedding, attention and norms shared by the dense and the MoE decoder;
// `mlp` goes between the post-attention norm and the final norm.
std::vector<Rule> DecoderRules(const std::vector<Rule>& mlp) {
  const Scope L = Scope::kLayer;
  std::vector<Rule> r = {
      {"model.embed_tokens.weight", "embed_tokens.weight", "(V, C)", SHAPE(x.V, x.C), -1, Scope::kModel, ""},
      {"model.layers.{i}.input_layernorm.weight", "blocks.{i}.attn_norm.weight", "(C)", SHAPE(x.C), -1, L, ""},
      {"model.layers.{i}.self_attn.q_proj.weight", "blocks.{i}.attn.q_proj.weight", "(H*D, C)", SHAPE(x.H * x.D, x.C),
       0, L, ""},
      {"model.layers.{i}.self_attn.q_proj.bias", "blocks.{i}.attn.q_proj.bias", "(H*D)", SHAPE(x.H * x.D), 0, L,
       "qkv_bias"},
      {"model.layers.{i}.self_attn.k_proj.weight", "blocks.{i}.attn.k_proj.weight", "(K*D, C)", SHAPE(x.K * x.D, x.C),
       0, L, ""},
      {"model.layers.{i}.self_attn.k_proj.bias", "blocks.{i}.attn.k_proj.bias", "(K*D)", SHAPE(x.K * x.D), 0, L,
       "qkv_bias"},
      {"model.layers.{i}.self_attn.v_proj.weight", "blocks.{i}.attn.v_proj.weight", "(K*D, C)", SHAPE(x.K * x.D, x.C),
       0, L, ""},
      {"model.layers.{i}.self_attn.v_proj.bias", "blocks.{i}.attn.v_proj.bias", "(K*D)", SHAPE(x.K * x.D), 0, L,
       "qkv_bias"},
      {"model.layers.{i}.self_attn.o_proj.weight", "blocks.{i}.attn.o_proj.weight", "(C, H*D)", SHAPE(x.C, x.H * x.D),
       1, L, ""},
      {"model.layers.{i}.self_attn.q_norm.weight", "blocks.{i}.attn.q_norm.weight", "(D)", SHAPE(x.D), -1, L,
       "qk_norm"},
      {"model.layers.{i}.self_attn.k_norm.weight", "blocks.{i}.attn.k_norm.weight", "(D)", SHAPE(x.D), -1, L,
       "qk_norm"},
      {"model.layers.{i}.post_attention_layernorm.weight", "blocks.{i}.mlp_norm.weight", "(C)", SHAPE(x.C), -1, L, ""},
  };
  r.insert(r.end(), mlp.begin(), mlp.end());
  r.push_back({"model.norm.weight", "final_norm.weight", "(C)", SHAPE(x.C), -1, Scope::kModel, ""});
  r.push_back({"lm_head.weight", "lm_head.weight", "(V, C)", SHAPE(x.V, x.C), -1, Scope::kModel, "untied"});
  return r;
}

const std::vector<Rule>& DenseDecoderRules() {
  static const std::vector<Rule> rules = DecoderRules({
      {"model.layers.{i}.mlp.gate_proj.weight", "blocks.{i}.mlp.gate_proj.weight", "(F, C)", SHAPE(x.F, x.C), 0,
       Scope::kLayer, ""},
      {"model.layers.{i}.mlp.up_proj.weight", "blocks.{i}.mlp.up_proj.weight", "(F, C)", SHAPE(x.F, x.C), 0,
       Scope::kLayer, ""},
      {"model.layers.{i}.mlp.down_proj.weight", "blocks.{i}.mlp.down_proj.weight", "(C, F)", SHAPE(x.C, x.F), 1,
       Scope::kLayer, ""},
  });
  return rules;
}

const std::vector<Rule>& MixtralRules() {
  static const std::vector<Rule> rules = DecoderRules({
      {"model.layers.{i}.block_sparse_moe.gate.weight", "blocks.{i}.moe.router.weight", "(E, C)", SHAPE(x.E, x.C), -1,
       Scope::kLayer, ""},
      {"model.layers.{i}.block_sparse_moe.experts.{e}.w1.weight", "blocks.{i}.moe.experts.{e}.gate_proj.weight",
       "(F, C)", SHAPE(x.F, x.C), 0, Scope::kExpert, ""},
      {"model.layers.{i}.block_sparse_moe.experts.{e}.w2.weight", "blocks.{i}.moe.experts.{e}.down_proj.weight",
       "(C, F)", SHAPE(x.C, x.F), 1, Scope::kExpert, ""},
      {"model.layers.{i}.block_sparse_moe.experts.{e}.w3.weight", "blocks.{i}.moe.experts.{e}.up_proj.weight", "(F, C)",
       SHAPE(x.F, x.C), 0, Scope::kExpert, ""},
  });
  return rules;
}

// Qwen2-MoE / Qwen3-MoE: the MoE block is "mlp" (router "mlp.gate"), the
// experts Llama MLPs; Qwen2-MoE adds a shared expert and its gate. A dense
// layer (decoder_sparse_step, mlp_only_layers) is a Llama MLP of DF.
// Qwen2-MoE's shared expert is part of every MoE layer only.
const std::vector<Rule>& QwenMoeRules() {
  static const std::vector<Rule> rules = DecoderRules({
      {"model.layers.{i}.mlp.gate.weight", "blocks.{i}.moe.router.weight", "(E, C)", SHAPE(x.E, x.C), -1, Scope::kLayer,
       "moe_layer"},
      {"model.layers.{i}.mlp.experts.{e}.gate_proj.weight", "blocks.{i}.moe.experts.{e}.gate_proj.weight", "(F, C)",
       SHAPE(x.F, x.C), 0, Scope::kExpert, "moe_layer"},
      {"model.layers.{i}.mlp.experts.{e}.up_proj.weight", "blocks.{i}.moe.experts.{e}.up_proj.weight", "(F, C)",
       SHAPE(x.F, x.C), 0, Scope::kExpert, "moe_layer"},
      {"model.layers.{i}.mlp.experts.{e}.down_proj.weight", "blocks.{i}.moe.experts.{e}.down_proj.weight", "(C, F)",
       SHAPE(x.C, x.F), 1, Scope::kExpert, "moe_layer"},
      {"model.layers.{i}.mlp.shared_expert.gate_proj.weight", "blocks.{i}.moe.shared_expert.gate_proj.weight",
       "(SF, C)", SHAPE(x.SF, x.C), 0, Scope::kLayer, "shared_expert"},
      {"model.layers.{i}.mlp.shared_expert.up_proj.weight", "blocks.{i}.moe.shared_expert.up_proj.weight", "(SF, C)",
       SHAPE(x.SF, x.C), 0, Scope::kLayer, "shared_expert"},
      {"model.layers.{i}.mlp.shared_expert.down_proj.weight", "blocks.{i}.moe.shared_expert.down_proj.weight",
       "(C, SF)", SHAPE(x.C, x.SF), 1, Scope::kLayer, "shared_expert"},
      {"model.layers.{i}.mlp.shared_expert_gate.weight", "blocks.{i}.moe.shared_expert_gate.weight", "(1, C)",
       SHAPE(1, x.C), -1, Scope::kLayer, "shared_expert"},
      {"model.layers.{i}.mlp.gate_proj.weight", "blocks.{i}.mlp.gate_proj.weight", "(DF, C)", SHAPE(x.DF, x.C), 0,
       Scope::kLayer, "dense_layer"},
      {"model.layers.{i}.mlp.up_proj.weight", "blocks.{i}.mlp.up_proj.weight", "(DF, C)", SHAPE(x.DF, x.C), 0,
       Scope::kLayer, "dense_layer"},
      {"model.layers.{i}.mlp.down_proj.weight", "blocks.{i}.mlp.down_proj.weight", "(C, DF)", SHAPE(x.C, x.DF), 1,
       Scope::kLayer, "dense_layer"},
  });
  return rules;
}

// Gemma 3 text (modeling_gemma3.py Gemma3DecoderLayer): the dense decoder's
// rows without biases, its one norm between attention and MLP replaced by
// three: there post_attention_layernorm normalizes the attention's output
// (Llama's is the MLP's input norm), pre_feedforward_layernorm the MLP's
// input and post_feedforward_layernorm its output.
std::vector<Rule> MakeGemma3Rules() {
  std::vector<Rule> r;
  for (const Rule& rule : DenseDecoderRules()) {
    if (rule.when == "qkv_bias") continue;
    if (rule.maestro != "blocks.{i}.mlp_norm.weight") {
      r.push_back(rule);
      continue;
    }
    for (const auto& [hf, ours] : {std::pair{"post_attention_layernorm", "post_attn_norm"},
                                   {"pre_feedforward_layernorm", "mlp_norm"},
                                   {"post_feedforward_layernorm", "post_mlp_norm"}}) {
      r.push_back({std::string("model.layers.{i}.") + hf + ".weight", std::string("blocks.{i}.") + ours + ".weight",
                   "(C)", rule.shape, -1, Scope::kLayer, ""});
    }
  }
  return r;
}

std::vector<Rule> MakeClipRules() {
  const Scope M = Scope::kModel, L = Scope::kLayer;
  std::vector<Rule> r = {
      {"{p}embeddings.class_embedding", "class_embedding", "(C)", SHAPE(x.C), -1, M, ""},
      {"{p}embeddings.patch_embedding.weight", "patch_embed.weight", "(C, Cin, P, P)", SHAPE(x.C, x.Cin, x.P, x.P), -1,
       M, ""},
      {"{p}embeddings.position_embedding.weight", "pos_embed", "(N+1, C)", SHAPE(x.N + 1, x.C), -1, M, ""},
  };
  AddPair(r, "pre_layrnorm", "pre_norm", M, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
  for (const char* p : {"k", "v", "q"}) {
    AddPair(r, std::string("encoder.layers.{i}.self_attn.") + p + "_proj",
            std::string("blocks.{i}.attn.") + p + "_proj", L, "(C, C)", SHAPE(x.C, x.C), "(C)", SHAPE(x.C),
            kColumnParallel);
  }
  AddPair(r, "encoder.layers.{i}.self_attn.out_proj", "blocks.{i}.attn.out", L, "(C, C)", SHAPE(x.C, x.C), "(C)",
          SHAPE(x.C), kRowParallel);
  AddPair(r, "encoder.layers.{i}.layer_norm1", "blocks.{i}.attn_norm", L, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
  AddPair(r, "encoder.layers.{i}.mlp.fc1", "blocks.{i}.fc1", L, "(F, C)", SHAPE(x.F, x.C), "(F)", SHAPE(x.F),
          kColumnParallel);
  AddPair(r, "encoder.layers.{i}.mlp.fc2", "blocks.{i}.fc2", L, "(C, F)", SHAPE(x.C, x.F), "(C)", SHAPE(x.C),
          kRowParallel);
  AddPair(r, "encoder.layers.{i}.layer_norm2", "blocks.{i}.mlp_norm", L, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
  AddPair(r, "post_layernorm", "final_norm", M, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
  return r;
}

// SiglipVisionModel: CLIP's encoder layers (the same names) between a
// biased patch conv with N positions (no class token, no pre-norm) and
// post_layernorm, then the attention-pooling head when the config uses it.
std::vector<Rule> MakeSiglipRules() {
  const Scope M = Scope::kModel;
  std::vector<Rule> r;
  AddPair(r, "embeddings.patch_embedding", "patch_embed", M, "(C, Cin, P, P)", SHAPE(x.C, x.Cin, x.P, x.P), "(C)",
          SHAPE(x.C));
  r.push_back({"{p}embeddings.position_embedding.weight", "pos_embed", "(N, C)", SHAPE(x.N, x.C), -1, M, ""});
  for (const Rule& rule : MakeClipRules()) {
    if (rule.scope == Scope::kLayer) r.push_back(rule);
  }
  AddPair(r, "post_layernorm", "final_norm", M, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
  const size_t head = r.size();
  r.push_back({"{p}head.probe", "head.probe", "(1, 1, C)", SHAPE(1, 1, x.C), -1, M, ""});
  r.push_back({"{p}head.attention.in_proj_weight", "head.in_proj.weight", "(3C, C)", SHAPE(3 * x.C, x.C), -1, M, ""});
  r.push_back({"{p}head.attention.in_proj_bias", "head.in_proj.bias", "(3C)", SHAPE(3 * x.C), -1, M, ""});
  AddPair(r, "head.attention.out_proj", "head.out_proj", M, "(C, C)", SHAPE(x.C, x.C), "(C)", SHAPE(x.C));
  AddPair(r, "head.layernorm", "head.norm", M, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
  AddPair(r, "head.mlp.fc1", "head.mlp_fc1", M, "(F, C)", SHAPE(x.F, x.C), "(F)", SHAPE(x.F));
  AddPair(r, "head.mlp.fc2", "head.mlp_fc2", M, "(C, F)", SHAPE(x.C, x.F), "(C)", SHAPE(x.C));
  for (size_t k = head; k < r.size(); ++k) r[k].when = "pool_head";
  return r;
}

// The Qwen towers' stem (no bias) and each block's attention (fused qkv, proj).
std::vector<Rule> QwenVisionStemAndAttention(bool layer_norms) {
  const Scope M = Scope::kModel, L = Scope::kLayer;
  std::vector<Rule> r = {
      {"{p}patch_embed.proj.weight", "patch_embed.weight", "(C, Cin, T, P, P)", SHAPE(x.C, x.Cin, x.T, x.P, x.P), -1, M,
       ""},
  };
  if (layer_norms) {
    AddPair(r, "blocks.{i}.norm1", "blocks.{i}.attn_norm", L, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
    AddPair(r, "blocks.{i}.norm2", "blocks.{i}.mlp_norm", L, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
  } else {  // RMSNorms: weights only
    r.push_back({"{p}blocks.{i}.norm1.weight", "blocks.{i}.attn_norm.weight", "(C)", SHAPE(x.C), -1, L, ""});
    r.push_back({"{p}blocks.{i}.norm2.weight", "blocks.{i}.mlp_norm.weight", "(C)", SHAPE(x.C), -1, L, ""});
  }
  AddPair(r, "blocks.{i}.attn.qkv", "blocks.{i}.attn.qkv", L, "(3C, C)", SHAPE(3 * x.C, x.C), "(3C)", SHAPE(3 * x.C),
          kFusedQkv);
  AddPair(r, "blocks.{i}.attn.proj", "blocks.{i}.attn.out", L, "(C, C)", SHAPE(x.C, x.C), "(C)", SHAPE(x.C),
          kRowParallel);
  return r;
}

// The PatchMerger's two Linears (after its ln_q).
void AddQwenVisionMergerMlp(std::vector<Rule>& r) {
  const Scope M = Scope::kModel;
  AddPair(r, "merger.mlp.0", "merger_fc1", M, "(MH, G)", SHAPE(x.MH, x.G), "(MH)", SHAPE(x.MH), kColumnParallel);
  AddPair(r, "merger.mlp.2", "merger_fc2", M, "(Out, MH)", SHAPE(x.Out, x.MH), "(Out)", SHAPE(x.Out), kRowParallel);
}

std::vector<Rule> MakeQwen2VlVisionRules() {
  const Scope M = Scope::kModel, L = Scope::kLayer;
  std::vector<Rule> r = QwenVisionStemAndAttention(/*layer_norms=*/true);
  AddPair(r, "blocks.{i}.mlp.fc1", "blocks.{i}.fc1", L, "(F, C)", SHAPE(x.F, x.C), "(F)", SHAPE(x.F), kColumnParallel);
  AddPair(r, "blocks.{i}.mlp.fc2", "blocks.{i}.fc2", L, "(C, F)", SHAPE(x.C, x.F), "(C)", SHAPE(x.C), kRowParallel);
  AddPair(r, "merger.ln_q", "merger_norm", M, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
  AddQwenVisionMergerMlp(r);
  return r;
}

// Qwen2.5-VL's tower: RMSNorms (weight only), the SwiGLU MLP with biases.
std::vector<Rule> MakeQwen25VlVisionRules() {
  const Scope M = Scope::kModel, L = Scope::kLayer;
  std::vector<Rule> r = QwenVisionStemAndAttention(/*layer_norms=*/false);
  for (const std::string proj :
       {"blocks.{i}.mlp.gate_proj", "blocks.{i}.mlp.up_proj"}) {  // the same names on both sides
    AddPair(r, proj, proj, L, "(F, C)", SHAPE(x.F, x.C), "(F)", SHAPE(x.F), kColumnParallel);
  }
  const std::string down = "blocks.{i}.mlp.down_proj";
  AddPair(r, down, down, L, "(C, F)", SHAPE(x.C, x.F), "(C)", SHAPE(x.C), kRowParallel);
  r.push_back({"{p}merger.ln_q.weight", "merger_norm.weight", "(C)", SHAPE(x.C), -1, M, ""});
  AddQwenVisionMergerMlp(r);
  return r;
}

std::vector<Rule> MakeWhisperEncoderRules() {
  const Scope M = Scope::kModel, L = Scope::kLayer;
  std::vector<Rule> r;
  AddPair(r, "conv1", "conv1", M, "(C, M, 3)", SHAPE(x.C, x.M, 3), "(C)", SHAPE(x.C));
  AddPair(r, "conv2", "conv2", M, "(C, C, 3)", SHAPE(x.C, x.C, 3), "(C)", SHAPE(x.C));
  r.push_back({"{p}embed_positions.weight", "embed_positions", "(Pos, C)", SHAPE(x.Pos, x.C), -1, M, ""});
  r.push_back(
      {"{p}layers.{i}.self_attn.k_proj.weight", "blocks.{i}.attn.k_proj.weight", "(C, C)", SHAPE(x.C, x.C), 0, L, ""});
  AddPair(r, "layers.{i}.self_attn.v_proj", "blocks.{i}.attn.v_proj", L, "(C, C)", SHAPE(x.C, x.C), "(C)", SHAPE(x.C),
          kColumnParallel);
  AddPair(r, "layers.{i}.self_attn.q_proj", "blocks.{i}.attn.q_proj", L, "(C, C)", SHAPE(x.C, x.C), "(C)", SHAPE(x.C),
          kColumnParallel);
  AddPair(r, "layers.{i}.self_attn.out_proj", "blocks.{i}.attn.out", L, "(C, C)", SHAPE(x.C, x.C), "(C)", SHAPE(x.C),
          kRowParallel);
  AddPair(r, "layers.{i}.self_attn_layer_norm", "blocks.{i}.attn_norm", L, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
  AddPair(r, "layers.{i}.fc1", "blocks.{i}.fc1", L, "(F, C)", SHAPE(x.F, x.C), "(F)", SHAPE(x.F), kColumnParallel);
  AddPair(r, "layers.{i}.fc2", "blocks.{i}.fc2", L, "(C, F)", SHAPE(x.C, x.F), "(C)", SHAPE(x.C), kRowParallel);
  AddPair(r, "layers.{i}.final_layer_norm", "blocks.{i}.mlp_norm", L, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
  AddPair(r, "layer_norm", "final_norm", M, "(C)", SHAPE(x.C), "(C)", SHAPE(x.C));
  return r;
}

std::vector<Rule> MakeLlavaProjectorRules() {
  std::vector<Rule> r;
  AddPair(r, "linear_1", "fc1", Scope::kModel, "(Out, In)", SHAPE(x.Out, x.In), "(Out)", SHAPE(x.Out), kColumnParallel);
  AddPair(r, "linear_2", "fc2", Scope::kModel, "(Out, Out)", SHAPE(x.Out, x.Out), "(Out)", SHAPE(x.Out), kRowParallel);
  return r;
}
#undef SHAPE

const std::vector<Rule>& Gemma3Rules() {
  static const std::vector<Rule> rules = MakeGemma3Rules();
  return rules;
}
const std::vector<Rule>& ClipRules() {
  static const std::vector<Rule> rules = MakeClipRules();
  return rules;
}
const std::vector<Rule>& SiglipRules() {
  static const std::vector<Rule> rules = MakeSiglipRules();
  return rules;
}
const std::vector<Rule>& Qwen2VlVisionRules() {
  static const std::vector<Rule> rules = MakeQwen2VlVisionRules();
  return rules;
}
const std::vector<Rule>& Qwen25VlVisionRules() {
  static const std::vector<Rule> rules = MakeQwen25VlVisionRules();
  return rules;
}
const std::vector<Rule>& WhisperEncoderRules() {
  static const std::vector<Rule> rules = MakeWhisperEncoderRules();
  return rules;
}
const std::vector<Rule>& LlavaProjectorRules() {
  static const std::vector<Rule> rules = MakeLlavaProjectorRules();
  return rules;
}

struct Table {
  const std::vector<Rule>* rules;
  const char* prefix;  // substituted for "{p}"
  std::vector<std::string> own_prefixes;
  std::vector<std::string> passed_over;
};

StatusOr<Table> TableOf(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kDecoder: return Table{&DenseDecoderRules(), "", {"model.", "lm_head."}, {}};
    case WeightLayout::kMixtral: return Table{&MixtralRules(), "", {"model.", "lm_head."}, {}};
    case WeightLayout::kQwenMoe: return Table{&QwenMoeRules(), "", {"model.", "lm_head."}, {}};
    case WeightLayout::kGemma3: return Table{&Gemma3Rules(), "", {"model.", "lm_head."}, {}};
    case WeightLayout::kClipVision:
      return Table{&ClipRules(), "vision_model.", {"vision_model."}, {"vision_model.embeddings.position_ids"}};
    case WeightLayout::kSiglipVision:
      return Table{&SiglipRules(), "vision_model.", {"vision_model."}, {"vision_model.embeddings.position_ids"}};
    case WeightLayout::kQwen2VlVision: return Table{&Qwen2VlVisionRules(), "visual.", {"visual."}, {}};
    case WeightLayout::kQwen25VlVision: return Table{&Qwen25VlVisionRules(), "visual.", {"visual."}, {}};
    case WeightLayout::kWhisperEncoder: return Table{&WhisperEncoderRules(), "model.encoder.", {"model.encoder."}, {}};
    case WeightLayout::kLlavaProjector:
      return Table{&LlavaProjectorRules(), "multi_modal_projector.", {"multi_modal_projector."}, {}};
    case WeightLayout::kBuiltinVit: break;
  }
  return Status::InvalidArgument(
      "Maestro's built-in ViT follows no published layout, so it has no Hugging Face weights to load or export; "
      "import the tower with hf_config (clip, clip_vision_model, siglip, siglip_vision_model, qwen2_vl or qwen2_5_vl) "
      "to use "
      "published weights");
}

std::string Replace(std::string s, const std::string& what, const std::string& with) {
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + with.size())) {
    s.replace(at, what.size(), with);
  }
  return s;
}

std::string Substitute(const std::string& pattern, const char* prefix, int64_t layer, int64_t expert) {
  std::string s = Replace(pattern, "{p}", prefix);
  if (layer >= 0) s = Replace(s, "{i}", std::to_string(layer));
  if (expert >= 0) s = Replace(s, "{e}", std::to_string(expert));
  return s;
}

// Matches `name` against `pattern` whose "{i}" / "{e}" stand for decimal
// numbers; fills them in (-1 when the pattern has none).
bool Match(const std::string& pattern, const std::string& name, int64_t* layer, int64_t* expert) {
  *layer = -1;
  *expert = -1;
  size_t p = 0, n = 0;
  while (p < pattern.size()) {
    if (pattern.compare(p, 3, "{i}") == 0 || pattern.compare(p, 3, "{e}") == 0) {
      const bool is_layer = pattern[p + 1] == 'i';
      size_t digits = 0;
      while (n + digits < name.size() && std::isdigit(static_cast<unsigned char>(name[n + digits]))) ++digits;
      if (digits == 0 || digits > 9) return false;
      (is_layer ? *layer : *expert) = std::stoll(name.substr(n, digits));
      n += digits;
      p += 3;
      continue;
    }
    if (n >= name.size() || pattern[p] != name[n]) return false;
    ++p;
    ++n;
  }
  return n == name.size();
}

StatusOr<std::string> Translate(WeightLayout layout, const std::string& name, bool from_maestro) {
  MAESTRO_ASSIGN_OR_RETURN(Table table, TableOf(layout));
  for (const Rule& rule : *table.rules) {
    const std::string hf = Replace(rule.hf, "{p}", table.prefix);
    const std::string& from = from_maestro ? rule.maestro : hf;
    int64_t layer = -1, expert = -1;
    if (!Match(from, name, &layer, &expert)) continue;
    return Substitute(from_maestro ? hf : rule.maestro, "", layer, expert);
  }
  return Status::NotFound(fmt::format("no {} tensor corresponds to '{}' (docs/weights.md lists the table)",
                                      from_maestro ? "Hugging Face" : "Maestro", name));
}

}  // namespace

const char* WeightLayoutName(WeightLayout layout) {
  switch (layout) {
    case WeightLayout::kDecoder: return "decoder";
    case WeightLayout::kMixtral: return "mixtral";
    case WeightLayout::kQwenMoe: return "qwen_moe";
    case WeightLayout::kClipVision: return "clip_vision";
    case WeightLayout::kSiglipVision: return "siglip_vision";
    case WeightLayout::kQwen2VlVision: return "qwen2_vl_vision";
    case WeightLayout::kQwen25VlVision: return "qwen2_5_vl_vision";
    case WeightLayout::kWhisperEncoder: return "whisper_encoder";
    case WeightLayout::kLlavaProjector: return "llava_projector";
    case WeightLayout::kGemma3: return "gemma3";
    case WeightLayout::kBuiltinVit: return "builtin_vit";
  }
  return "unknown";
}

WeightLayout WeightLayoutOf(const plan::ModelDesc& desc) {
  switch (desc.kind) {
    case plan::ModelKind::kDecoder:
      if (desc.experts == 0) return plan::Gemma3(desc) ? WeightLayout::kGemma3 : WeightLayout::kDecoder;
      // Mixtral has none of a shared expert, dense layers, q/k norms, q/k/v
      // biases or unnormalized top-k weights: a MoE decoder with any is Qwen-MoE's.
      return Extra(desc, kMoeLayoutKey, 0) == kMoeLayoutQwen || Extra(desc, "shared_expert_ffn_hidden", 0) > 0 ||
                     plan::MoeLayerCount(desc) < desc.layers || plan::QkNorm(desc) || plan::QkvBias(desc) ||
                     !plan::NormTopkProb(desc)
                 ? WeightLayout::kQwenMoe
                 : WeightLayout::kMixtral;
    case plan::ModelKind::kVit:
      switch (plan::VitLayout(desc)) {
        case plan::kVitLayoutClip: return WeightLayout::kClipVision;
        case plan::kVitLayoutSiglip: return WeightLayout::kSiglipVision;
        case plan::kVitLayoutQwen2Vl: return WeightLayout::kQwen2VlVision;
        case plan::kVitLayoutQwen25Vl: return WeightLayout::kQwen25VlVision;
        default: return WeightLayout::kBuiltinVit;
      }
    case plan::ModelKind::kAudioEncoder: return WeightLayout::kWhisperEncoder;
    case plan::ModelKind::kProjector: return WeightLayout::kLlavaProjector;
  }
  return WeightLayout::kBuiltinVit;
}

const WeightName* WeightNames::ByHfName(const std::string& hf_name) const {
  auto it = by_hf.find(hf_name);
  return it == by_hf.end() ? nullptr : &weights[it->second];
}

const WeightName* WeightNames::ByMaestroName(const std::string& maestro_name) const {
  auto it = by_maestro.find(maestro_name);
  return it == by_maestro.end() ? nullptr : &weights[it->second];
}

bool WeightNames::Owns(const std::string& hf_name) const {
  for (const auto& prefix : own_prefixes) {
    if (hf_name.compare(0, prefix.size(), prefix) == 0) return true;
  }
  return false;
}

bool WeightNames::PassedOver(const std::string& hf_name) const {
  for (const auto& name : passed_over) {
    if (hf_name == name) return true;
  }
  return false;
}

StatusOr<WeightNames> ExpandWeightNames(const plan::ModelDesc& desc) {
  if (desc.kind == plan::ModelKind::kVit && plan::VitLayout(desc) == plan::kVitLayoutHfVit) {
    return Status::InvalidArgument(
        "HF ViTModel (model_type vit) is counted by the planner but not built by the runtime; use a CLIP, SigLIP or "
        "Qwen2-VL vision tower");
  }
  const WeightLayout layout = WeightLayoutOf(desc);
  MAESTRO_ASSIGN_OR_RETURN(Table table, TableOf(layout));
  const Dims x = DimsOf(desc);
  WeightNames out;
  out.layout = layout;
  out.own_prefixes = table.own_prefixes;
  out.passed_over = table.passed_over;
  if (x.tied && (layout == WeightLayout::kDecoder || layout == WeightLayout::kMixtral ||
                 layout == WeightLayout::kQwenMoe || layout == WeightLayout::kGemma3)) {
    out.passed_over.push_back("lm_head.weight");  // tied: the head is the embedding
  }
  auto add = [&](const Rule& rule, int64_t layer, int64_t expert) {
    WeightName w;
    w.hf_name = Substitute(rule.hf, table.prefix, layer, expert);
    w.maestro_name = Substitute(rule.maestro, "", layer, expert);
    w.shape = rule.shape(x);
    w.tp_dim = rule.tp_dim;
    w.tp_parts = rule.tp_parts;
    out.weights.push_back(std::move(w));
  };
  // Model-scope rules before the first layer rule come first, the layers
  // next (each layer's rules in table order), the rest last.
  const auto& rules = *table.rules;
  size_t first_layer = rules.size(), last_layer = 0;
  for (size_t r = 0; r < rules.size(); ++r) {
    if (rules[r].scope != Scope::kModel) {
      first_layer = std::min(first_layer, r);
      last_layer = r;
    }
  }
  for (size_t r = 0; r < rules.size() && r < first_layer; ++r) {
    if (Holds(rules[r].when, x)) add(rules[r], -1, -1);
  }
  for (int64_t i = 0; first_layer < rules.size() && i < desc.layers; ++i) {
    for (size_t r = first_layer; r <= last_layer; ++r) {
      if (!Holds(rules[r].when, x, i)) continue;
      if (rules[r].scope == Scope::kExpert) {
        for (int64_t e = 0; e < x.E; ++e) add(rules[r], i, e);
      } else {
        add(rules[r], i, -1);
      }
    }
  }
  for (size_t r = first_layer < rules.size() ? last_layer + 1 : rules.size(); r < rules.size(); ++r) {
    if (Holds(rules[r].when, x)) add(rules[r], -1, -1);
  }
  for (size_t k = 0; k < out.weights.size(); ++k) {
    out.by_hf[out.weights[k].hf_name] = k;
    out.by_maestro[out.weights[k].maestro_name] = k;
  }
  return out;
}

std::vector<WeightNameRule> WeightNameRules(WeightLayout layout) {
  std::vector<WeightNameRule> out;
  auto table = TableOf(layout);
  if (!table.ok()) return out;
  for (const Rule& rule : *table->rules) {
    out.push_back(
        {Replace(rule.hf, "{p}", table->prefix), rule.maestro, rule.shape_text, rule.when, rule.tp_dim, rule.tp_parts});
  }
  return out;
}

StatusOr<std::string> HfNameOf(WeightLayout layout, const std::string& maestro_name) {
  return Translate(layout, maestro_name, /*from_maestro=*/true);
}

StatusOr<std::string> MaestroNameOf(WeightLayout layout, const std::string& hf_name) {
  return Translate(layout, hf_name, /*from_maestro=*/false);
}

}  // namespace maestro::hf
