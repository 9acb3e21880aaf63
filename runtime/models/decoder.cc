// SPDX-License-Identifier: Apache-2.0
// The decoder LLM (one torch translation unit for the whole family).
#include "runtime/models/decoder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "plan/banded_attention.h"
#include "plan/model_desc.h"
#include "plan/mrope.h"
#include "plan/tensor_parallel_split.h"
#include "runtime/parallel/context_parallel.h"
#include "runtime/recompute.h"
#include "runtime/torch_compat.h"

namespace maestro::runtime {

torch::Tensor RopeInverseFrequencyTensor(int64_t head_dim, double theta, const plan::RopeScaling& scaling,
                                         torch::Device device) {
  const std::vector<double> freqs = plan::RopeInverseFrequencies(theta, head_dim, scaling);
  return torch::tensor(freqs, torch::kFloat64).to(torch::kFloat32).to(device);  // (D/2)
}

namespace {

// cos and sin of fp32 `angles` (any shape), times attention_factor, cast to dtype.
RopeTables TablesOfAngles(const torch::Tensor& angles, double attention_factor, torch::Dtype dtype) {
  if (attention_factor == 1.0) return {angles.cos().to(dtype), angles.sin().to(dtype)};
  return {(angles.cos() * attention_factor).to(dtype), (angles.sin() * attention_factor).to(dtype)};
}

}  // namespace

RopeTables MakeRopeTables(int64_t positions, const torch::Tensor& inv_freq, double attention_factor,
                          torch::Dtype dtype) {
  auto t = torch::arange(positions, inv_freq.options());                           // (T)
  auto freqs = torch::outer(t, inv_freq);                                          // (T, D/2)
  return TablesOfAngles(torch::cat({freqs, freqs}, -1), attention_factor, dtype);  // (T, D)
}

RopeTables MakeMropeTables(const torch::Tensor& positions, const torch::Tensor& inv_freq, const torch::Tensor& axes,
                           double attention_factor, torch::Dtype dtype) {
  TORCH_CHECK(positions.dim() == 3 && positions.size(0) == 3, "M-RoPE positions must be (3, B, T), got ",
              positions.sizes());
  TORCH_CHECK(axes.numel() == inv_freq.numel(), "M-RoPE: ", axes.numel(), " frequency axes for ", inv_freq.numel(),
              " frequencies");
  // Each frequency's row of positions: (D/2, B, T) -> (B, T, D/2), in fp32.
  auto per_frequency = positions.index_select(0, axes).permute({1, 2, 0}).to(inv_freq.scalar_type());
  auto freqs = per_frequency * inv_freq;                                                        // (B, T, D/2)
  return TablesOfAngles(torch::cat({freqs, freqs}, -1).unsqueeze(1), attention_factor, dtype);  // (B, 1, T, D)
}

torch::Tensor ApplyRope(const torch::Tensor& x, const RopeTables& rope) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);     // (B, H, T, D/2)
  auto x2 = x.narrow(-1, half, half);  // (B, H, T, D/2)
  auto rotated = torch::cat({-x2, x1}, -1);
  return x * rope.cos + rotated * rope.sin;
}

namespace {

// compat::GqaAttention with an explicit mask instead of the causal one:
// q (B, H, T, D); k, v (B, K, S, D) with K | H; allowed (T, S) bool, true
// where query t may attend key s (every row has a true). Returns (B, H, T, D).
// Context parallelism's attention over the gathered keys, and a sliding
// window's (AttentionMask).
torch::Tensor GqaAttentionMasked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& allowed) {
  const int64_t heads = q.size(1), kv_heads = k.size(1);
  auto keys = heads == kv_heads ? k : k.repeat_interleave(heads / kv_heads, 1);    // (B, H, S, D)
  auto values = heads == kv_heads ? v : v.repeat_interleave(heads / kv_heads, 1);  // (B, H, S, D)
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, keys, values, /*attn_mask=*/allowed, /*dropout_p=*/0.0, false);
#else
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q, keys.transpose(-2, -1)) * scale;  // (B, H, T, S)
  scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(scores, -1), values);  // (B, H, T, D)
#endif
}

