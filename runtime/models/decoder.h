// SPDX-License-Identifier: Apache-2.0
// The decoder LLM (Llama / Mixtral shape) as a torch module.
//
// Owns: RoPE (Llama convention: rotate_half over the two halves of a head),
// GQA attention, the SwiGLU MLP, the top-k MoE MLP (softmax router, top-k
// weights renormalized to sum 1, as Mixtral), the pre-norm decoder block and
// DecoderLM itself:
//   ids (B,T) -> embed_tokens -> [RMSNorm -> GQA+RoPE -> +res;
//   RMSNorm -> SwiGLU | MoE -> +res] x layers -> final_norm -> hidden (B,T,C)
//   -> lm_head (or the tied embedding) -> logits (B,T,V)
// Letters: B batch, T tokens, C hidden, H heads, K kv_heads, D head_dim,
// F ffn_hidden, E experts, V vocab, N = B*T tokens.
// Llama, Mistral and Qwen2 are this module: Qwen2 adds q/k/v biases
// (extra.qkv_bias), Mistral a sliding window (extra.sliding_window = W: a
// query at position i attends the keys at positions i-W+1..i, Hugging
// Face's rule `kv_idx > q_idx - W`; a sequence longer than W runs its
// attention under that mask, AttentionMask), each its rope_theta and
// rms_norm_eps; head_dim may differ from hidden / heads. Llama 3.1+ and
// Qwen2.5 YaRN configs add rope scaling (plan/rope_scaling.h, the
// extra.rope_scaling_* keys).
// Qwen2-VL's and Qwen2.5-VL's LLM (M-RoPE, plan/mrope.h) is this module
// too: given each token's 3-D position ids, a head's frequencies read the
// time, height or width row as the config's mrope_section says
// (MakeMropeTables); without them (text only) the positions are 0..T-1 on
// every row, which is 1-D RoPE.
// Gemma 3 text (extra.gemma3, plan/model_desc.h) is this module too: its
// RMSNorms scale by (1 + weight), the block is sandwiched
//   h = x + post_attn_norm(attn(attn_norm(x)));
//   out = h + post_mlp_norm(mlp(mlp_norm(h))),
// the MLP is GeGLU (down(gelu_tanh(gate(x)) * up(x))), the embeddings are
// scaled by sqrt(C) (rounded to the weights' dtype, as HF), q/k norms come
// before RoPE, scores are scaled by query_pre_attn_scalar^-0.5, and the
// layers alternate sliding (local RoPE base, window mask) and global
// attention (plan::IsSlidingLayer, plan::RopeThetaOf): ForwardBlocks makes
// each kind's RoPE tables and mask once per forward.
// Parameter names (stable: checkpoints and the PyTorch reference use them;
// hf/name_map.cc maps them to Hugging Face's):
//   embed_tokens.weight, blocks.<i>.attn_norm.weight,
//   blocks.<i>.attn.{q,k,v,o}_proj.weight, blocks.<i>.attn.{q,k,v}_proj.bias (qkv_bias),
//   blocks.<i>.mlp_norm.weight,
//   blocks.<i>.mlp.{gate,up,down}_proj.weight (dense) or
//   blocks.<i>.moe.router.weight, blocks.<i>.moe.experts.<e>.{gate,up,down}_proj.weight,
//   blocks.<i>.moe.shared_expert.{gate,up,down}_proj.weight and
//   blocks.<i>.moe.shared_expert_gate.weight (Qwen2-MoE),
//   blocks.<i>.attn.{q,k}_norm.weight (extra.qk_norm: Qwen3, Gemma 3),
//   blocks.<i>.post_attn_norm.weight, blocks.<i>.post_mlp_norm.weight (Gemma 3),
//   final_norm.weight, lm_head.weight (absent when tie_embeddings).
// No other biases. An expert that no token picked in a step gets no
// gradient (its .grad() stays undefined): callers that all-reduce gradients
// treat undefined as zero.
// Runtime-internal: includes torch; only runtime/*.cc include it.
// Activation recomputation (SetRecompute; runtime/recompute.h): full wraps
// each block's call, selective each attention's core (SDPA), the blocks
// themselves unchanged.
// Context parallelism (SetContextParallel; docs/context_parallel.md): the
// model sees this rank's part of each sequence (the load-balanced chunks of
// runtime/parallel/context_parallel.h) and all-gathers K and V per layer.
// May call: libtorch, runtime/torch_compat.h, runtime/parallel/tensor_parallel.h,
// runtime/parallel/context_parallel.h, runtime/recompute.h, plan.
// Thread-safety: one thread per module at a time.
#pragma once

