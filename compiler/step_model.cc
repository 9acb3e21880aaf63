// SPDX-License-Identifier: Apache-2.0
#include "compiler/step_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>

#include "base/checks.h"
#include "compiler/model.h"
#include "compiler/step_sum.h"
#include "plan/banded_attention.h"
#include "plan/loss_chunk.h"
#include "plan/model_desc.h"
#include "plan/runtime_support.h"
#include "plan/teacher_rows.h"
#include "plan/tensor_parallel_split.h"

namespace maestro::compiler {

namespace {

using step_terms::Bytes;
using step_terms::Part;
using step_terms::Phase;
using step_terms::StepSum;

Status CheckTpDivides(const plan::ModelDesc& d, const PassShape& s) {
  // The runtime's rule (plan/tensor_parallel_split.h); a projector's pass is
  // priced at any TP (the monolithic baseline runs it whole on every TP rank).
  if (d.kind != plan::ModelKind::kProjector) {
    if (const Status split = plan::CheckTensorParallelSplit(d, s.tp); !split.ok()) {
      return Status::InvalidArgument("PredictSectionPass: " + split.message());
    }
  }
  if (d.experts > 0 && (s.ep < 1 || d.experts % s.ep != 0)) {
    return Status::InvalidArgument("PredictSectionPass: ep = " + std::to_string(s.ep) + " must divide experts (" +
                                   std::to_string(d.experts) + ")");
  }
  return Status::Ok();
}

// ---- MoE MLP (runtime/models/decoder.cc MoeMlpImpl) on m tokens of this
// rank. Tokens per expert: m * k / E at capacity factor 1 (an even routing;
// the capacity factor of Switch Transformer, Fedus et al. 2021, sec. 2.2,
// with no token dropped) -- with EP each of the rank's E/ep experts gets the
// slots of the whole EP group, m * k / E * ep rows: the same FLOPs, larger
// GEMMs. The all-to-all itself is priced by the cost model (cost_model.cc).
void AddMoe(StepSum& sum, const plan::ModelDesc& d, const PassShape& s, double m) {
  const Bytes b{static_cast<double>(s.activation_bytes)};
  const double layers = static_cast<double>(plan::MoeLayerCount(d));  // Qwen-MoE's dense layers are priced as such
  const double h = static_cast<double>(d.hidden);
  const double experts = static_cast<double>(d.experts);
  const double k = static_cast<double>(std::max<int64_t>(d.experts_per_token, 1));
  const double ep = std::max(s.ep, 1);
  const double fe = static_cast<double>((d.moe_ffn_hidden > 0 ? d.moe_ffn_hidden : d.ffn_hidden) / s.tp);
  const double rows = m * k / experts * ep;  // per local expert
  const double local = experts / ep;
  const auto kF = Phase::kForward;
  const auto kB = Phase::kBackward;
  sum.Gemm("moe.router", Part::kBlocks, m, h, experts, layers);
  sum.Gemm("moe.experts gate_proj + up_proj", Part::kBlocks, rows, h, fe, 2 * layers * local);
  sum.Gemm("moe.experts down_proj", Part::kBlocks, rows, fe, h, layers * local);
  // Router softmax in fp32 and top-k (r4 w4 per expert), the balance term's
  // one-hot (w8 per slot and expert); per slot: index_select of the token
  // (r a w a per width), the weighting (r2 w1) and index_add (r2 w1); the
  // SwiGLU of every slot; backward the same chain's transposes.
  sum.Memory("moe router softmax + top-k + balance", Part::kBlocks, kF, {8 * experts, 4 * experts, 8 * k * experts}, m,
             layers);
  sum.Memory("moe router softmax'", Part::kBlocks, kB, {12 * experts}, m, layers);
  sum.Memory("moe gather, weight, scatter-add", Part::kBlocks, kF, {b.Act(2 * h), b.Act(3 * h), b.Act(3 * h)}, m * k,
             layers);
  sum.Memory("moe gather, weight, scatter-add", Part::kBlocks, kB,
             {b.Act(2 * h), b.Act(3 * h), b.Act(3 * h), b.Act(3 * h)}, m * k, layers);
  sum.Memory("moe silu * up", Part::kBlocks, kF, {b.Act(2 * fe), b.Act(3 * fe)}, m * k, layers);
  sum.Memory("moe silu * up", Part::kBlocks, kB, {b.Act(3 * fe), b.Act(3 * fe), b.Act(3 * fe)}, m * k, layers);
  const double e = b.a;
  sum.Parameters("moe router", h * experts, layers, e);
  sum.Parameters("moe expert weights (this rank's E/ep)", h * fe, 3 * layers * local, e);
  const double shared = static_cast<double>(static_cast<int64_t>(ExtraValue(d, "shared_expert_ffn_hidden", 0)) / s.tp);
  if (shared > 0) {
    // Qwen2-MoE's shared expert: a dense SwiGLU on every token and its gate.
    sum.Gemm("moe.shared_expert gate_proj + up_proj", Part::kBlocks, m, h, shared, 2 * layers);
    sum.Gemm("moe.shared_expert down_proj", Part::kBlocks, m, shared, h, layers);
    sum.Gemm("moe.shared_expert_gate", Part::kBlocks, m, h, 1, layers);
    sum.Memory("moe shared silu * up, sigmoid gate", Part::kBlocks, kF,
               {b.Act(2 * shared), b.Act(3 * shared), b.Act(3 * h)}, m, layers);
    sum.Memory("moe shared silu * up, sigmoid gate", Part::kBlocks, kB,
               {b.Act(3 * shared), b.Act(3 * shared), b.Act(3 * shared), b.Act(3 * h)}, m, layers);
    sum.Parameters("moe shared expert weights", h * shared, 3 * layers, e);
  }
}

// `count` RMSNorms of `width` elements per token on m tokens (RmsNorm of
// runtime/models/layers.h: at::rms_norm, or the eager fp32 chain).
void AddRmsNorms(StepSum& sum, const PassShape& s, const std::string& what, Part part, double width, double m,
                 double count) {
  const Bytes b{static_cast<double>(s.activation_bytes)};
  const auto kF = Phase::kForward;
  const auto kB = Phase::kBackward;
  const double h = width;
  if (s.fused.rms_norm) {
    // at::rms_norm: one kernel forward (r x, w y, the fp32 rstd per token);
    // backward: dx (r g, x, w dx) and the weight grad's reduction (r g, x).
    sum.Memory(what + " (at::rms_norm)", part, kF, {b.Act(2 * h)}, m, count);
    sum.Memory(what + " (at::rms_norm)", part, kB, {b.Act(3 * h), b.Act(2 * h)}, m, count);
    return;
  }
  // RmsNorm (layers.h), forward: to(f32) (r a w4); pow(2) r4 w4; mean r4; + eps;
  // rsqrt; x32 * r r4 w4; to(dtype) r4 w a; weight * (r a w a).
  const std::initializer_list<double> norm_fwd = {b.Cast(h), 8 * h, 4 * h, 0.0, 0.0, 8 * h, b.Cast(h), b.Act(2 * h)};
  // Its autograd backward: g * weight (r a w a); g * normed (r 1.5a w a)
  // and its sum over tokens (r a); to(dtype)' (cast); g * rsqrt (r4 w4);
  // g * x32 (r8 w4) and its row sum (r4); rsqrt' and + eps' scalars; mean'
  // expand (w4); pow' 2 * x * g (r8 w4); accumulating the two grads of x32
  // (r8 w4); to(f32)' (cast).
  const std::initializer_list<double> norm_bwd = {b.Act(2 * h), b.Act(3 * h), b.Act(h), b.Cast(h), 8 * h,
                                                  12 * h,       4 * h,        0.0,      0.0,       4 * h,
                                                  12 * h,       12 * h,       b.Cast(h)};
  sum.Memory(what + " (fp32 chain)", part, kF, norm_fwd, m, count);
  sum.Memory(what + " (fp32 chain)", part, kB, norm_bwd, m, count);
}

// ---- A decoder's RMSNorms on m tokens of this rank: two per layer (four:
// Gemma 3's sandwich norms) and the final one; with Qwen3's q/k norms, one
// over each query and key head too (q and kv elements per token on this
// rank, kv heads replicated when fewer than TP ranks; Gemma 3's are
// AddGemma3Extras').
void AddDecoderRmsNorms(StepSum& sum, const plan::ModelDesc& d, const PassShape& s, double m, double q, double kv) {
  const double h = static_cast<double>(d.hidden);
  const double layers = static_cast<double>(d.layers);
  const bool gemma = plan::Gemma3(d);
  AddRmsNorms(sum, s, gemma ? "rms_norm, 4 per layer" : "rms_norm, 2 per layer", Part::kBlocks, h, m,
              (gemma ? 4 : 2) * layers);
  AddRmsNorms(sum, s, "final rms_norm", Part::kPost, h, m, 1);
  if (plan::QkNorm(d) && !gemma) {
    AddRmsNorms(sum, s, "q_norm (per head)", Part::kBlocks, q, m, layers);
    AddRmsNorms(sum, s, "k_norm (per head)", Part::kBlocks, kv, m, layers);
  }
}

// ---- A KD teacher's top-K or sampled rows on m tokens of this rank
// (runtime/teacher_rows.cc): its head over chunks of plan::kLossChunkTokens
// tokens, forward only, then per chunk top-K (logits to fp32, one selection
// pass) or the draws (to fp32, / T, softmax, log_softmax and the entropy's
// product and sum, cumsum; the search reads n entries a position).
void AddTeacherRows(StepSum& sum, const plan::ModelDesc& d, const PassShape& s, double m) {
  const Bytes b{static_cast<double>(s.activation_bytes)};
  const double h = static_cast<double>(d.hidden);
  const double v = static_cast<double>(d.vocab);
  const double chunks = std::max(1.0, std::ceil(m / static_cast<double>(plan::kLossChunkTokens)));
  sum.Gemm("kd teacher head (rows)", Part::kPost, m / chunks, h, v, chunks, false, false);
  if (s.teacher_rows_form == static_cast<int>(plan::TeacherRowsForm::kTopK)) {
    sum.Memory("kd teacher top-K", Part::kPost, Phase::kForward, {b.Cast(v), 4 * v}, m, 1);
  } else {
    sum.Memory("kd teacher draws", Part::kPost, Phase::kForward, {b.Cast(v), 8 * v, 8 * v, 8 * v, 12 * v, 8 * v}, m, 1);
  }
}

// ---- A decoder sink's loss (runtime/vocab_loss.cc PerSampleLoss) on m tokens of
// this rank: the LM head and cross-entropy, a KD student's frozen teacher
// head and KL. The vocabulary loss runs in chunks of positions past
// plan::kLossWholeTokens (plan/loss_chunk.h): each chunk's head GEMM at the
// chunk's rows, and in backward each chunk's head and loss forwards again
// (RunRecomputed) before their backward.
void AddDecoderLoss(StepSum& sum, const plan::ModelDesc& d, const PassShape& s, double m) {
  const Bytes b{static_cast<double>(s.activation_bytes)};
  const double h = static_cast<double>(d.hidden);
  const double vocab = static_cast<double>(d.vocab);
  const auto kF = Phase::kForward;
  const auto kB = Phase::kBackward;
  const double loss_samples = std::max(1.0, std::ceil(s.samples - 1e-9));
  const auto loss_positions = static_cast<int64_t>(std::max(1.0, std::ceil(m / loss_samples)));
  const bool loss_chunked = sum.train() && s.lm_loss && s.loss_in_chunks &&
                            plan::LossIsChunked(static_cast<int64_t>(loss_samples), loss_positions);
  const double chunks =
      loss_chunked
          ? std::ceil(static_cast<double>(loss_positions) /
                      static_cast<double>(plan::LossChunkPositions(static_cast<int64_t>(loss_samples), loss_positions)))
          : 1.0;
  const double chunk_rows = m / chunks;
  if (s.lm_loss) {
    // The LM head (not split by TP: decoder.cc shards only the blocks).
    sum.Gemm("lm_head", Part::kPost, chunk_rows, h, vocab, chunks);
    // Vocabulary pass (runtime/vocab_loss.cc MaskedPositionLoss): logits.to(f32),
    // log_softmax (r4 w4), nll gather (scalar); backward: nll' zero-filled
    // fp32 grad (w4) + scatter, log_softmax' (r8 w4), to(f32)'.
    const std::initializer_list<double> ce_forward = {b.Cast(vocab), 8 * vocab, 0.0};
    sum.Memory("logits fp32 + cross-entropy", Part::kPost, kF, ce_forward, m, 1);
    sum.Memory("logits fp32 + cross-entropy", Part::kPost, kB, {4 * vocab, 0.0, 12 * vocab, b.Cast(vocab)}, m, 1);
    if (loss_chunked) {
      sum.GemmRecomputed("lm_head", Part::kPost, chunk_rows, h, vocab, chunks);
      sum.Memory("logits fp32 + cross-entropy (recomputed)", Part::kPost, kB, ce_forward, m, 1);
    }
    // Tied weights: the LM head's dW added to the embedding's grad (r2 w1).
    if (d.tie_embeddings) sum.Memory("tied embedding grad accumulation", Part::kPost, kB, {b.Act(3 * vocab * h)}, 1, 1);
  }
  if (s.kd_teacher_hidden > 0) {
    // KD (PerSampleLoss with teacher logits): the frozen teacher head on the
    // detached teacher hidden state, then the temperature-scaled KL.
    const double v = vocab;
    const double teacher_hidden = static_cast<double>(s.kd_teacher_hidden);
    sum.Gemm("kd teacher_head (frozen)", Part::kPost, chunk_rows, teacher_hidden, v, chunks, false, false);
    // Forward: teacher to(f32), / T; student to(f32), / T, log_softmax;
    // teacher log_softmax, exp, (t - s), *, sum.
    const std::initializer_list<double> kl_forward = {b.Cast(v), 8 * v, b.Cast(v), 8 * v,  8 * v,
                                                      8 * v,     8 * v, 12 * v,    12 * v, 4 * v};
    sum.Memory("kd KL", Part::kPost, kF, kl_forward, m, 1);
    if (loss_chunked) {
      sum.GemmRecomputed("kd teacher_head (frozen)", Part::kPost, chunk_rows, teacher_hidden, v, chunks);
      sum.Memory("kd KL (recomputed)", Part::kPost, kB, kl_forward, m, 1);
    }
    // Backward (the student side): sum' expand, mul', sub', log_softmax',
    // / T', to(f32)', and the accumulation into the logits' grad.
    sum.Memory("kd KL", Part::kPost, kB, {4 * v, 12 * v, 8 * v, 12 * v, 8 * v, b.Cast(v), b.Act(3 * v)}, m, 1);
  }
  if (s.kd_sparse_rows) {
    // KD from top-K or sampled rows (runtime/kd_rows.cc): no teacher logits;
    // the student's to(f32), / T, log_softmax over the vocabulary, then a
    // gather of K (or n) entries a position (negligible beside V).
    const double v = vocab;
    const std::initializer_list<double> kl_forward = {b.Cast(v), 8 * v, 8 * v};
    sum.Memory("kd KL (rows)", Part::kPost, kF, kl_forward, m, 1);
    if (loss_chunked) sum.Memory("kd KL (rows, recomputed)", Part::kPost, kB, kl_forward, m, 1);
    // Backward: the gather's zero-filled scatter, log_softmax', / T',
    // to(f32)', and the accumulation into the logits' grad.
    sum.Memory("kd KL (rows)", Part::kPost, kB, {4 * v, 12 * v, 8 * v, b.Cast(v), b.Act(3 * v)}, m, 1);
  }
  if (s.teacher_rows_form >= 0) AddTeacherRows(sum, d, s, m);
}

// ---- Causal flash SDPA on (B, H/tp, T, D) of t tokens, q wide on this rank; CP
// splits the queries: FLOPs as compiler/model.h counts them (4 * T/2 * q per token
// forward). A sliding window W shorter than T (Mistral; Gemma 3's local layers,
// plan::IsSlidingLayer) runs under its mask (AttentionMask; SDPA with a mask
// skips no block): in chunks of W queries over their band of keys when
// plan::BandedAttention and no CP (plan::BandedKeysPerQuery, about 2W keys
// per query), else over the whole T x T square; ModelFacts counts the
// window's useful FLOPs.
void AddDecoderAttention(StepSum& sum, const plan::ModelDesc& d, const PassShape& s, double all_tokens, double t,
                         double q, double head_dim) {
  const double layers = static_cast<double>(d.layers);
  const auto window = plan::SlidingWindow(d);
  const bool windowed = window > 0 && t > static_cast<double>(window);
  const double masked_layers = windowed ? static_cast<double>(plan::SlidingLayerCount(d)) : 0.0;
  if (masked_layers > 0) {
    const auto tokens = static_cast<int64_t>(t);
    const bool banded = s.cp <= 1 && plan::BandedAttention(tokens, window);
    const double keys = banded ? plan::BandedKeysPerQuery(tokens, window) : t;
    // Banded: one SDPA per chunk of W queries (each its own kernels).
    const double chunks = banded ? std::ceil(t / static_cast<double>(window)) : 1.0;
    sum.Attention(banded ? "(SDPA in the window's band, per chunk)" : "(SDPA under the window's mask)",
                  4 * all_tokens / s.cp * keys * q / chunks, head_dim, banded ? keys : t, masked_layers * chunks);
  }
  if (layers > masked_layers) {
    sum.Attention("(causal SDPA)", 4 * all_tokens / s.cp * (t / 2) * q, head_dim, t, layers - masked_layers);
  }
}

// ---- Gemma 3's kernels beyond Llama's (its 2 more norms per layer are in
// AddDecoderRmsNorms, GeGLU costs SwiGLU's bytes): q/k norms (fp32 chains at
// this rank's q, kv widths), q * scale (query_pre_attn_scalar != head_dim), embeds * sqrt(C).
void AddGemma3Extras(StepSum& sum, const plan::ModelDesc& d, const PassShape& s, double m, double q, double kv) {
  const Bytes b{static_cast<double>(s.activation_bytes)};
  const double layers = static_cast<double>(d.layers);
  const double h = static_cast<double>(d.hidden);
  // Per element as AddDecoderRmsNorms' chain (unit offset: the product in fp32, then one cast), k's too.
  for (const auto& [what, w] : {std::pair<const char*, double>{"q_norm (fp32 chain)", q}, {"k_norm", kv}}) {
    sum.Memory(what, Part::kBlocks, Phase::kForward, {b.Cast(w), 8 * w, 4 * w, 8 * w, 8 * w, b.Cast(w)}, m, layers);
    sum.Memory(what, Part::kBlocks, Phase::kBackward,
               {b.Cast(w), 8 * w, 12 * w, 4 * w, 12 * w, 12 * w, 12 * w, b.Cast(w)}, m, layers);
  }
  if (std::abs(plan::AttentionScale(d) * std::sqrt(static_cast<double>(plan::HeadDim(d))) - 1.0) > 1e-12) {
    sum.Memory("query scale", Part::kBlocks, Phase::kForward, {b.Act(2 * q)}, m, layers);
    sum.Memory("query scale", Part::kBlocks, Phase::kBackward, {b.Act(2 * q)}, m, layers);
  }
  sum.Memory("embedding scale", Part::kPre, Phase::kForward, {b.Act(2 * h)}, m, 1);
  sum.Memory("embedding scale", Part::kPre, Phase::kBackward, {b.Act(2 * h)}, m, 1);
}

// ---- Decoder (runtime/models/decoder.cc, layers.h; section_forward.cc's loss).
void AddDecoder(StepSum& sum, const plan::ModelDesc& d, const PassShape& s, double m, double all_tokens) {
  const Bytes b{static_cast<double>(s.activation_bytes)};
  const double head_dim = static_cast<double>(d.head_dim > 0 ? d.head_dim : d.hidden / d.heads);
  const double layers = static_cast<double>(d.layers);
  const double t = s.attention_context > 0 ? s.attention_context : s.tokens_per_sample;
  const double h = static_cast<double>(d.hidden);
  const double q = static_cast<double>(d.heads / s.tp) * head_dim;  // query width on this rank
  const double kv_heads = d.kv_heads >= s.tp ? static_cast<double>(d.kv_heads / s.tp) : 1.0;
  const double kv = kv_heads * head_dim;  // key / value width on this rank
  const bool moe = d.experts > 0;
  // Layers with a dense SwiGLU MLP: all of a dense decoder's, a MoE
  // decoder's between its MoE layers (plan::IsMoeLayer; Qwen-MoE).
  const double dense_layers = static_cast<double>(d.layers - plan::MoeLayerCount(d));
  const double f = dense_layers > 0 ? static_cast<double>(d.ffn_hidden / s.tp) : 0.0;  // its width on this rank
  const double vocab = static_cast<double>(d.vocab);
  const bool gqa = kv < q;
  const bool qkv_bias = ExtraFlag(d, "qkv_bias", false);
  const auto kF = Phase::kForward;
  const auto kB = Phase::kBackward;

  // ---- GEMMs (GqaAttention, SwiGluMlp).
  sum.Gemm("attn.q_proj", Part::kBlocks, m, h, q, layers);
  sum.Gemm("attn.k_proj + v_proj", Part::kBlocks, m, h, kv, 2 * layers);
  sum.Gemm("attn.o_proj", Part::kBlocks, m, q, h, layers);
  if (moe) AddMoe(sum, d, s, m);
  if (dense_layers > 0) {
    sum.Gemm("mlp.gate_proj + up_proj", Part::kBlocks, m, h, f, 2 * dense_layers);
    sum.Gemm("mlp.down_proj", Part::kBlocks, m, f, h, dense_layers);
  }

  AddDecoderAttention(sum, d, s, all_tokens, t, q, head_dim);

  // ---- Memory-bound kernels, bytes read + written per token.
  const bool gemma = plan::Gemma3(d);
  AddDecoderRmsNorms(sum, d, s, m, q, kv);
  if (gemma) AddGemma3Extras(sum, d, s, m, q, kv);
  // RoPE (ApplyRope): -x2 (half the width, r w), cat (r1 w1), x * cos, rotated
  // * sin (r1 w1 each, the tables broadcast), + (r2 w1); per element of q or k.
  for (const auto& [what, w] : {std::pair<const char*, double>{"rope q", q}, {"rope k", kv}}) {
    sum.Memory(what, Part::kBlocks, kF, {b.Act(w), b.Act(2 * w), b.Act(2 * w), b.Act(2 * w), b.Act(3 * w)}, m, layers);
    // Backward: g * sin, g * cos, neg', the two narrow' (zero + copy into the
    // full width), two accumulations.
    sum.Memory(what, Part::kBlocks, kB,
               {b.Act(2 * w), b.Act(2 * w), b.Act(w), b.Act(2 * w), b.Act(2 * w), b.Act(3 * w), b.Act(3 * w)}, m,
               layers);
  }
  if (gqa && !s.fused.gqa_in_sdpa) {
    // repeat_interleave of K and V to H heads (r kv w q, each) and its
    // backward, a sum over the group (r q w kv, each).
    sum.Memory("gqa repeat_interleave k, v", Part::kBlocks, kF, {b.Act(kv + q), b.Act(kv + q)}, m, layers);
    sum.Memory("gqa repeat_interleave k, v", Part::kBlocks, kB, {b.Act(q + kv), b.Act(q + kv)}, m, layers);
  }
  // SDPA output (B, H, T, D) -> transpose(1, 2).reshape: a copy; in
  // backward, grad_out made contiguous for flash, and the grads of q, k, v
  // back from (B, H, T, D) to (B, T, H*D) rows for the GEMMs.
  sum.Memory("attention output layout copy", Part::kBlocks, kF, {b.Act(2 * q)}, m, layers);
  sum.Memory("attention layout copies", Part::kBlocks, kB, {b.Act(2 * q), b.Act(2 * q), b.Act(2 * kv), b.Act(2 * kv)},
             m, layers);
  if (qkv_bias) {
    sum.Memory("qkv bias grads (row sums)", Part::kBlocks, kB, {b.Act(q), b.Act(kv), b.Act(kv)}, m, layers);
  }
  // SwiGLU: silu (r1 w1), * up (r2 w1); backward g * up, g * silu, silu'.
  // Gemma's GeGLU: the tanh GELU in silu's place, one kernel each way too.
  if (dense_layers > 0) {
    const char* what = gemma ? "gelu_tanh * up" : "silu * up";
    sum.Memory(what, Part::kBlocks, kF, {b.Act(2 * f), b.Act(3 * f)}, m, dense_layers);
    sum.Memory(what, Part::kBlocks, kB, {b.Act(3 * f), b.Act(3 * f), b.Act(3 * f)}, m, dense_layers);
  }
  // Residual adds (r2 w1) x 2; backward: the residual stream's grad
  // accumulated at the two branch points, the normed input's grads from
  // q/k/v (2 adds) and from gate/up (1 add).
  sum.Memory("residual adds", Part::kBlocks, kF, {b.Act(3 * h), b.Act(3 * h)}, m, layers);
  sum.Memory("gradient accumulations (residual, shared inputs)", Part::kBlocks, kB,
             {b.Act(3 * h), b.Act(3 * h), b.Act(3 * h), b.Act(3 * h), b.Act(3 * h)}, m, layers);
  // Embedding: gather forward (r1 w1); backward: index scatter (r1 w1) per
  // token, the dense (V, h) grad zeroed (w1 per element).
  sum.Memory("embedding gather", Part::kPre, kF, {b.Act(2 * h)}, m, 1);
  sum.Memory("embedding scatter", Part::kPre, kB, {b.Act(2 * h)}, m, 1);
  sum.Memory("embedding dense grad", Part::kPre, kB, {b.Act(vocab * h)}, 1, 1);

  AddDecoderLoss(sum, d, s, m);

  if (sum.autocast()) {
    // The residual stream is fp32 under autocast (the fp32 embedding table's
    // rows), and so is the RMSNorm's output: q, k, v, gate and up each cast
    // their input to bf16 (autocast caches no activation); backward casts
    // each gradient back.
    const double casts = 3 * layers + 2 * dense_layers;  // q, k, v; gate and up of a dense MLP
    sum.Memory("autocast: norm outputs to bf16 (linear inputs)", Part::kBlocks, kF, {b.Cast(h)}, m, casts);
    sum.Memory("autocast: their gradients to fp32", Part::kBlocks, kB, {b.Cast(h)}, m, casts);
    sum.AutocastWeights("q, o weights", Part::kBlocks, h * q, 2 * layers);
    sum.AutocastWeights("k, v weights", Part::kBlocks, h * kv, 2 * layers);
    if (dense_layers > 0) sum.AutocastWeights("mlp weights", Part::kBlocks, h * f, 3 * dense_layers);
    if (s.lm_loss) sum.AutocastWeights("lm head", Part::kPost, vocab * h, 1);
  }

  // ---- Parameters of this rank (optimizer and .grad accumulation).
  const double e = b.a;
  sum.Parameters("attention weights (q)", h * q, layers, e);
  sum.Parameters("attention weights (k, v)", h * kv, 2 * layers, e);
  sum.Parameters("attention weights (o)", q * h, layers, e);
  if (dense_layers > 0) sum.Parameters("mlp weights", h * f, 3 * dense_layers, e);
  sum.Parameters("norm weights", h, (gemma ? 4 : 2) * layers + 1, e);
  if (plan::QkNorm(d)) sum.Parameters("q/k norm weights", 2 * head_dim, layers, e);
  if (qkv_bias) {
    sum.Parameters("q bias", q, layers, e);
    sum.Parameters("k, v biases", kv, 2 * layers, e);
  }
  sum.Parameters("embedding (+ lm_head when untied)", vocab * h, d.tie_embeddings ? 1 : 2, e);
}

// ---- Encoder blocks (runtime/models/encoders.cc EncoderBlockImpl): pre-norm
// LayerNorm (one fused kernel; backward: input grad + weight/bias grads),
// q/k/v (fused or separate) and out projections with biases, non-causal
// SDPA per context, a 2-layer MLP with GELU (or quick GELU: 3 kernels).
void AddEncoderBlocks(StepSum& sum, const plan::ModelDesc& d, const PassShape& s, double m, double all_tokens,
                      double context) {
  const Bytes b{static_cast<double>(s.activation_bytes)};
  const double layers = static_cast<double>(d.layers);
  const double h = static_cast<double>(d.hidden);
  const double w = h / s.tp;  // attention width on this rank
  const double f = static_cast<double>(d.ffn_hidden / s.tp);
  const double head_dim = h / static_cast<double>(d.heads);
  const bool quick_gelu = ExtraFlag(d, "quick_gelu", false);
  const auto kF = Phase::kForward;
  const auto kB = Phase::kBackward;
  sum.Gemm("attn.qkv", Part::kBlocks, m, h, 3 * w, layers);
  sum.Gemm("attn.out", Part::kBlocks, m, w, h, layers);
  // Qwen2.5-VL: a SwiGLU MLP (gate, up, down; silu and the product as the
  // decoder's) and window attention on the blocks outside fullatt_block_indexes.
  const bool swiglu = d.kind == plan::ModelKind::kVit && plan::VitLayout(d) == plan::kVitLayoutQwen25Vl;
  sum.Gemm(swiglu ? "mlp.gate_proj + up_proj" : "mlp.fc1", Part::kBlocks, m, h, f, swiglu ? 2 * layers : layers);
  sum.Gemm(swiglu ? "mlp.down_proj" : "mlp.fc2", Part::kBlocks, m, f, h, layers);
  // Every sequence attends within its context (one image's patches, one
  // clip's frames; a window's patches): 4 * context * width FLOPs per token forward.
  double window_layers = 0;
  for (int64_t i = 0; i < d.layers; ++i) window_layers += plan::IsFullAttentionVitBlock(d, i) ? 0 : 1;
  const double side = static_cast<double>(plan::VitMergerWindow(d) * plan::SpatialMerge(d));
  const double window = std::min(context, side * side);
  sum.Attention("(SDPA, per context)", 4 * all_tokens / s.cp * context * w, head_dim, context, layers - window_layers);
  if (window_layers > 0) {
    sum.Attention("(SDPA, per window)", 4 * all_tokens / s.cp * window * w, head_dim, window, window_layers);
  }
  sum.Memory("layer_norm, 2 per layer", Part::kBlocks, kF, {b.Act(2 * h)}, m, 2 * layers);
  sum.Memory("layer_norm, 2 per layer", Part::kBlocks, kB, {b.Act(3 * h), b.Act(2 * h)}, m, 2 * layers);
  sum.Memory("attention layout copies", Part::kBlocks, kF, {b.Act(2 * w)}, m, layers);
  sum.Memory("attention layout copies", Part::kBlocks, kB, {b.Act(2 * w), b.Act(6 * w)}, m, layers);
  if (swiglu) {  // silu(gate) and its product with up, forward and backward
    sum.Memory("silu * up", Part::kBlocks, kF, {b.Act(2 * f), b.Act(3 * f)}, m, layers);
    sum.Memory("silu * up", Part::kBlocks, kB, {b.Act(3 * f), b.Act(3 * f), b.Act(3 * f)}, m, layers);
  } else if (quick_gelu) {
    sum.Memory("quick_gelu", Part::kBlocks, kF, {b.Act(2 * f), b.Act(2 * f), b.Act(3 * f)}, m, layers);
    sum.Memory("quick_gelu", Part::kBlocks, kB, {b.Act(3 * f), b.Act(3 * f), b.Act(3 * f), b.Act(3 * f)}, m, layers);
  } else {
    sum.Memory("gelu", Part::kBlocks, kF, {b.Act(2 * f)}, m, layers);
    sum.Memory("gelu", Part::kBlocks, kB, {b.Act(3 * f)}, m, layers);
  }
  sum.Memory("bias grads (row sums)", Part::kBlocks, kB, {b.Act(3 * w), b.Act(h), b.Act(f), b.Act(h)}, m, layers);
  if (sum.autocast()) {
    // LayerNorm runs in fp32 under autocast (its output fp32), so every
    // linear reading a norm's output casts it to bf16 first: the fused qkv
    // (or q, k and v apart: CLIP, SigLIP, Whisper) and fc1; backward casts each
    // gradient back (and sums the separate projections' in fp32).
    const int layout = plan::VitLayout(d);
    const bool separate_qkv =
        layout == plan::kVitLayoutClip || layout == plan::kVitLayoutSiglip || d.kind == plan::ModelKind::kAudioEncoder;
    const double casts = separate_qkv ? 4 : 2;
    sum.Memory("autocast: norm outputs to bf16 (linear inputs)", Part::kBlocks, kF, {b.Cast(h)}, m, casts * layers);
    sum.Memory("autocast: their gradients to fp32", Part::kBlocks, kB, {b.Cast(h)}, m, casts * layers);
    if (separate_qkv) sum.Memory("q, k, v input gradients summed", Part::kBlocks, kB, {12 * h, 12 * h}, m, layers);
    sum.AutocastWeights("qkv, out, fc1, fc2 weights", Part::kBlocks, h * w, (separate_qkv ? 4 : 2) * layers);
    sum.AutocastWeights("qkv, out, fc1, fc2 weights", Part::kBlocks, h * f, 2 * layers);
    sum.AutocastWeights("qkv, out, fc1, fc2 biases", Part::kBlocks, h, (separate_qkv ? 6 : 4) * layers);
  }
  sum.Memory("residual adds", Part::kBlocks, kF, {b.Act(3 * h), b.Act(3 * h)}, m, layers);
  sum.Memory("gradient accumulations (residual)", Part::kBlocks, kB, {b.Act(3 * h), b.Act(3 * h)}, m, layers);
  const double e = b.a;
  sum.Parameters("attention weights (qkv, out)", h * w, 4 * layers, e);
  sum.Parameters("mlp weights", h * f, (swiglu ? 3 : 2) * layers, e);
  sum.Parameters("biases and layer norms", h, (swiglu ? 4 : 6) * layers, e);  // RMSNorms: weights only
  sum.Parameters("mlp bias", f, (swiglu ? 2 : 1) * layers, e);
}

void AddLayerNorm(StepSum& sum, const char* name, Part part, const Bytes& b, double h, double m) {
  sum.Memory(name, part, Phase::kForward, {b.Act(2 * h)}, m, 1);
  sum.Memory(name, part, Phase::kBackward, {b.Act(3 * h), b.Act(2 * h)}, m, 1);
  sum.Parameters(name, h, 2, b.a);
}

void AddVit(StepSum& sum, const plan::ModelDesc& d, const PassShape& s, double m, double all_tokens) {
  const Bytes b{static_cast<double>(s.activation_bytes)};
  const double h = static_cast<double>(d.hidden);
  const double temporal = ExtraValue(d, "temporal_patch", 1);
  const double patch_in = static_cast<double>(d.channels) * temporal * static_cast<double>(d.patch_size * d.patch_size);
  const double context = s.attention_context > 0 ? s.attention_context : s.tokens_per_sample;
  // The patch stem: a conv with stride = kernel is a GEMM over patches; the
  // pixels need no gradient.
  sum.Gemm("patch_embed (conv as GEMM)", Part::kPre, m, patch_in, h, 1, /*input_grad=*/false);
  sum.Parameters("patch_embed", patch_in * h, 1, b.a);
  if (ExtraFlag(d, "pos_embed", true)) {  // learned positions (Qwen2-VL: 2D rotary, none)
    sum.Memory("position embedding add", Part::kPre, Phase::kForward, {b.Act(3 * h)}, m, 1);
    sum.Memory("position embedding grad", Part::kPre, Phase::kBackward, {b.Act(2 * h)}, m, 1);
    sum.Parameters("position embedding", h * context, 1, b.a);
  }
  sum.AutocastWeights("patch_embed", Part::kPre, patch_in * h, 1);
  if (ExtraFlag(d, "pre_norm", false)) AddLayerNorm(sum, "pre_norm", Part::kPre, b, h, m);
  if (plan::IsQwenVisionLayout(plan::VitLayout(d))) {
    // 2-D RoPE on q and k in fp32 (runtime/models/encoders.cc, as HF's
    // apply_rotary_pos_emb_vision): to(fp32), -x2, cat, x * cos, rotated *
    // sin, +, to(bf16); backward: the casts', the products', neg', the two
    // halves into the full width, the accumulation.
    const double w = h / s.tp;
    const double layers = static_cast<double>(d.layers);
    for (const char* what : {"rope q (fp32)", "rope k (fp32)"}) {
      sum.Memory(what, Part::kBlocks, Phase::kForward, {b.Cast(w), 4 * w, 8 * w, 8 * w, 8 * w, 12 * w, b.Cast(w)}, m,
                 layers);
      sum.Memory(what, Part::kBlocks, Phase::kBackward,
                 {b.Cast(w), 8 * w, 8 * w, 4 * w, 8 * w, 8 * w, 12 * w, b.Cast(w)}, m, layers);
    }
  }
  AddEncoderBlocks(sum, d, s, m, all_tokens, context);
  if (ExtraFlag(d, "final_norm", true)) AddLayerNorm(sum, "final_norm", Part::kPost, b, h, m);
  const double merge = ExtraValue(d, "spatial_merge", 0);
  if (merge > 0) {
    // Patch merger (Qwen2-VL): LayerNorm, then merge^2 neighbours' rows as one
    // (h merge^2 wide), fc1, GELU, fc2 to out_dim.
    const double in = h * merge * merge;
    // TP splits the merger's inner units (encoders.h: fc1 rows, fc2 columns).
    const double mid = (ExtraValue(d, "merger_hidden", 0) > 0 ? ExtraValue(d, "merger_hidden", 0) : in) / s.tp;
    const double rows = m / (merge * merge);
    const double out = static_cast<double>(d.out_dim);
    AddLayerNorm(sum, "merger_norm", Part::kPost, b, h, m);
    sum.Gemm("merger.fc1", Part::kPost, rows, in, mid, 1);
    sum.Memory("merger gelu", Part::kPost, Phase::kForward, {b.Act(2 * mid)}, rows, 1);
    sum.Memory("merger gelu", Part::kPost, Phase::kBackward, {b.Act(3 * mid)}, rows, 1);
    sum.Gemm("merger.fc2", Part::kPost, rows, mid, out, 1);
    sum.Parameters("merger weights", in * mid + mid * out, 1, b.a);
    if (sum.autocast()) {
      sum.Memory("autocast: merger norm output to bf16", Part::kPost, Phase::kForward, {b.Cast(h)}, m, 1);
      sum.Memory("autocast: its gradient to fp32", Part::kPost, Phase::kBackward, {b.Cast(h)}, m, 1);
      sum.AutocastWeights("merger fc1", Part::kPost, in * mid, 1);
      sum.AutocastWeights("merger fc2", Part::kPost, mid * out, 1);
    }
  }
}

void AddAudio(StepSum& sum, const plan::ModelDesc& d, const PassShape& s, double m, double all_tokens) {
  const Bytes b{static_cast<double>(s.activation_bytes)};
  const double h = static_cast<double>(d.hidden);
  const double mel = static_cast<double>(d.mel_bins);
  const double context = s.attention_context > 0 ? s.attention_context : s.tokens_per_sample;
  // conv1 (mel -> h, kernel 3) at the frame rate (2 m rows; the mel input
  // needs no gradient), GELU; conv2 (h -> h, kernel 3, stride 2), GELU; the
  // position embedding add.
  sum.Gemm("conv1 (as GEMM)", Part::kPre, 2 * m, 3 * mel, h, 1, /*input_grad=*/false);
  sum.Memory("conv1 gelu", Part::kPre, Phase::kForward, {b.Act(4 * h)}, m, 1);
  sum.Memory("conv1 gelu", Part::kPre, Phase::kBackward, {b.Act(6 * h)}, m, 1);
  sum.Gemm("conv2 (as GEMM)", Part::kPre, m, 3 * h, h, 1);
  sum.Memory("conv2 gelu + position add", Part::kPre, Phase::kForward, {b.Act(2 * h), b.Act(3 * h)}, m, 1);
  sum.Memory("conv2 gelu", Part::kPre, Phase::kBackward, {b.Act(3 * h)}, m, 1);
  sum.Parameters("convs", 3 * mel * h + 3 * h * h, 2, b.a);
  AddEncoderBlocks(sum, d, s, m, all_tokens, context);
  AddLayerNorm(sum, "final_norm", Part::kPost, b, h, m);
}

// runtime/models/encoders.cc MlpProjector: Linear(in -> out), GELU,
// Linear(out -> out), with biases.
void AddProjector(StepSum& sum, const plan::ModelDesc& d, const PassShape& s, double m) {
  const Bytes b{static_cast<double>(s.activation_bytes)};
  const double in = static_cast<double>(d.in_dim), out = static_cast<double>(d.out_dim);
  // TP splits the inner units (encoders.h: fc1 rows, fc2 columns).
  const double inner = out / s.tp;
  sum.Gemm("fc1", Part::kBlocks, m, in, inner, 1);
  sum.Memory("gelu", Part::kBlocks, Phase::kForward, {b.Act(2 * inner)}, m, 1);
  sum.Memory("gelu", Part::kBlocks, Phase::kBackward, {b.Act(3 * inner)}, m, 1);
  sum.Gemm("fc2", Part::kBlocks, m, inner, out, 1);
  sum.Memory("bias grads", Part::kBlocks, Phase::kBackward, {b.Act(inner), b.Act(out)}, m, 1);
  sum.Parameters("weights", in * inner + inner * out, 1, b.a);
  sum.Parameters("biases", inner + out, 1, b.a);
}

}  // namespace

double TrainGemmSeconds(double m, double k, double n, const DeviceProfile& device) {
  const auto one = [&](double gm, double gk, double gn) {
    return std::max(2 * gm * gk * gn / device.GemmFlopsPerSecond(gm, gk, gn), device.kernel_launch_seconds);
  };
  // forward y (m, n) = x (m, k) W^T; dX (m, k) = dY (m, n) W: m rows, inner n;
  // dW (n, k) = dY^T (n, m) x: n rows, inner m.
  return one(m, k, n) + one(m, n, k) + one(n, m, k);
}

PassShape SectionSpeedShape(const plan::ModelDesc& desc, int64_t micro_batch, int64_t seq_len,
                            const std::string& precision) {
  const bool decoder = desc.kind == plan::ModelKind::kDecoder;
  const bool mixed = precision == "mixed";
  const int64_t side = decoder ? 0 : desc.image_size / desc.patch_size;
  const double tokens = decoder ? static_cast<double>(seq_len) : static_cast<double>(side * side);
  PassShape shape;
  shape.samples = static_cast<double>(micro_batch);
  shape.tokens_per_sample = tokens;
  shape.attention_context = decoder ? 0 : tokens;
  shape.lm_loss = decoder;
  shape.loss_in_chunks = mixed;  // bf16 and fp32: section_speed.cc computes the loss whole
  shape.activation_bytes = precision == "fp32" ? 4 : 2;
  shape.param_bytes = mixed || precision == "fp32" ? 4 : 2;
  shape.fused.gqa_in_sdpa = plan::kRuntimeSupport.gqa_in_sdpa;
  shape.fused.rms_norm = plan::kRuntimeSupport.fused_rms_norm;
  shape.fused.adamw = mixed && plan::kRuntimeSupport.fused_adamw;
  return shape;
}

StatusOr<PassTimes> PredictSectionPass(const plan::ModelDesc& desc, const PassShape& shape,
                                       const DeviceProfile& device) {
  MAESTRO_RETURN_IF_ERROR(CheckModelShape(desc, "PredictSectionPass"));
  if (!(shape.samples > 0) || !(shape.tokens_per_sample > 0) || shape.tp < 1 || shape.cp < 1 || shape.pp < 1 ||
      (shape.activation_bytes != 2 && shape.activation_bytes != 4)) {
    return Status::InvalidArgument(
        "PredictSectionPass: samples and tokens_per_sample must be > 0, tp, cp, pp >= 1, activation_bytes 2 or 4");
  }
  MAESTRO_RETURN_IF_ERROR(CheckTpDivides(desc, shape));
  const double all_tokens = shape.samples * shape.tokens_per_sample;
  const double m = all_tokens / shape.cp;  // rows of every GEMM on this rank
  StepSum sum(device, shape.train);
  if (shape.fused.adamw) sum.UseFusedAdamW();
  if (shape.optimizer_shards > 1) sum.UseFlatShardAdamW(shape.optimizer_shards);
  if (shape.param_bytes > 0) sum.UseParamBytes(shape.param_bytes);
  if (shape.param_bytes == 4 && shape.activation_bytes == 2) sum.UseAutocast();
  if (!shape.keep_terms) sum.DropTerms();
  switch (desc.kind) {
    case plan::ModelKind::kDecoder: AddDecoder(sum, desc, shape, m, all_tokens); break;
    case plan::ModelKind::kVit: AddVit(sum, desc, shape, m, all_tokens); break;
    case plan::ModelKind::kAudioEncoder: AddAudio(sum, desc, shape, m, all_tokens); break;
    case plan::ModelKind::kProjector: AddProjector(sum, desc, shape, m); break;
  }
  PassTimes out;
  const auto at = [&](Part part) {
    return std::pair<double, double>{sum.Seconds(part, Phase::kForward), sum.Seconds(part, Phase::kBackward)};
  };
  auto [pre_f, pre_b] = at(Part::kPre);
  auto [blk_f, blk_b] = at(Part::kBlocks);
  auto [post_f, post_b] = at(Part::kPost);
  if (shape.train && shape.recompute) {
    blk_b += blk_f;  // the blocks' forward again before their backward
  } else if (shape.train && shape.recompute_attention_core) {
    blk_b += sum.attention_forward();  // selective: the attention cores' forward again
  }
  if (shape.pp == 1) {
    out.forward_seconds = pre_f + blk_f + post_f;
    out.backward_seconds = pre_b + blk_b + post_b;
  } else {
    // The busiest stage: its share of the blocks plus the heavier end.
    const bool post_heavier = post_f + post_b >= pre_f + pre_b;
    out.forward_seconds = blk_f / shape.pp + (post_heavier ? post_f : pre_f);
    out.backward_seconds = blk_b / shape.pp + (post_heavier ? post_b : pre_b);
  }
  if (shape.train) {
    out.optimizer_seconds = sum.optimizer() / shape.pp;
    out.accumulate_seconds = sum.accumulate() / shape.pp;
  }
  out.detail = sum.Breakdown(shape.train);
  const ModelFacts facts = ComputeModelFacts(
      desc, static_cast<int64_t>(shape.attention_context > 0 ? shape.attention_context : shape.tokens_per_sample));
  out.detail.model_flops = (shape.train ? 3 : 1) * facts.flops_per_token * all_tokens / (shape.tp * shape.cp);
  out.detail.mfu = out.detail.model_flops / std::max(out.detail.total_seconds, 1e-30) / device.peak_flops;
  return out;
}

StatusOr<StepBreakdown> PredictDecoderStepFromParts(const plan::ModelDesc& desc, int64_t micro_batch, int64_t seq_len,
                                                    int tp, const DeviceProfile& device, const FusedOps& fused) {
  if (desc.kind != plan::ModelKind::kDecoder || desc.experts > 0) {
    return Status::InvalidArgument("PredictDecoderStepFromParts: only dense decoders are modelled (kind = " +
                                   std::string(plan::ModelKindName(desc.kind)) +
                                   ", experts = " + std::to_string(desc.experts) + ")");
  }
  MAESTRO_RETURN_IF_ERROR(CheckModelShape(desc, "PredictDecoderStepFromParts"));
  if (micro_batch < 1 || seq_len < 1 || tp < 1) {
    return Status::InvalidArgument("PredictDecoderStepFromParts: micro_batch, seq_len and tp must be >= 1");
  }
  if (const Status split = plan::CheckTensorParallelSplit(desc, tp); !split.ok()) {
    return Status::InvalidArgument("PredictDecoderStepFromParts: " + split.message());
  }
  PassShape shape;
  shape.samples = static_cast<double>(micro_batch);
  shape.tokens_per_sample = static_cast<double>(seq_len);
  shape.train = true;
  shape.lm_loss = true;
  shape.loss_in_chunks = false;  // section_speed.cc computes its cross-entropy whole
  shape.tp = tp;
  shape.activation_bytes = 2;
  shape.fused = fused;
  MAESTRO_ASSIGN_OR_RETURN(PassTimes pass, PredictSectionPass(desc, shape, device));
  return pass.detail;
}

}  // namespace maestro::compiler