// A sliding window's attention in chunks of `band` queries, each over its
// band of keys [s - band + 1, e) (plan/banded_attention.h): q (B, H, T, D),
// k, v (B, K, T, D), allowed (T, T) -> (B, H, T, D), what
// GqaAttentionMasked computes over the whole square.
torch::Tensor GqaAttentionBanded(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 const torch::Tensor& allowed, int64_t band) {
  const int64_t t = q.size(2);
  std::vector<torch::Tensor> chunks;
  for (int64_t start = 0; start < t; start += band) {
    const int64_t rows = std::min(t, start + band) - start;
    const int64_t first_key = std::max<int64_t>(0, start - band + 1);
    const int64_t keys = start + rows - first_key;
    chunks.push_back(GqaAttentionMasked(q.narrow(2, start, rows), k.narrow(2, first_key, keys),
                                        v.narrow(2, first_key, keys),
                                        allowed.narrow(0, start, rows).narrow(1, first_key, keys)));
  }
  return torch::cat(chunks, 2);
}

// Replaces `param`'s data by its slice [start, start+length) along `dim`.
void Slice(torch::Tensor& param, int64_t dim, int64_t start, int64_t length) {
  torch::NoGradGuard guard;
  param.set_data(param.narrow(dim, start, length).clone());
}

}  // namespace

void GqaAttentionImpl::Shard(int rank, int size) {
  const int64_t h = heads_ / size, k = kv_heads_ / size;
  Slice(q_proj->weight, 0, rank * h * head_dim_, h * head_dim_);
  Slice(k_proj->weight, 0, rank * k * head_dim_, k * head_dim_);
  Slice(v_proj->weight, 0, rank * k * head_dim_, k * head_dim_);
  if (q_proj->bias.defined()) {
    Slice(q_proj->bias, 0, rank * h * head_dim_, h * head_dim_);
    Slice(k_proj->bias, 0, rank * k * head_dim_, k * head_dim_);
    Slice(v_proj->bias, 0, rank * k * head_dim_, k * head_dim_);
  }
  Slice(o_proj->weight, 1, rank * h * head_dim_, h * head_dim_);
  heads_ = h;
  kv_heads_ = k;
}

void SwiGluMlpImpl::Shard(int rank, int size) {
  const int64_t f = gate_proj->weight.size(0) / size;
  Slice(gate_proj->weight, 0, rank * f, f);
  Slice(up_proj->weight, 0, rank * f, f);
  Slice(down_proj->weight, 1, rank * f, f);
  if (gate_proj->bias.defined()) {
    Slice(gate_proj->bias, 0, rank * f, f);
    Slice(up_proj->bias, 0, rank * f, f);
  }
}

int TensorParallelShardDim(const std::string& name) {
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  for (const char* rows : {"attn.q_proj.weight", "attn.k_proj.weight", "attn.v_proj.weight", "attn.q_proj.bias",
                           "attn.k_proj.bias", "attn.v_proj.bias", "mlp.gate_proj.weight", "mlp.up_proj.weight"}) {
    if (ends_with(rows)) return 0;
  }
  for (const char* cols : {"attn.o_proj.weight", "mlp.down_proj.weight"}) {
    if (ends_with(cols)) return 1;
  }
  // MoE experts and the shared expert: sharded as a dense MLP.
  const bool expert =
      name.find(".moe.experts.") != std::string::npos || name.find(".moe.shared_expert.") != std::string::npos;
  if (expert && (ends_with("gate_proj.weight") || ends_with("up_proj.weight"))) return 0;
  if (expert && ends_with("down_proj.weight")) return 1;
  return -1;
}

Status ShardDecoderForTensorParallel(DecoderLMImpl& model, TensorParallelReducer* tp) {
  const auto& d = model.desc();
  const int n = tp->size();
  // The one rule, shared with the planner (plan/tensor_parallel_split.h).
  MAESTRO_RETURN_IF_ERROR(plan::CheckTensorParallelSplit(d, n));
  for (const auto& block : *model.blocks) {
    auto* b = block->as<DecoderBlockImpl>();
    b->attn->Shard(tp->rank(), n);
    // The q/k norms' weights (Qwen3, Gemma 3) serve every head, of which this
    // rank runs its share: their gradients are partial sums, made whole by a
    // sum over the group when backward computes them (same order on every
    // rank: the same graph).
    for (auto* norm : {&b->attn->q_norm, &b->attn->k_norm}) {
      if (!*norm) continue;
      (*norm)->weight.register_hook([tp](const torch::Tensor& grad) {
        auto whole = grad.to(torch::kFloat32).contiguous().clone();
        tp->AllReduceSum(whole);
        return whole.to(grad.scalar_type());
      });
    }
    if (b->moe) {
      b->moe->Shard(tp);
    } else {
      b->mlp->Shard(tp->rank(), n);
    }
    b->tp = tp;
  }
  return Status::Ok();
}