#include "base/status.h"
#include "plan/plan.h"
#include "plan/rope_scaling.h"
#include "runtime/models/layers.h"
#include "runtime/parallel/expert_parallel.h"
#include "runtime/parallel/tensor_parallel.h"

namespace maestro::runtime {

// cos and sin of the rotary angles: for positions 0..T-1 of every sample
// (T, D), or per sample (M-RoPE) (B, 1, T, D); either broadcasts over
// (B, H, T, D) and is indexed by position on dim -2.
struct RopeTables {
  torch::Tensor cos, sin;  // (T, D) or (B, 1, T, D) each, in the activations' dtype
};
// The decoder's inverse frequencies (D/2), fp32 on `device`:
// plan::RopeInverseFrequencies(theta, head_dim, scaling) (theta^(-2i/D),
// scaled as the config's rope_scaling says), rounded once to fp32.
torch::Tensor RopeInverseFrequencyTensor(int64_t head_dim, double theta, const plan::RopeScaling& scaling,
                                         torch::Device device);
// positions: T; inv_freq: (D/2) fp32. Angles, cos and sin are computed in
// fp32 (as HF does), multiplied by attention_factor
// (plan::RopeAttentionFactor: YaRN's, else 1) and cast to dtype.
RopeTables MakeRopeTables(int64_t positions, const torch::Tensor& inv_freq, double attention_factor,
                          torch::Dtype dtype);
// M-RoPE: positions (3, B, T) int64 (plan::MropePositions' rows: time,
// height, width); inv_freq (D/2) fp32; axes (D/2) int64, the row each
// frequency reads (plan::MropeFrequencyAxes). Angle (b, t, j) =
// positions[axes[j], b, t] * inv_freq[j] in fp32, as transformers'
// Qwen2-VL rotary (then its mrope_section split) computes it; tables
// (B, 1, T, D) = cat(angles, angles), times attention_factor, cast to dtype.
RopeTables MakeMropeTables(const torch::Tensor& positions, const torch::Tensor& inv_freq, const torch::Tensor& axes,
                           double attention_factor, torch::Dtype dtype);
// x: (B, H, T, D); tables: (T, D) or (B, 1, T, D). Returns x*cos + rotate_half(x)*sin,
// rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]).
torch::Tensor ApplyRope(const torch::Tensor& x, const RopeTables& rope);

// The attention of one forward when it is not plain causal SDPA over the
// rank's own tokens (DecoderLMImpl::ForwardBlocks builds it):
//  - context parallelism: this rank's queries sit at the global positions
//    ContextParallelPositions gives (T_local of T); K and V are all-gathered
//    over `group` (GatherSequence, rank order);
//  - a sliding window shorter than the sequence (group == nullptr, T_local =
//    T, or with CP);
// `allowed` (T_local, T) bool lets query i see key j when j's position is
// not later than i's and, with a window W, later than i's - W (every row has
// a true: the query's own position).
// band > 0 (a window W with plan::BandedAttention, no CP): the queries run
// in chunks of W, each over its band of keys only (plan/banded_attention.h);
// the same result as the masked square.
struct AttentionMask {
  launcher::Backend* group = nullptr;
  torch::Tensor allowed;  // (T_local, T) bool
  int64_t band = 0;
};

// Tensor parallelism: the decoder shards itself (Shard, ShardDecoderForTensorParallel)
// and calls the f/g functions of runtime/parallel/tensor_parallel.h around
// each column-parallel -> row-parallel pair.

// Causal self-attention with H query heads sharing K key/value heads (query
// head h uses kv head h / (H/K)). qk_norm_eps > 0 (Qwen3): an RMSNorm over
// each query and key head (weights (D), shared by the heads) before RoPE;
// unit_offset_norms (Gemma 3): those norms scale by (1 + weight).
// query_scale != 1 (Gemma 3's query_pre_attn_scalar^-0.5 * sqrt(D)): q is
// multiplied by it after RoPE, so the core's D^-0.5 makes the scale asked for.
class GqaAttentionImpl : public torch::nn::Module {
 public:
  GqaAttentionImpl(int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim, bool qkv_bias,
                   ParamFactory& params, double qk_norm_eps = 0.0, bool unit_offset_norms = false,
                   double query_scale = 1.0);
  // x: (B, T, C); rope: (T, D) tables -> (B, T, C). With `mask`: under
  // context parallelism (mask->group) x and rope are this rank's T_local
  // tokens and K and V are gathered over the group; mask->allowed masks the
  // scores (AttentionMask).
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, const AttentionMask* mask = nullptr);

  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};  // (H*D,C) (K*D,C) (K*D,C) (C,H*D)
  RmsNorm q_norm{nullptr}, k_norm{nullptr};                                   // (D) each, with qk_norm_eps > 0
  // Keeps heads [r*H/n, (r+1)*H/n) and kv heads [r*K/n, (r+1)*K/n): rows of
  // q/k/v and their biases (column-parallel), columns of o (row-parallel; its
  // output is a partial sum). REQUIRES: n divides H and K.
  void Shard(int rank, int size);
  // Selective recomputation: the core softmax(QK^T)V keeps no graph and runs
  // again in backward (runtime/recompute.h).
  bool recompute_core = false;

 private:
  int64_t heads_, kv_heads_, head_dim_;
  double query_scale_;
};
TORCH_MODULE(GqaAttention);

