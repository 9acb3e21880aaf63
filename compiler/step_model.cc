// SPDX-License-Identifier: Apache-2.0
#include "compiler/step_model.h"

#include <algorithm>
#include <initializer_list>
#include <string>

#include "base/checks.h"
#include "compiler/model.h"

namespace maestro::compiler {

namespace {

// Adds terms; every kernel costs at least the device's launch floor (eager
// libtorch issues kernels one by one from the CPU; a kernel shorter than the
// CPU-side cost of issuing it leaves the GPU waiting).
class StepSum {
 public:
  explicit StepSum(const DeviceProfile& device) : device_(device) {}

  double Kernel(double seconds) const { return std::max(seconds, device_.kernel_launch_seconds); }

  void Gemm(const std::string& name, double m, double k, double n, double times = 1) {
    const double s = times * TrainGemmSeconds(m, k, n, device_);
    out_.gemm_seconds += s;
    out_.terms.push_back({"gemm " + name, s, times * 3});
  }

  // Memory-bound kernels: each entry is one kernel's bytes read + written
  // per token (or per step with tokens = 1); `times` repeats the set (layers).
  void Memory(const std::string& name, std::initializer_list<double> bytes_per_token, double tokens, double times) {
    double s = 0;
    for (double b : bytes_per_token) s += Kernel(b * tokens / device_.memory_bytes_per_s);
    s *= times;
    out_.memory_seconds += s;
    out_.terms.push_back({"memory " + name, s, times * static_cast<double>(bytes_per_token.size())});
  }

  void Attention(double seconds, double kernels) {
    out_.attention_seconds += seconds;
    out_.terms.push_back({"attention (causal SDPA, forward + backward)", seconds, kernels});
  }

  // torch::optim::AdamW::step (torch/csrc/api/src/optim/adamw.cpp): per
  // parameter tensor of `numel` bf16 elements, 8 kernels:
  // exp_avg.mul_ (r2 w2), .add_(grad) (r4 w2), exp_avg_sq.mul_ (r2 w2),
  // .addcmul_(grad, grad) (r6 w2), sqrt (r2 w2), / sqrt(bc2) (r2 w2),
  // .add_(eps) (r2 w2), p.addcdiv_(m, denom) (r6 w2) bytes per element.
  // Weight decay 0 (decoder_speed.cc) skips p.mul_.
  void AdamW(const std::string& name, double numel, double tensors) {
    double s = 0;
    for (double b : {4.0, 6.0, 4.0, 8.0, 4.0, 4.0, 4.0, 8.0}) s += Kernel(b * numel / device_.memory_bytes_per_s);
    s *= tensors;
    out_.optimizer_seconds += s;
    out_.terms.push_back({"optimizer AdamW " + name, s, tensors * 8});
  }

  StepBreakdown Finish() {
    out_.total_seconds = out_.gemm_seconds + out_.attention_seconds + out_.memory_seconds + out_.optimizer_seconds;
    return out_;
  }

