// SPDX-License-Identifier: Apache-2.0
// compiler/model.h's shapes and counts: CheckModelShape (the bounds of
// compiler/model_bounds.h), NaturalTokens and ComputeModelFacts (parameters
// here, FLOPs by plan/model_flops.h). The Hugging Face importers are
// compiler/hf_config_import.cc.
#include "compiler/model.h"

#include <fmt/format.h>

#include <string>

#include "base/checks.h"
#include "compiler/model_bounds.h"
#include "plan/model_desc.h"
#include "plan/model_flops.h"
#include "plan/mrope.h"

namespace maestro::compiler {

using plan::ModelDesc;
using plan::ModelKind;

bool ExtraFlag(const ModelDesc& desc, const std::string& key, bool fallback) {
  auto it = desc.extra.find(key);
  return it == desc.extra.end() ? fallback : it->second != 0.0;
}

double ExtraValue(const ModelDesc& desc, const std::string& key, double fallback) {
  auto it = desc.extra.find(key);
  return it == desc.extra.end() ? fallback : it->second;
}

Status RequireRange(std::string* key, const std::string& where, const char* what, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    if (key) *key = what;
    return Status::InvalidArgument(
        fmt::format("{}: {} = {} is out of range; it must be in [{}, {}]", where, what, v, lo, hi));
  }
  return Status::Ok();
}

Status RequireExtraRange(std::string* key, const std::string& where, const ModelDesc& d, const char* what,
                         double fallback, int64_t lo, int64_t hi) {
  const double v = ExtraValue(d, what, fallback);
  if (!(v >= static_cast<double>(lo) && v <= static_cast<double>(hi))) {
    if (key) *key = what;
    return Status::InvalidArgument(
        fmt::format("{}: {} = {} is out of range; it must be in [{}, {}]", where, what, v, lo, hi));
  }
  return Status::Ok();
}

namespace {

int64_t DecoderHeadDim(const ModelDesc& d) {
  return d.head_dim > 0 ? d.head_dim : d.hidden / d.heads;
}

}  // namespace