// down(silu(gate(x)) * up(x)); gelu_tanh (Gemma's GeGLU):
// down(gelu_tanh(gate(x)) * up(x)).
class SwiGluMlpImpl : public torch::nn::Module {
 public:
  // with_bias: gate/up/down with biases (Qwen2.5-VL's vision MLP).
  SwiGluMlpImpl(int64_t hidden, int64_t ffn_hidden, ParamFactory& params, bool gelu_tanh = false,
                bool with_bias = false);
  // x: (..., C) -> (..., C)
  torch::Tensor forward(const torch::Tensor& x);
  // down_proj's input: act(gate(x)) * up(x), (..., F).
  torch::Tensor Inner(const torch::Tensor& x);

  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};  // (F,C) (F,C) (C,F)
  // Keeps F/n of the inner units: rows of gate/up (and their biases),
  // columns of down (its bias whole).
  void Shard(int rank, int size);

 private:
  bool gelu_tanh_;
};
TORCH_MODULE(SwiGluMlp);

// Top-k mixture of SwiGLU experts (docs/moe.md). Router probabilities are a
// softmax over E (fp32); each token goes to its k most probable experts with
// weights p_e, renormalized to sum 1 over the k when norm_topk_prob
// (Mixtral, Qwen3-MoE; Qwen2-MoE does not), and its output is the weighted
// sum plus, when the desc has a shared expert (Qwen2-MoE:
// extra.shared_expert_ffn_hidden), sigmoid(shared_expert_gate(x)) *
// shared_expert(x).
// Every forward also leaves the per-sample load-balancing term of Switch /
// Mixtral (HF's load_balancing_loss_func over one sample's tokens):
// balance_b = E * sum_e f_be * P_be, f_be the fraction of sample b's
// token-slots routed to e (sum_e f_be = k), P_be the mean router
// probability of e over b's tokens; k at a perfectly even routing. Per
// sample so a micro-batch's term is a sum over its samples, whatever the
// placement (section_runner.h's loss scaling).
class MoeMlpImpl : public torch::nn::Module {
 public:
  // REQUIRES: desc.experts > 0.
  MoeMlpImpl(const plan::ModelDesc& desc, ParamFactory& params);
  // x: (B, T, C) -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x);
  // The last forward's balance_b: (B) fp32.
  const torch::Tensor& balance_loss() const { return balance_loss_; }
  // Tensor parallelism: every expert (and the shared expert) keeps F/n of
  // its inner units like a dense MLP (SwiGluMlpImpl::Shard); the router and
  // the shared expert's gate stay whole, so every TP rank routes alike. The
  // routed slots' partial outputs are summed over the group in one
  // all-reduce before they are weighted, so the router's gradient is whole
  // on every rank. REQUIRES: size divides every expert's F.
  void Shard(TensorParallelReducer* tp);
  // Expert parallelism (runtime/parallel/expert_parallel.h): keeps experts
  // [r*E/G, (r+1)*E/G) of EP rank r of G; every other expert's parameters
  // become empty tensors that need no gradient (names kept). The forward
  // then sends each routed slot to its expert's rank and back. REQUIRES:
  // G divides E; after TP sharding and weight loading.
  void KeepExperts(ExpertParallelExchange* ep);
  bool expert_parallel() const { return ep_ != nullptr; }
  // An empty micro-batch's part in this layer's EP exchanges: serves the
  // rows the peers send to this rank's experts. no_tokens: (0, C), a leaf
  // that requires grad (so the backward runs the same exchanges) -> (0, C).
  torch::Tensor ForwardNoTokens(const torch::Tensor& no_tokens);