 private:
  const DeviceProfile& device_;
  StepBreakdown out_;
};

}  // namespace

double TrainGemmSeconds(double m, double k, double n, const DeviceProfile& device) {
  const auto one = [&](double gm, double gk, double gn) {
    return std::max(2 * gm * gk * gn / device.GemmFlopsPerSecond(gm, gk, gn), device.kernel_launch_seconds);
  };
  // forward y (m, n) = x (m, k) W^T; dX (m, k) = dY (m, n) W: m rows, inner n;
  // dW (n, k) = dY^T (n, m) x: n rows, inner m.
  return one(m, k, n) + one(m, n, k) + one(n, m, k);
}

StatusOr<StepBreakdown> PredictDecoderStepFromParts(const plan::ModelDesc& desc, int64_t micro_batch, int64_t seq_len,
                                                    int tp, const DeviceProfile& device) {
  if (desc.kind != plan::ModelKind::kDecoder || desc.experts > 0) {
    return Status::InvalidArgument("PredictDecoderStepFromParts: only dense decoders are modelled (kind = " +
                                   std::string(plan::ModelKindName(desc.kind)) +
                                   ", experts = " + std::to_string(desc.experts) + ")");
  }
  MAESTRO_RETURN_IF_ERROR(CheckModelShape(desc, "PredictDecoderStepFromParts"));
  if (micro_batch < 1 || seq_len < 1 || tp < 1) {
    return Status::InvalidArgument("PredictDecoderStepFromParts: micro_batch, seq_len and tp must be >= 1");
  }
  if (desc.heads % tp != 0 || desc.kv_heads % tp != 0 || desc.ffn_hidden % tp != 0) {
    return Status::InvalidArgument("PredictDecoderStepFromParts: tp = " + std::to_string(tp) +
                                   " must divide heads, kv_heads and ffn_hidden");
  }
  const double head_dim = static_cast<double>(desc.head_dim > 0 ? desc.head_dim : desc.hidden / desc.heads);
  const double layers = static_cast<double>(desc.layers);
  const double m = static_cast<double>(micro_batch * seq_len);  // tokens, M of every GEMM
  const double t = static_cast<double>(seq_len);
  const double h = static_cast<double>(desc.hidden);
  const double heads = static_cast<double>(desc.heads / tp);
  const double q = heads * head_dim;                                     // query width on this rank
  const double kv = static_cast<double>(desc.kv_heads / tp) * head_dim;  // key / value width on this rank
  const double f = static_cast<double>(desc.ffn_hidden / tp);
  const double vocab = static_cast<double>(desc.vocab);
  const bool gqa = desc.kv_heads != desc.heads;
  const bool qkv_bias = ExtraFlag(desc, "qkv_bias", false);

  StepSum sum(device);
  // ---- GEMMs (runtime/models/decoder.cc: GqaAttention, SwiGluMlp, Logits).
  sum.Gemm("attn.q_proj", m, h, q, layers);
  sum.Gemm("attn.k_proj + v_proj", m, h, kv, 2 * layers);
  sum.Gemm("attn.o_proj", m, q, h, layers);
  sum.Gemm("mlp.gate_proj + up_proj", m, h, f, 2 * layers);
  sum.Gemm("mlp.down_proj", m, f, h, layers);
  sum.Gemm("lm_head", m, h, vocab, 1);  // not split by TP (decoder.cc shards only the blocks)

  // ---- Attention: flash SDPA on (B, H/tp, T, D), FLOPs as compiler/model.h
  // counts them (4 * T/2 * q per token forward); forward + backward = 3x.
  {
    const double fwd_flops = 4 * m * (t / 2) * q;
    const double s = 3 * fwd_flops / device.AttentionFlopsPerSecond(head_dim, t, /*forward_and_backward=*/true);
    sum.Attention(layers * std::max(s, 2 * device.kernel_launch_seconds), 2 * layers);
  }

  // ---- Memory-bound kernels, bytes read + written per token (bf16 = 2 B,
  // fp32 = 4 B). A kernel of bytes 0 is a per-token scalar (launch only).
  // RmsNorm (runtime/models/layers.h), forward: to(f32) r2 w4; pow(2) r4 w4;
  // mean r4; + eps; rsqrt; x32 * r r4 w4; to(bf16) r4 w2; weight * r2 w2.
  const auto norm_fwd = {6 * h, 8 * h, 4 * h, 0.0, 0.0, 8 * h, 6 * h, 4 * h};
  // Its autograd backward: g * weight (r2 w2); g * normed (r4 w2) and its sum
  // over tokens (r2); to(bf16)' r2 w4; g * rsqrt (r8 w4 -> counted r4 w4);
  // g * x32 (r8 w4) and its row sum (r4); rsqrt' and +eps' scalars; mean'
  // expand (w4); pow' 2 * x * g (r8 w4); accumulating the two grads of x32
  // (r8 w4); to(f32)' r4 w2.
  const auto norm_bwd = {4 * h, 6 * h, 2 * h, 6 * h, 8 * h, 12 * h, 4 * h, 0.0, 0.0, 4 * h, 12 * h, 12 * h, 6 * h};
  sum.Memory("rms_norm forward (fp32 chain), 2 per layer + final", norm_fwd, m, 2 * layers + 1);
  sum.Memory("rms_norm backward (fp32 chain), 2 per layer + final", norm_bwd, m, 2 * layers + 1);
  // RoPE (ApplyRope): -x2 (half: r1 w1 -> 2 B/elem of the whole), cat (r2 w2),
  // x * cos (r2 w2), rotated * sin (r2 w2), + (r4 w2); per element of q or k.
  sum.Memory("rope forward q", {2 * q, 4 * q, 4 * q, 4 * q, 6 * q}, m, layers);
  sum.Memory("rope forward k", {2 * kv, 4 * kv, 4 * kv, 4 * kv, 6 * kv}, m, layers);
  // Backward: g * sin, g * cos, neg', the two narrow' (zero + copy into the
  // full width), two accumulations.
  sum.Memory("rope backward q", {4 * q, 4 * q, 2 * q, 4 * q, 4 * q, 6 * q, 6 * q}, m, layers);
  sum.Memory("rope backward k", {4 * kv, 4 * kv, 2 * kv, 4 * kv, 4 * kv, 6 * kv, 6 * kv}, m, layers);
  if (gqa) {
    // repeat_interleave of K and V to H heads (r kv w q, each) and its
    // backward, a sum over the group (r q w kv, each).
    sum.Memory("gqa repeat_interleave k, v forward", {2 * kv + 2 * q, 2 * kv + 2 * q}, m, layers);
    sum.Memory("gqa repeat_interleave k, v backward", {2 * q + 2 * kv, 2 * q + 2 * kv}, m, layers);
  }
  // SDPA output (B, H, T, D) -> transpose(1, 2).reshape: a copy (r2 w2); in
  // backward, grad_out made contiguous for flash (r2 w2), and the grads of
  // q, k, v back from (B, H, T, D) to (B, T, H*D) rows for the GEMMs.
  sum.Memory("attention layout copies", {4 * q, 4 * q, 4 * q, 4 * kv, 4 * kv}, m, layers);
  if (qkv_bias) sum.Memory("qkv bias grads (row sums)", {2 * q, 2 * kv, 2 * kv}, m, layers);
  // SwiGLU: silu (r2 w2), * up (r4 w2); backward g * up, g * silu, silu'.
  sum.Memory("silu * up forward", {4 * f, 6 * f}, m, layers);
  sum.Memory("silu * up backward", {6 * f, 6 * f, 6 * f}, m, layers);
  // Residual adds (r4 w2) x 2; backward: the residual stream's grad
  // accumulated at the two branch points, the normed input's grads from
  // q/k/v (2 adds) and from gate/up (1 add).
  sum.Memory("residual adds forward", {6 * h, 6 * h}, m, layers);
  sum.Memory("gradient accumulations (residual, shared inputs)", {6 * h, 6 * h, 6 * h, 6 * h, 6 * h}, m, layers);
  // Vocabulary pass (runtime/decoder_speed.cc, section_runner.cc):
  // logits.to(f32) (r2 w4), log_softmax (r4 w4), nll gather (scalar);
  // backward: nll' zero-filled fp32 grad (w4) + scatter, log_softmax'
  // (r8 w4), to(f32)' (r4 w2).
  sum.Memory("logits fp32 + cross-entropy forward", {6 * vocab, 8 * vocab, 0.0}, m, 1);
  sum.Memory("logits fp32 + cross-entropy backward", {4 * vocab, 0.0, 12 * vocab, 6 * vocab}, m, 1);
  // Embedding: gather forward (r2 w2); backward: index scatter (r2 w2) per
  // token, the dense (V, h) grad zeroed (w2 per element), and with tied
  // weights the LM head's dW added to it (r4 w2).
  sum.Memory("embedding gather + scatter", {4 * h, 4 * h}, m, 1);
  sum.Memory("embedding dense grad", {2 * vocab * h}, 1, 1);
  if (desc.tie_embeddings) sum.Memory("tied embedding grad accumulation", {6 * vocab * h}, 1, 1);

  // ---- Optimizer over this rank's parameter tensors.
  sum.AdamW("attention weights", h * q, layers);
  sum.AdamW("attention weights (k, v)", h * kv, 2 * layers);
  sum.AdamW("attention weights (o)", q * h, layers);
  sum.AdamW("mlp weights", h * f, 3 * layers);
  sum.AdamW("norm weights", h, 2 * layers + 1);
  if (qkv_bias) {
    sum.AdamW("q bias", q, layers);
    sum.AdamW("k, v biases", kv, 2 * layers);
  }
  sum.AdamW("embedding (+ lm_head when untied)", vocab * h, desc.tie_embeddings ? 1 : 2);

  StepBreakdown out = sum.Finish();
  const ModelFacts facts = ComputeModelFacts(desc, seq_len);
  out.model_flops = 3 * facts.flops_per_token * m / tp;
  out.mfu = out.model_flops / out.total_seconds / device.peak_flops;
  return out;
}

}  // namespace maestro::compiler