GqaAttentionImpl::GqaAttentionImpl(int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim, bool qkv_bias,
                                   ParamFactory& params, double qk_norm_eps, bool unit_offset_norms, double query_scale)
    : heads_(heads), kv_heads_(kv_heads), head_dim_(head_dim), query_scale_(query_scale) {
  q_proj = register_module("q_proj", Linear(hidden, heads * head_dim, qkv_bias, params));
  k_proj = register_module("k_proj", Linear(hidden, kv_heads * head_dim, qkv_bias, params));
  v_proj = register_module("v_proj", Linear(hidden, kv_heads * head_dim, qkv_bias, params));
  o_proj = register_module("o_proj", Linear(heads * head_dim, hidden, false, params));
  if (qk_norm_eps > 0) {
    q_norm = register_module("q_norm", RmsNorm(head_dim, qk_norm_eps, params, unit_offset_norms));
    k_norm = register_module("k_norm", RmsNorm(head_dim, qk_norm_eps, params, unit_offset_norms));
  }
}

torch::Tensor GqaAttentionImpl::forward(const torch::Tensor& x, const RopeTables& rope, const AttentionMask* mask) {
  const int64_t b = x.size(0), t = x.size(1);
  auto q = q_proj(x).view({b, t, heads_, head_dim_});     // (B, T, H, D)
  auto k = k_proj(x).view({b, t, kv_heads_, head_dim_});  // (B, T, K, D)
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  q = q.transpose(1, 2);                                                  // (B, H, T, D)
  k = k.transpose(1, 2);                                                  // (B, K, T, D)
  auto v = v_proj(x).view({b, t, kv_heads_, head_dim_}).transpose(1, 2);  // (B, K, T, D)
  q = ApplyRope(q, rope);
  k = ApplyRope(k, rope);
  if (query_scale_ != 1.0) q = q * query_scale_;
  if (mask != nullptr) {
    if (mask->group != nullptr) {
      // Context parallelism: every rank's K and V (B, K, T, D), rank order;
      // the backward reduce-scatters their gradients.
      k = GatherSequence(k, 2, *mask->group);
      v = GatherSequence(v, 2, *mask->group);
    }
    auto allowed = mask->allowed;
    const int64_t band = mask->group == nullptr ? mask->band : 0;
    auto masked = [allowed, band](const std::vector<torch::Tensor>& qkv) {
      return band > 0 ? GqaAttentionBanded(qkv[0], qkv[1], qkv[2], allowed, band)
                      : GqaAttentionMasked(qkv[0], qkv[1], qkv[2], allowed);
    };
    auto out = recompute_core ? RunRecomputed(masked, {q, k, v}) : masked({q, k, v});  // (B, H, T_local, D)
    return o_proj(out.transpose(1, 2).reshape({b, t, heads_ * head_dim_}));
  }
  // Each kv head serves H/K consecutive query heads: inside SDPA on 2.5+
  // (enable_gqa), else repeat_interleave'd to H heads first.
  auto core = [](const std::vector<torch::Tensor>& qkv) {
    return compat::GqaAttention(qkv[0], qkv[1], qkv[2], /*causal=*/true);
  };
  auto out = recompute_core ? RunRecomputed(core, {q, k, v}) : core({q, k, v});  // (B, H, T, D)
  return o_proj(out.transpose(1, 2).reshape({b, t, heads_ * head_dim_}));
}

SwiGluMlpImpl::SwiGluMlpImpl(int64_t hidden, int64_t ffn_hidden, ParamFactory& params, bool gelu_tanh, bool with_bias)
    : gelu_tanh_(gelu_tanh) {
  gate_proj = register_module("gate_proj", Linear(hidden, ffn_hidden, with_bias, params));
  up_proj = register_module("up_proj", Linear(hidden, ffn_hidden, with_bias, params));
  down_proj = register_module("down_proj", Linear(ffn_hidden, hidden, with_bias, params));
}

torch::Tensor SwiGluMlpImpl::Inner(const torch::Tensor& x) {
  auto gate = gate_proj(x);
  return (gelu_tanh_ ? torch::gelu(gate, "tanh") : torch::silu(gate)) * up_proj(x);
}

torch::Tensor SwiGluMlpImpl::forward(const torch::Tensor& x) {
  return down_proj(Inner(x));
}