Status CheckModelShape(const ModelDesc& d, const std::string& where, std::string* key) {
  switch (d.kind) {
    case ModelKind::kDecoder:
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "hidden", d.hidden, 1, kMaxHidden));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "layers", d.layers, 1, kMaxLayers));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "heads", d.heads, 1, 4096));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "kv_heads", d.kv_heads, 1, d.heads));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "head_dim", d.head_dim, 0, 4096));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "ffn_hidden", d.ffn_hidden, d.experts > 0 ? 0 : 1, kMaxFfn));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "vocab", d.vocab, 1, kMaxVocab));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "experts", d.experts, 0, kMaxExperts));
      if (d.heads % d.kv_heads != 0) {
        if (key) *key = "kv_heads";
        return Status::InvalidArgument(
            fmt::format("{}: heads = {} is not a multiple of kv_heads = {} (grouped-query attention needs it)", where,
                        d.heads, d.kv_heads));
      }
      if (d.head_dim == 0 && d.hidden % d.heads != 0) {
        if (key) *key = "heads";
        return Status::InvalidArgument(
            fmt::format("{}: hidden = {} is not a multiple of heads = {}; set head_dim", where, d.hidden, d.heads));
      }
      if (d.experts > 0) {
        MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "experts_per_token", d.experts_per_token, 1, d.experts));
        MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "moe_ffn_hidden", d.moe_ffn_hidden, 1, kMaxFfn));
        const double step = ExtraValue(d, plan::kDecoderSparseStepKey, 1);
        if (step < 1 || step > static_cast<double>(d.layers)) {
          if (key) *key = plan::kDecoderSparseStepKey;
          return Status::InvalidArgument(
              fmt::format("{}: decoder_sparse_step = {} must be in [1, layers = {}] (1: every layer a MoE layer)",
                          where, step, d.layers));
        }
        if (plan::MoeLayerCount(d) < d.layers) {
          // Dense layers between the MoE ones (decoder_sparse_step) are SwiGLU MLPs of ffn_hidden.
          MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "ffn_hidden", d.ffn_hidden, 1, kMaxFfn));
        }
      }
      if (Status mrope = plan::CheckMrope(d, where); !mrope.ok()) {
        if (key) *key = plan::kMropeSectionTKey;
        return mrope;
      }
      return Status::Ok();
    case ModelKind::kVit: {
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "hidden", d.hidden, 1, kMaxHidden));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "layers", d.layers, 1, kMaxLayers));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "heads", d.heads, 1, 4096));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "ffn_hidden", d.ffn_hidden, 1, kMaxFfn));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "image_size", d.image_size, 1, kMaxImage));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "patch_size", d.patch_size, 1, d.image_size));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "channels", d.channels, 1, 64));
      if (d.hidden % d.heads != 0) {
        if (key) *key = "heads";
        return Status::InvalidArgument(
            fmt::format("{}: hidden = {} is not a multiple of heads = {}", where, d.hidden, d.heads));
      }
      MAESTRO_RETURN_IF_ERROR(RequireExtraRange(key, where, d, "spatial_merge", 0, 0, 8));
      MAESTRO_RETURN_IF_ERROR(RequireExtraRange(key, where, d, "temporal_patch", 1, 1, 16));
      if (ExtraValue(d, "spatial_merge", 0) > 0) {
        MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "out_dim", d.out_dim, 1, kMaxHidden));
        MAESTRO_RETURN_IF_ERROR(RequireExtraRange(key, where, d, "merger_hidden", 0, 0, kMaxFfn));
      }
      return Status::Ok();
    }
    case ModelKind::kAudioEncoder:
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "hidden", d.hidden, 1, kMaxHidden));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "layers", d.layers, 1, kMaxLayers));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "heads", d.heads, 1, 4096));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "ffn_hidden", d.ffn_hidden, 1, kMaxFfn));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "mel_bins", d.mel_bins, 1, 4096));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "audio_frames", d.audio_frames, 2, kMaxFrames));
      MAESTRO_RETURN_IF_ERROR(RequireExtraRange(key, where, d, "max_source_positions",
                                                static_cast<double>((d.audio_frames + 1) / 2), 1, kMaxFrames));
      if (d.hidden % d.heads != 0) {
        if (key) *key = "heads";
        return Status::InvalidArgument(
            fmt::format("{}: hidden = {} is not a multiple of heads = {}", where, d.hidden, d.heads));
      }
      return Status::Ok();
    case ModelKind::kProjector:
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "in_dim", d.in_dim, 1, kMaxHidden));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "out_dim", d.out_dim, 1, kMaxHidden));
      MAESTRO_RETURN_IF_ERROR(RequireRange(key, where, "ffn_hidden", d.ffn_hidden, 0, kMaxFfn));
      return Status::Ok();
  }
  if (key) *key = "kind";
  return Status::InvalidArgument(where + ": unknown model kind");
}

int64_t NaturalTokens(const ModelDesc& d, int64_t seq_len) {
  switch (d.kind) {
    case ModelKind::kDecoder: return seq_len;
    case ModelKind::kVit: {
      const int64_t side = d.image_size / d.patch_size;
      return side * side + (ExtraFlag(d, "cls_token", true) ? 1 : 0);
    }
    case ModelKind::kAudioEncoder: return (d.audio_frames + 1) / 2;  // the stride-2 conv's output
    case ModelKind::kProjector: return 1;
  }
  return seq_len;
}