  Linear router{nullptr};              // (E, C)
  torch::nn::ModuleList experts;       // E x SwiGluMlp
  SwiGluMlp shared_expert{nullptr};    // Qwen2-MoE, else null
  Linear shared_expert_gate{nullptr};  // (1, C), with shared_expert

 private:
  int64_t experts_per_token_;
  bool norm_topk_prob_;
  torch::Tensor balance_loss_;
  TensorParallelReducer* tp_ = nullptr;
  ExpertParallelExchange* ep_ = nullptr;
};
TORCH_MODULE(MoeMlp);

class DecoderBlockImpl : public torch::nn::Module {
 public:
  // Block `layer` (0-based) of desc: a MoE block when plan::IsMoeLayer.
  DecoderBlockImpl(const plan::ModelDesc& desc, int64_t layer, ParamFactory& params);
  // x: (B, T, C); rope: (T, D) -> (B, T, C); mask: as GqaAttentionImpl::forward.
  torch::Tensor forward(const torch::Tensor& x, const RopeTables& rope, const AttentionMask* mask = nullptr);

  RmsNorm attn_norm{nullptr}, mlp_norm{nullptr};
  RmsNorm post_attn_norm{nullptr}, post_mlp_norm{nullptr};  // Gemma 3's sandwich norms, else null
  GqaAttention attn{nullptr};
  SwiGluMlp mlp{nullptr};               // dense blocks
  MoeMlp moe{nullptr};                  // MoE blocks (plan::IsMoeLayer)
  TensorParallelReducer* tp = nullptr;  // set by ShardDecoderForTensorParallel
};
TORCH_MODULE(DecoderBlock);

class DecoderLMImpl : public torch::nn::Module {
 public:
  // REQUIRES: ValidateModelDesc(desc).ok() and desc.kind == kDecoder.
  DecoderLMImpl(const plan::ModelDesc& desc, ParamFactory& params);

  // ids: (B, T) int64 in [0, V) -> token embeddings (B, T, C). A VLM splices
  // image embeddings into this at its image-token positions before
  // ForwardEmbeds.
  torch::Tensor Embed(const torch::Tensor& ids);
  // embeds: (B, T, C) -> hidden (B, T, C): the blocks and the final RMSNorm
  // (what crosses the wire in KD: the student applies the teacher's head).
  // positions: undefined (1-D RoPE over 0..T-1), or, for an M-RoPE decoder
  // (plan::MropeOf), (3, B, T) int64 over the whole sequence (under context
  // parallelism too: each rank takes its tokens' positions).
  torch::Tensor ForwardEmbeds(const torch::Tensor& embeds, const torch::Tensor& positions = {});
  // Pipeline stages (runtime/parallel/pipeline_stages.h): embeds (B, T, C) -> (B, T, C)
  // through blocks [first, end) only (no final norm); and the final norm,
  // (..., C) -> (..., C). positions: as ForwardEmbeds.
  torch::Tensor ForwardBlocks(const torch::Tensor& embeds, int64_t first, int64_t end,
                              const torch::Tensor& positions = {});
  torch::Tensor FinalNorm(const torch::Tensor& x) { return final_norm(x); }
  // Keeps the parameters of one pipeline stage: blocks [first, end), the
  // embeddings when `embeddings`, the final norm and the head when `head`
  // (a tied embedding is kept when either is). Every other parameter becomes
  // an empty tensor that needs no gradient, so the stage holds only its own
  // weights while names stay those of the whole model. Call after TP
  // sharding and weight loading.
  void KeepStage(int64_t first, int64_t end, bool embeddings, bool head);
  // hidden: (..., C) -> logits (..., V), with lm_head or the tied embedding.
  torch::Tensor Logits(const torch::Tensor& hidden);
  // ids: (B, T) int64 -> logits (B, T, V).
  torch::Tensor forward(const torch::Tensor& ids);
  // MoE: the mean over the MoE blocks of their last forward's per-sample
  // load-balancing term (MoeMlpImpl::balance_loss): (B) fp32; undefined for
  // a dense decoder.
  torch::Tensor RouterBalanceLoss() const;
  // EP, an empty micro-batch (runtime/parallel/expert_parallel.h, lockstep):
  // the exchanges of every EP MoE block of this rank in forward order, one
  // (0, C) output each (under full recomputation through RunRecomputed, as
  // the blocks run); BackwardNoTokens runs their backwards in reverse order.
  std::vector<torch::Tensor> ForwardNoTokens();
  static void BackwardNoTokens(const std::vector<torch::Tensor>& outputs);