MoeMlpImpl::MoeMlpImpl(const plan::ModelDesc& desc, ParamFactory& params)
    : experts_per_token_(desc.experts_per_token), norm_topk_prob_(NormTopkProb(desc)) {
  router = register_module("router", Linear(desc.hidden, desc.experts, false, params));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < desc.experts; ++e) experts->push_back(SwiGluMlp(desc.hidden, MoeFfnHidden(desc), params));
  if (const int64_t shared = SharedExpertFfnHidden(desc); shared > 0) {
    shared_expert = register_module("shared_expert", SwiGluMlp(desc.hidden, shared, params));
    shared_expert_gate = register_module("shared_expert_gate", Linear(desc.hidden, 1, false, params));
  }
}

torch::Tensor MoeMlpImpl::forward(const torch::Tensor& x) {
  const auto shape = x.sizes().vec();
  const int64_t num_experts = static_cast<int64_t>(experts->size());
  auto tokens = x.reshape({-1, x.size(-1)});                             // (N, C)
  auto probs = torch::softmax(router(tokens), -1, torch::kFloat32);      // (N, E)
  auto [top_p, top_e] = probs.topk(experts_per_token_, -1);              // (N, k), (N, k)
  if (norm_topk_prob_) top_p = top_p / top_p.sum(-1, /*keepdim=*/true);  // renormalized over the k
  top_p = top_p.to(x.scalar_type());
  // balance_b = E * sum_e f_be * P_be over sample b's T tokens.
  const int64_t batch = x.dim() == 3 ? x.size(0) : 1;
  auto slot_counts =
      torch::one_hot(top_e, num_experts).sum(1).to(torch::kFloat32).view({batch, -1, num_experts});  // (B, T, E)
  auto fraction = slot_counts.mean(1);                                                // (B, E), sums to k
  auto mean_prob = probs.view({batch, -1, num_experts}).mean(1);                      // (B, E)
  balance_loss_ = (fraction * mean_prob).sum(-1) * static_cast<double>(num_experts);  // (B)
  auto out = torch::zeros_like(tokens);                                               // (N, C)
  if (ep_ != nullptr) {
    // EP: the routed slots go to their experts' ranks and back (TP inside:
    // partial sums of this TP rank's slices, summed over TP as below).
    auto sharded_in = EnterTensorParallel(tokens, tp_);  // (N, C)
    std::vector<torch::Tensor> token_of(static_cast<size_t>(num_experts)), weight_of;
    for (int64_t e = 0; e < num_experts; ++e) {
      auto hits = torch::nonzero(top_e == e);  // (M, 2)
      auto token = hits.select(1, 0), slot = hits.select(1, 1);
      token_of[static_cast<size_t>(e)] = token;
      weight_of.push_back(top_p.index({token, slot}).unsqueeze(-1));  // (M, 1)
    }
    std::vector<torch::Tensor> partial{RunExpertsParallel(
        sharded_in, token_of,
        [this](int64_t e, const torch::Tensor& rows) { return experts[e]->as<SwiGluMlpImpl>()->forward(rows); },
        ep_)};  // (S, C)
    const int64_t routed = partial[0].size(0);
    if (shared_expert) partial.push_back(shared_expert(sharded_in));  // (N, C)
    auto whole = LeaveTensorParallel(torch::cat(partial, 0), tp_);    // (S [+ N], C)
    out = out.index_add(0, torch::cat(token_of), whole.narrow(0, 0, routed) * torch::cat(weight_of));
    if (shared_expert) {
      out = out + torch::sigmoid(shared_expert_gate(tokens)) * whole.narrow(0, routed, tokens.size(0));
    }
    return out.view(shape);
  }
  if (tp_ == nullptr) {
    for (int64_t e = 0; e < num_experts; ++e) {
      auto hits = torch::nonzero(top_e == e);  // (M, 2): (token, slot) pairs routed to e
      if (hits.size(0) == 0) continue;
      auto token = hits.select(1, 0), slot = hits.select(1, 1);                                   // (M), (M)
      auto weight = top_p.index({token, slot}).unsqueeze(-1);                                     // (M, 1)
      auto y = experts[e]->as<SwiGluMlpImpl>()->forward(tokens.index_select(0, token)) * weight;  // (M, C)
      out = out.index_add(0, token, y);
    }
    if (shared_expert) out = out + torch::sigmoid(shared_expert_gate(tokens)) * shared_expert(tokens);  // (N, C)
    return out.view(shape);
  }
  // TP: the experts' partial outputs of every routed slot (and the shared
  // expert's) in one (S [+ N], C) tensor, summed over the group at once.
  auto sharded_in = EnterTensorParallel(tokens, tp_);  // (N, C)
  std::vector<torch::Tensor> partial, tokens_of, weights_of;
  for (int64_t e = 0; e < num_experts; ++e) {
    auto hits = torch::nonzero(top_e == e);  // (M, 2)
    if (hits.size(0) == 0) continue;
    auto token = hits.select(1, 0), slot = hits.select(1, 1);
    partial.push_back(experts[e]->as<SwiGluMlpImpl>()->forward(sharded_in.index_select(0, token)));  // (M, C)
    tokens_of.push_back(token);
    weights_of.push_back(top_p.index({token, slot}).unsqueeze(-1));  // (M, 1)
  }
  const int64_t routed = static_cast<int64_t>(partial.size());
  if (shared_expert) partial.push_back(shared_expert(sharded_in));  // (N, C)
  if (partial.empty()) return out.view(shape);
  auto whole = LeaveTensorParallel(torch::cat(partial, 0), tp_);  // (S [+ N], C)
  int64_t at = 0;
  for (int64_t i = 0; i < routed; ++i) {
    const int64_t m = tokens_of[static_cast<size_t>(i)].size(0);
    out = out.index_add(0, tokens_of[static_cast<size_t>(i)],
                        whole.narrow(0, at, m) * weights_of[static_cast<size_t>(i)]);
    at += m;
  }
  if (shared_expert) out = out + torch::sigmoid(shared_expert_gate(tokens)) * whole.narrow(0, at, tokens.size(0));
  return out.view(shape);
}