namespace {

// A decoder: attention (GQA, biases, q/k norms), a dense or MoE MLP (with a
// shared expert), the embedding and an untied head.
void DecoderFacts(const ModelDesc& d, ModelFacts* f) {
  const int64_t h = d.hidden;
  const int64_t hd = DecoderHeadDim(d);
  const int64_t q = d.heads * hd, kv = d.kv_heads * hd;
  const bool qkv_bias = ExtraFlag(d, "qkv_bias", false);
  const bool o_bias = ExtraFlag(d, "attn_out_bias", false);
  const bool mlp_bias = ExtraFlag(d, "mlp_bias", false);
  const bool gated = ExtraFlag(d, "mlp_gated", true);
  const int64_t norm = ExtraFlag(d, "norm_bias", false) ? 2 * h : h;
  const int64_t attn_w = h * q + 2 * h * kv + q * h;
  const int64_t attn_b = (qkv_bias ? q + 2 * kv : 0) + (o_bias ? h : 0);
  auto mlp = [&](int64_t ffn) { return (gated ? 3 : 2) * h * ffn + (mlp_bias ? (gated ? 2 : 1) * ffn + h : 0); };
  const int64_t qk_norm = ExtraFlag(d, "qk_norm", false) ? 2 * hd : 0;  // Qwen3: RMSNorm of q and k heads
  const int64_t sandwich = plan::Gemma3(d) ? 2 * norm : 0;              // Gemma 3: post-attention and post-MLP norms
  const int64_t layer_base = attn_w + attn_b + 2 * norm + qk_norm + sandwich;
  // What one MLP adds: a MoE layer's (routed experts, router, shared expert)
  // and a dense layer's; a MoE decoder with dense layers (Qwen-MoE's
  // decoder_sparse_step, mlp_only_layers) has both, per plan::IsMoeLayer.
  struct Mlp {
    int64_t all = 0, active = 0;
  } moe_mlp, dense_mlp;
  if (d.experts > 0) {
    const int64_t expert = mlp(d.moe_ffn_hidden);
    const int64_t router = h * d.experts;
    moe_mlp = {router + d.experts * expert, router + d.experts_per_token * expert};
    // Qwen2-MoE: a shared expert every token passes, with a (1, C) sigmoid gate.
    const auto shared_ffn = static_cast<int64_t>(ExtraValue(d, "shared_expert_ffn_hidden", 0));
    if (shared_ffn > 0) {
      const int64_t shared = mlp(shared_ffn) + h;
      moe_mlp.all += shared;
      moe_mlp.active += shared;
    }
  }
  const int64_t moe_layers = plan::MoeLayerCount(d);
  const int64_t dense_layers = d.layers - moe_layers;
  if (dense_layers > 0) {
    const int64_t m = mlp(d.ffn_hidden);
    dense_mlp = {m, m};
  }
  const int64_t layers_all = d.layers * layer_base + moe_layers * moe_mlp.all + dense_layers * dense_mlp.all;
  const int64_t layers_active = d.layers * layer_base + moe_layers * moe_mlp.active + dense_layers * dense_mlp.active;
  const int64_t embed = d.vocab * h;
  const int64_t head = d.tie_embeddings ? 0 : d.vocab * h;
  f->params = embed + layers_all + norm + head;
  f->active_params = embed + layers_active + norm + head;
  f->embedding_params = embed;
  f->output_dim = h;
}

// A ViT: the patch stem, positions, the blocks, the optional final norm,
// pooler and patch merger.
void VitFacts(const ModelDesc& d, ModelFacts* f) {
  const int64_t h = d.hidden;
  const int64_t ffn = d.ffn_hidden;
  const int64_t temporal = static_cast<int64_t>(ExtraValue(d, "temporal_patch", 1));
  const int64_t patch_w = d.channels * temporal * d.patch_size * d.patch_size * h;
  const int64_t side = d.image_size / d.patch_size;
  const int64_t patches = side * side;
  const bool cls = ExtraFlag(d, "cls_token", true);
  int64_t p = patch_w + (ExtraFlag(d, "patch_bias", true) ? h : 0);
  if (cls) p += h;
  if (ExtraFlag(d, "pos_embed", true)) p += (patches + (cls ? 1 : 0)) * h;
  if (ExtraFlag(d, "pre_norm", false)) p += 2 * h;
  const bool qkv_bias = ExtraFlag(d, "qkv_bias", true);
  // Qwen2.5-VL: a SwiGLU MLP with biases (gate, up, down) and two RMSNorms (weight only).
  const bool qwen25 = plan::VitLayout(d) == plan::kVitLayoutQwen25Vl;
  const int64_t layer_w = 4 * h * h + (qwen25 ? 3 : 2) * h * ffn;
  const int64_t mlp_biases = qwen25 ? 2 * ffn + h : ffn + h;
  const int64_t layer = layer_w + (qkv_bias ? 3 * h : 0) + h + mlp_biases + (qwen25 ? 2 * h : 4 * h);  // + the norms
  p += d.layers * layer;
  if (ExtraFlag(d, "final_norm", true)) p += 2 * h;
  if (ExtraFlag(d, "pooler", false)) p += h * h + h;
  // SigLIP's attention-pooling head: probe, in_proj (3h x h + 3h), out_proj,
  // LayerNorm, MLP. Counted, not run on the way to the next section: no FLOPs.
  if (ExtraFlag(d, plan::kAttnPoolHeadKey, false)) p += h + 4 * h * h + 4 * h + 2 * h + 2 * h * ffn + ffn + h;
  const int64_t merge = static_cast<int64_t>(ExtraValue(d, "spatial_merge", 0));
  if (merge > 0) {
    const int64_t in = h * merge * merge;
    const int64_t mh = static_cast<int64_t>(ExtraValue(d, "merger_hidden", 0)) > 0
                           ? static_cast<int64_t>(ExtraValue(d, "merger_hidden", 0))
                           : in;
    p += (qwen25 ? h : 2 * h) + in * mh + mh + mh * d.out_dim + d.out_dim;  // ln_q: RMSNorm or LayerNorm
  }
  f->params = p;
  f->active_params = p;
  f->embedding_params = 0;
  f->output_dim = merge > 0 ? d.out_dim : h;
}

// A Whisper-style audio encoder: two convolutions, positions, the blocks.
void AudioEncoderFacts(const ModelDesc& d, ModelFacts* f) {
  const int64_t h = d.hidden;
  const int64_t ffn = d.ffn_hidden;
  const int64_t positions =
      static_cast<int64_t>(ExtraValue(d, "max_source_positions", static_cast<double>((d.audio_frames + 1) / 2)));
  const int64_t conv1 = d.mel_bins * h * 3, conv2 = h * h * 3;
  int64_t p = conv1 + h + conv2 + h + positions * h;
  const int64_t layer_w = 4 * h * h + 2 * h * ffn;
  const int64_t layer = layer_w + 3 * h /* q, v, o biases */ + ffn + h + 4 * h;
  p += d.layers * layer + 2 * h;
  f->params = p;
  f->active_params = p;
  f->output_dim = h;
}

// The runtime's MLP projector (runtime/models/encoders.cc, LLaVA's
// "mlp2x_gelu"): Linear(in_dim -> out_dim), GELU, Linear(out_dim -> out_dim).
void ProjectorFacts(const ModelDesc& d, ModelFacts* f) {
  const int64_t w = d.in_dim * d.out_dim + d.out_dim * d.out_dim;
  const int64_t p = w + 2 * d.out_dim;
  f->params = p;
  f->active_params = p;
  f->output_dim = d.out_dim;
}

}  // namespace

ModelFacts ComputeModelFacts(const ModelDesc& d, int64_t seq_len) {
  ModelFacts f;
  if (seq_len <= 0) seq_len = NaturalTokens(d, 4096);
  f.seq_len = seq_len;
  const double s = static_cast<double>(seq_len);
  switch (d.kind) {
    case ModelKind::kDecoder: DecoderFacts(d, &f); break;
    case ModelKind::kVit: VitFacts(d, &f); break;
    case ModelKind::kAudioEncoder: AudioEncoderFacts(d, &f); break;
    case ModelKind::kProjector: ProjectorFacts(d, &f); break;
  }
  // The FLOP rule is plan/model_flops.h's, shared with the runtime's metrics.
  f.matmul_params = plan::MatmulParamsPerToken(d);
  f.attention_flops_per_token = plan::AttentionFlopsPerToken(d, s);
  f.flops_per_token = plan::ForwardFlopsPerToken(d, s);
  return f;
}

}  // namespace maestro::compiler