  const plan::ModelDesc& desc() const { return desc_; }
  // kFull: each block runs through RunRecomputed (keeps its input only);
  // kSelective: each attention's core does; kNone (the default): neither.
  void SetRecompute(plan::RecomputeGranularity granularity);
  // Context parallelism over `cp` (must outlive the model; nullptr or one
  // rank: none): ForwardEmbeds / ForwardBlocks then take this rank's part of
  // each sequence, (B, T/cp, C) at ContextParallelPositions(T, cp, rank), and
  // return the same part; every other function is unchanged. The caller
  // splits the inputs (SplitSequenceForContextParallel) and the loss.
  void SetContextParallel(launcher::Backend* cp) { cp_ = cp; }
  launcher::Backend* context_parallel() const { return cp_; }

  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList blocks;
  RmsNorm final_norm{nullptr};
  Linear lm_head{nullptr};  // null when tie_embeddings

 private:
  plan::ModelDesc desc_;
  plan::RecomputeGranularity recompute_ = plan::RecomputeGranularity::kNone;
  launcher::Backend* cp_ = nullptr;
  // RopeInverseFrequencyTensor of desc_ on the activations' device, made on
  // first use there (not a buffer: no checkpoint holds it); the local
  // layers' (plan::UsesLocalRope) beside it.
  torch::Tensor rope_inv_freq_, local_rope_inv_freq_;
  torch::Tensor mrope_axes_;  // M-RoPE: plan::MropeFrequencyAxes (D/2) int64 beside rope_inv_freq_
};
TORCH_MODULE(DecoderLM);

// The decoder of desc with weights drawn from options.seed, or
// InvalidArgument when desc is not a valid decoder.
// Shards every block of `model` for TP rank `rank` of `size` (attention
// heads, MLP inner units, each MoE expert's inner units; embeddings, norms,
// the router and the head stay replicated; the q/k norms' weight gradients,
// partial over this rank's heads, are summed over `tp` by a hook) and
// wires `tp` (which must outlive the model). The weights are slices of the
// unsharded model's, so a TP run computes what the unsharded one does.
// REQUIRES: size divides heads, kv_heads and ffn_hidden (MoE: moe_ffn_hidden
// and shared_expert_ffn_hidden).
Status ShardDecoderForTensorParallel(DecoderLMImpl& model, TensorParallelReducer* tp);
// EP: every MoE block this rank runs (its stage's, after KeepStage) keeps
// its EP rank's experts (MoeMlpImpl::KeepExperts) and exchanges over `ep`
// (which must outlive the model). REQUIRES: ep->size() divides E.
Status ShardDecoderForExpertParallel(DecoderLMImpl& model, ExpertParallelExchange* ep);
// Whether parameter `name` belongs to a routed expert
// ("blocks.<i>.moe.experts.<e>.*"): EP splits these, not the shared expert.
bool IsRoutedExpertParameter(const std::string& name);
// Whether parameter `name` (as in named_parameters()) is sharded by TP, and
// along which dim (0: rows, 1: columns); -1 when replicated.
int TensorParallelShardDim(const std::string& name);

StatusOr<DecoderLM> BuildDecoder(const plan::ModelDesc& desc, const ModelBuildOptions& options = {});

}  // namespace maestro::runtime