void MoeMlpImpl::Shard(TensorParallelReducer* tp) {
  for (const auto& expert : *experts) expert->as<SwiGluMlpImpl>()->Shard(tp->rank(), tp->size());
  if (shared_expert) shared_expert->Shard(tp->rank(), tp->size());
  tp_ = tp;
}

void MoeMlpImpl::KeepExperts(ExpertParallelExchange* ep) {
  const int64_t num_experts = static_cast<int64_t>(experts->size()), local = num_experts / ep->size();
  torch::NoGradGuard no_grad;
  for (int64_t e = 0; e < num_experts; ++e) {
    if (e / local == ep->rank()) continue;
    for (auto& p : experts[e]->parameters()) {
      p.set_data(torch::empty({0}, p.options()));
      p.set_requires_grad(false);
    }
  }
  ep_ = ep;
}

torch::Tensor MoeMlpImpl::ForwardNoTokens(const torch::Tensor& no_tokens) {
  const auto none = torch::empty({0}, torch::TensorOptions().dtype(torch::kInt64).device(no_tokens.device()));
  return RunExpertsParallel(
      no_tokens, std::vector<torch::Tensor>(experts->size(), none),
      [this](int64_t e, const torch::Tensor& rows) { return experts[e]->as<SwiGluMlpImpl>()->forward(rows); }, ep_);
}

DecoderBlockImpl::DecoderBlockImpl(const plan::ModelDesc& desc, int64_t layer, ParamFactory& params) {
  const bool gemma = plan::Gemma3(desc);  // unit-offset norms, sandwich norms, GeGLU
  const double eps = RmsNormEps(desc);
  // q is scaled by AttentionScale / D^-0.5 (exactly 1 unless query_pre_attn_scalar differs from D).
  const double query_scale = desc.extra.count(plan::kQueryPreAttnScalarKey) > 0
                                 ? plan::AttentionScale(desc) * std::sqrt(static_cast<double>(HeadDim(desc)))
                                 : 1.0;
  attn_norm = register_module("attn_norm", RmsNorm(desc.hidden, eps, params, gemma));
  attn = register_module(
      "attn", GqaAttention(desc.hidden, desc.heads, KvHeads(desc), HeadDim(desc), QkvBias(desc), params,
                           QkNorm(desc) ? eps : 0.0, gemma, std::abs(query_scale - 1.0) < 1e-12 ? 1.0 : query_scale));
  if (gemma) post_attn_norm = register_module("post_attn_norm", RmsNorm(desc.hidden, eps, params, true));
  mlp_norm = register_module("mlp_norm", RmsNorm(desc.hidden, eps, params, gemma));
  if (plan::IsMoeLayer(desc, layer)) {
    moe = register_module("moe", MoeMlp(desc, params));
  } else {
    mlp = register_module("mlp", SwiGluMlp(desc.hidden, desc.ffn_hidden, params, gemma));
  }
  if (gemma) post_mlp_norm = register_module("post_mlp_norm", RmsNorm(desc.hidden, eps, params, true));
}

torch::Tensor DecoderBlockImpl::forward(const torch::Tensor& x, const RopeTables& rope, const AttentionMask* mask) {
  // Under TP the post norms see the whole (all-reduced) branch output: replicated like the others.
  auto attended = LeaveTensorParallel(attn(EnterTensorParallel(attn_norm(x), tp), rope, mask), tp);
  auto h = x + (post_attn_norm ? post_attn_norm(attended) : attended);
  auto normed = mlp_norm(h);
  auto mixed = moe ? moe(normed) : LeaveTensorParallel(mlp(EnterTensorParallel(normed, tp)), tp);
  return h + (post_mlp_norm ? post_mlp_norm(mixed) : mixed);
}

DecoderLMImpl::DecoderLMImpl(const plan::ModelDesc& desc, ParamFactory& params) : desc_(desc) {
  embed_tokens = register_module("embed_tokens", Embedding(desc.vocab, desc.hidden, params));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < desc.layers; ++i) blocks->push_back(DecoderBlock(desc, i, params));
  final_norm = register_module("final_norm", RmsNorm(desc.hidden, RmsNormEps(desc), params, plan::Gemma3(desc)));
  if (!desc.tie_embeddings) lm_head = register_module("lm_head", Linear(desc.hidden, desc.vocab, false, params));
}

torch::Tensor DecoderLMImpl::Embed(const torch::Tensor& ids) {
  TORCH_CHECK(ids.dim() == 2 && ids.scalar_type() == torch::kLong, "DecoderLM::Embed: ids must be (B, T) int64, got ",
              ids.sizes(), " ", ids.scalar_type());
  if (!plan::Gemma3(desc_)) return embed_tokens(ids);
  // Gemma: sqrt(C) as an fp32 scalar rounded to the weights' dtype (HF's embed_scale).
  const auto scale = torch::scalar_tensor(std::sqrt(static_cast<double>(desc_.hidden)), torch::kFloat32)
                         .to(embed_tokens->weight.device(), embed_tokens->weight.scalar_type());
  return embed_tokens(ids) * scale;
}

torch::Tensor DecoderLMImpl::ForwardEmbeds(const torch::Tensor& embeds, const torch::Tensor& positions) {
  TORCH_CHECK(embeds.dim() == 3 && embeds.size(2) == desc_.hidden, "DecoderLM::ForwardEmbeds: embeds must be (B, T, ",
              desc_.hidden, "), got ", embeds.sizes());
  return final_norm(ForwardBlocks(embeds, 0, desc_.layers, positions));
}

namespace {

// One kind of layer's attention inputs for a forward (global or sliding):
// the RoPE tables of this rank's tokens and the mask (mask.allowed
// undefined: plain causal SDPA).
struct LayerAttention {
  RopeTables rope;
  AttentionMask mask;
  const AttentionMask* MaskArg() const { return mask.allowed.defined() ? &mask : nullptr; }
};

// tables: (T, D) or (B, 1, T, D) of the whole sequence of seq_len tokens; window W > 0
// masks keys at or before q - W. Plain causal SDPA unless context
// parallelism or a window shorter than the sequence asks for a mask: the
// queries' positions against the keys'.
LayerAttention MakeLayerAttention(RopeTables tables, int64_t seq_len, int64_t window, launcher::Backend* cp,
                                  int cp_size, torch::Device device) {
  LayerAttention out{std::move(tables), {}};
  const bool windowed = window > 0 && seq_len > window;
  if (cp_size <= 1 && !windowed) return out;
  // This rank's tokens: their rotary angles (under CP, its chunks), and the
  // keys' positions (under CP, every rank's in gather order).
  auto mine = torch::arange(seq_len, torch::TensorOptions().dtype(torch::kLong).device(device));  // (T)
  auto keys = mine;
  if (cp_size > 1) {
    mine = ContextParallelPositions(seq_len, cp_size, cp->group().my_index).to(device);  // (T_local)
    keys = GatheredContextParallelPositions(seq_len, cp_size).to(device);                // (T)
    out.rope = {out.rope.cos.index_select(-2, mine), out.rope.sin.index_select(-2, mine)};
    out.mask.group = cp;
  }
  out.mask.allowed = mine.unsqueeze(1) >= keys.unsqueeze(0);  // (T_local, T): causal
  if (windowed) out.mask.allowed = out.mask.allowed & (keys.unsqueeze(0) > mine.unsqueeze(1) - window);
  if (cp_size <= 1 && plan::BandedAttention(seq_len, window)) out.mask.band = window;
  return out;
}

}  // namespace

torch::Tensor DecoderLMImpl::ForwardBlocks(const torch::Tensor& embeds, int64_t first, int64_t end,
                                           const torch::Tensor& positions) {
  TORCH_CHECK(0 <= first && first <= end && end <= desc_.layers, "DecoderLM::ForwardBlocks: layers [", first, ", ", end,
              ") of ", desc_.layers);
  const int cp_size = cp_ != nullptr ? cp_->group().size() : 1;
  const int64_t seq_len = embeds.size(1) * cp_size;  // the whole sequence
  // The layers of [first, end) are global or sliding (plan::IsSlidingLayer):
  // each kind's RoPE tables and mask are made once (a sliding layer's RoPE is
  // plan::RopeThetaOf / RopeScalingOf of that layer: Gemma 3's local base).
  int64_t a_sliding = -1, a_global = -1;
  for (int64_t i = first; i < end; ++i) (plan::IsSlidingLayer(desc_, i) ? a_sliding : a_global) = i;
  if (!rope_inv_freq_.defined() || rope_inv_freq_.device() != embeds.device()) {
    rope_inv_freq_ =
        RopeInverseFrequencyTensor(HeadDim(desc_), RopeTheta(desc_), RopeScalingOf(desc_), embeds.device());
    local_rope_inv_freq_ = torch::Tensor();
    mrope_axes_ = torch::Tensor();
    if (const auto mrope = plan::MropeOf(desc_)) {
      const std::vector<int> axes = plan::MropeFrequencyAxes(*mrope, HeadDim(desc_) / 2);
      mrope_axes_ = torch::tensor(std::vector<int64_t>(axes.begin(), axes.end()), torch::kLong).to(embeds.device());
    }
  }
  TORCH_CHECK(!positions.defined() || mrope_axes_.defined(),
              "DecoderLM: 3-D positions given to a decoder without M-RoPE (extra.mrope_section_*)");
  TORCH_CHECK(!positions.defined() || (positions.dim() == 3 && positions.size(0) == 3 &&
                                       positions.size(1) == embeds.size(0) && positions.size(2) == seq_len),
              "DecoderLM: M-RoPE positions must be (3, B, T) = (3, ", embeds.size(0), ", ", seq_len, "), got ",
              positions.sizes());
  auto tables_of = [&](int64_t layer) {
    const plan::RopeScaling scaling = plan::RopeScalingOf(desc_, layer);
    torch::Tensor inv_freq = rope_inv_freq_;
    if (plan::UsesLocalRope(desc_, layer)) {
      if (!local_rope_inv_freq_.defined()) {
        local_rope_inv_freq_ =
            RopeInverseFrequencyTensor(HeadDim(desc_), plan::RopeThetaOf(desc_, layer), scaling, embeds.device());
      }
      inv_freq = local_rope_inv_freq_;
    }
    if (positions.defined()) {
      return MakeMropeTables(positions.to(embeds.device()), inv_freq, mrope_axes_, plan::RopeAttentionFactor(scaling),
                             embeds.scalar_type());
    }
    return MakeRopeTables(seq_len, inv_freq, plan::RopeAttentionFactor(scaling), embeds.scalar_type());
  };
  LayerAttention global, sliding;
  if (a_global >= 0) global = MakeLayerAttention(tables_of(a_global), seq_len, 0, cp_, cp_size, embeds.device());
  if (a_sliding >= 0) {
    sliding = MakeLayerAttention(tables_of(a_sliding), seq_len, SlidingWindow(desc_), cp_, cp_size, embeds.device());
  }
  auto x = embeds;
  for (int64_t i = first; i < end; ++i) {
    auto* b = blocks[static_cast<size_t>(i)]->as<DecoderBlockImpl>();
    const LayerAttention& a = plan::IsSlidingLayer(desc_, i) ? sliding : global;
    if (recompute_ == plan::RecomputeGranularity::kFull) {
      x = RunRecomputed([b, a](const std::vector<torch::Tensor>& in) { return b->forward(in[0], a.rope, a.MaskArg()); },
                        {x});
    } else {
      x = b->forward(x, a.rope, a.MaskArg());
    }
  }
  return x;
}

void DecoderLMImpl::KeepStage(int64_t first, int64_t end, bool embeddings, bool head) {
  auto drop = [](torch::nn::Module& m) {
    torch::NoGradGuard no_grad;
    for (auto& p : m.parameters()) {
      p.set_data(torch::empty({0}, p.options()));
      p.set_requires_grad(false);
    }
  };
  const bool keep_embedding = embeddings || (head && desc_.tie_embeddings);
  if (!keep_embedding) drop(*embed_tokens);
  for (int64_t i = 0; i < desc_.layers; ++i) {
    if (i < first || i >= end) drop(*blocks[static_cast<size_t>(i)]);
  }
  if (!head) {
    drop(*final_norm);
    if (lm_head) drop(*lm_head);
  }
}

void DecoderLMImpl::SetRecompute(plan::RecomputeGranularity granularity) {
  recompute_ = granularity;
  for (const auto& block : *blocks) {
    block->as<DecoderBlockImpl>()->attn->recompute_core = granularity == plan::RecomputeGranularity::kSelective;
  }
}

torch::Tensor DecoderLMImpl::Logits(const torch::Tensor& hidden) {
  TORCH_CHECK(hidden.size(-1) == desc_.hidden, "DecoderLM::Logits: hidden must be (..., ", desc_.hidden, "), got ",
              hidden.sizes());
  return lm_head ? lm_head(hidden) : torch::linear(hidden, embed_tokens->weight);
}

torch::Tensor DecoderLMImpl::forward(const torch::Tensor& ids) {
  return Logits(ForwardEmbeds(Embed(ids)));
}

torch::Tensor DecoderLMImpl::RouterBalanceLoss() const {
  // The mean over the model's MoE layers, of which a pipeline stage ran only
  // its own: each stage's part is its layers' sum over the whole model's
  // count, so the stages' parts add up to the model's term.
  torch::Tensor sum;
  int64_t moe_layers = 0;
  for (const auto& block : *blocks) {
    const auto& moe = block->as<DecoderBlockImpl>()->moe;
    if (!moe) continue;
    ++moe_layers;
    if (!moe->balance_loss().defined()) continue;
    sum = sum.defined() ? sum + moe->balance_loss() : moe->balance_loss();
  }
  return sum.defined() ? sum / static_cast<double>(moe_layers) : sum;
}

std::vector<torch::Tensor> DecoderLMImpl::ForwardNoTokens() {
  std::vector<torch::Tensor> outputs;
  for (const auto& block : *blocks) {
    auto moe = block->as<DecoderBlockImpl>()->moe;
    if (!moe || !moe->expert_parallel()) continue;
    auto no_tokens = torch::zeros({0, desc_.hidden}, moe->router->weight.options()).requires_grad_(true);  // (0, C)
    auto* layer = moe.get();
    auto run = [layer](const std::vector<torch::Tensor>& in) { return layer->ForwardNoTokens(in[0]); };
    outputs.push_back(recompute_ == plan::RecomputeGranularity::kFull ? RunRecomputed(run, {no_tokens})
                                                                      : run({no_tokens}));  // (0, C)
  }
  return outputs;
}

void DecoderLMImpl::BackwardNoTokens(const std::vector<torch::Tensor>& outputs) {
  for (auto it = outputs.rbegin(); it != outputs.rend(); ++it) {
    if (it->requires_grad()) torch::autograd::backward({*it}, {torch::zeros_like(*it)});
  }
}

Status ShardDecoderForExpertParallel(DecoderLMImpl& model, ExpertParallelExchange* ep) {
  const auto& desc = model.desc();
  MAESTRO_RETURN_IF_ERROR(plan::CheckExpertParallelSplit(desc, ep->size()));  // the one rule, shared with the planner
  for (const auto& block : *model.blocks) {
    auto moe = block->as<DecoderBlockImpl>()->moe;
    if (moe && moe->router->weight.numel() > 0) moe->KeepExperts(ep);  // another stage's block is empty
  }
  return Status::Ok();
}

bool IsRoutedExpertParameter(const std::string& name) {
  return name.find(".moe.experts.") != std::string::npos;
}

StatusOr<DecoderLM> BuildDecoder(const plan::ModelDesc& desc, const ModelBuildOptions& options) {
  if (desc.kind != plan::ModelKind::kDecoder) {
    return Status::InvalidArgument(std::string("BuildDecoder: model kind is ") + plan::ModelKindName(desc.kind) +
                                   ", not decoder");
  }
  auto valid = ValidateModelDesc(desc);
  if (!valid.ok()) return valid;
  MAESTRO_RETURN_IF_ERROR(plan::CheckMrope(desc, "decoder"));
  ParamFactory params(options);
  return DecoderLM(desc, params);
}

}  // namespace maestro::runtime
