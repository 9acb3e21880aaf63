// SPDX-License-Identifier: Apache-2.0
#include "compiler/memory_model.h"

#include <algorithm>
#include <cmath>

#include "compiler/model.h"
#include "hf/name_map.h"
#include "plan/banded_attention.h"
#include "plan/gradient_bucket.h"
#include "plan/loss_chunk.h"
#include "plan/model_desc.h"

namespace maestro::compiler {

namespace {

using plan::ModelKind;

double D(int64_t v) {
  return static_cast<double>(v);
}
double HeadDimOf(const plan::ModelDesc& m) {
  if (m.head_dim > 0) return D(m.head_dim);
  return m.heads > 0 ? D(m.hidden) / D(m.heads) : 0.0;
}
double KvHeadsOf(const plan::ModelDesc& m) {
  return D(m.kv_heads > 0 ? m.kv_heads : m.heads);
}
bool QuickGeluOf(const plan::ModelDesc& m) {
  const int layout = plan::VitLayout(m);
  const bool published =
      m.kind == ModelKind::kVit && (layout == plan::kVitLayoutClip || layout == plan::kVitLayoutQwen2Vl);
  return ExtraValue(m, "quick_gelu", published ? 1.0 : 0.0) != 0.0;
}
bool VisionRopeOf(const plan::ModelDesc& m) {
  return m.kind == ModelKind::kVit && plan::IsQwenVisionLayout(plan::VitLayout(m));
}
// Elements per token an encoder's MLP keeps, per inner unit: Qwen2.5-VL's
// SwiGLU gate, up, silu(gate) and their product (as the decoder's); else
// fc1's output, (quick_gelu's sigmoid,) the activation's output.
double EncoderMlpKept(const plan::ModelDesc& m) {
  if (m.kind == ModelKind::kVit && plan::VitLayout(m) == plan::kVitLayoutQwen25Vl) return 4.0;
  return QuickGeluOf(m) ? 3.0 : 2.0;
}

// The parameters of an encoder or projector that TP splits
// (runtime/models/encoders.h ShardEncoderForTensorParallel): per block the
// q/k/v projections and their biases, out's weight, fc1 and its bias, fc2's
// weight; a ViT merger's fc1 (+ bias) and fc2's weight; a projector's fc1
// (+ bias) and fc2's weight. The rest (patch / conv stems, positions, norms,
// the row-parallel biases) is whole on every TP rank.
double TpSplitParams(const plan::ModelDesc& m) {
  const double c = D(m.hidden), f = D(m.ffn_hidden);
  switch (m.kind) {
    case ModelKind::kProjector: return D(m.out_dim) * (D(m.in_dim) + 1.0 + D(m.out_dim));
    case ModelKind::kVit:
    case ModelKind::kAudioEncoder: {
      double split = D(m.layers) * (4.0 * c * c + 3.0 * c + 2.0 * f * c + f);
      const auto merge = static_cast<int64_t>(ExtraValue(m, "spatial_merge", 0));
      if (m.kind == ModelKind::kVit && merge > 0) {
        const double in = c * D(merge * merge);
        const double mid = ExtraValue(m, "merger_hidden", 0) > 0 ? ExtraValue(m, "merger_hidden", 0) : in;
        split += mid * (in + 1.0) + D(m.out_dim) * mid;
      }
      return split;
    }
    case ModelKind::kDecoder: break;
  }
  return 0.0;
}

// RMSNorm (runtime/models/layers.h RmsNormImpl, computed in fp32) keeps,
// beyond its input: in fp32 the normalised x (4C); in bf16 the fp32 upcast
// of x (4C) and the normalised x cast back (2C).
double RmsNormSaved(double c, double a) {
  return a >= 4.0 ? 4.0 * c : 4.0 * c + a * c;
}

// The routed experts' parameters of a MoE decoder (all layers): E SwiGLU
// MLPs of moe_ffn_hidden per MoE layer (compiler/model.cc counts the same).
double RoutedExpertParams(const plan::ModelDesc& m) {
  const double f = D(m.moe_ffn_hidden > 0 ? m.moe_ffn_hidden : m.ffn_hidden);
  return D(plan::MoeLayerCount(m)) * D(m.experts) * 3.0 * D(m.hidden) * f;
}

// A decoder block in training (runtime/models/decoder.cc DecoderBlockImpl),
// bytes per token. TP divides the head and FFN widths; the residual stream
// and the norms are whole on every TP rank (no sequence parallelism).
double DecoderLayerBytes(const plan::ModelDesc& m, int tp, int64_t context, double a, bool explicit_attention,
                         bool core_recomputed) {
  const double c = D(m.hidden), hd = HeadDimOf(m);
  const double heads = D(m.heads) / tp, kv = KvHeadsOf(m) / tp;
  const double q = heads * hd, k = kv * hd;
  double e = 0.0;
  // Attention half: the block input (kept by the norm's pow), the norm, its
  // output (kept by the q/k/v projections).
  e += a * c + RmsNormSaved(c, a) + a * c;
  // ApplyRope keeps x (the projection's output) and rotate_half's cat; the
  // attention keeps the rotated q.
  e += a * 3.0 * q + a * 2.0 * k;
  // q/k norms (Qwen3): each keeps the projection's output and what an
  // RMSNorm keeps; ApplyRope's x above is then the norm's output.
  if (plan::QkNorm(m)) e += a * (q + k) + RmsNormSaved(q, a) + RmsNormSaved(k, a);
  if (kv < heads) {
    e += a * 2.0 * q;  // GQA: repeat_interleave's copies of k and v (index_select keeps only the index)
  } else {
    e += a * 2.0 * k;  // the rotated k and v itself
  }
  if (core_recomputed) {
    // Selective recomputation (runtime/recompute.h): the core keeps only
    // its inputs q, k, v, counted above.
  } else if (explicit_attention) {
    e += a * heads * D(context);  // softmax probabilities (B, H, T, T), causal or not
  } else {
    e += a * q + 4.0 * heads;  // a fused attention: its output and the fp32 log-sum-exp
  }
  e += a * q;  // transpose + reshape copy of the heads, kept by o_proj
  // MLP half: the residual, the norm, its output.
  e += a * c + RmsNormSaved(c, a) + a * c;
  // A MoE decoder with dense layers (Qwen-MoE's decoder_sparse_step) is
  // priced at its layers' mean: what the whole model keeps per layer.
  const double moe_share = m.layers > 0 ? D(plan::MoeLayerCount(m)) / D(m.layers) : 0.0;
  if (moe_share > 0) {
    // runtime/models/decoder.cc MoeMlpImpl; experts and the shared expert
    // TP-sharded like a dense MLP.
    const double f = D(m.moe_ffn_hidden > 0 ? m.moe_ffn_hidden : m.ffn_hidden) / tp;
    const double slots = D(std::max<int64_t>(m.experts_per_token, 1));
    double moe = a * D(m.experts) + 4.0 * D(m.experts);  // router logits, fp32 probabilities
    // Per routed slot: the gathered token, the SwiGLU (gate, silu, up, their
    // product), the expert's output (kept by the weighting), the (token,
    // slot) int64 index pair; the weighted rows are not kept by index_add.
    moe += slots * (a * c + 4.0 * a * f + a * c + 16.0);
    if (tp > 1) moe += slots * 2.0 * a * c;  // the slots' partial outputs concatenated and all-reduced
    const double shared = ExtraValue(m, "shared_expert_ffn_hidden", 0) / tp;
    if (shared > 0) moe += 4.0 * a * shared + a * c + 2.0 * a;  // SwiGLU, its output (kept by the gate's mul), the gate
    e += moe_share * moe;
  }
  // SwiGLU (Gemma: GeGLU): gate, its activation, up, their product.
  if (moe_share < 1) e += (1 - moe_share) * 4.0 * a * D(m.ffn_hidden) / tp;
  if (plan::Gemma3(m)) {
    // Gemma 3: the post-attention and post-MLP norms, each keeping its input
    // (the branch's output) and its fp32 chain (its q/k norms are counted
    // with Qwen3's above; the query and embedding scales keep nothing).
    e += 2.0 * (a * c + RmsNormSaved(c, a));
  }
  return e;
}

// Context parallelism (runtime/models/decoder.cc, docs/context_parallel.md),
// bytes per local token of one decoder layer beyond DecoderLayerBytes at
// T / cp tokens: the attention reads the whole sequence's K and V
// (all-gathered), so what it keeps of them covers cp times the tokens: the
// repeat_interleave'd copies under GQA (2q per token), else the gathered k
// and v themselves (2k); and the (T/cp, T) boolean mask that masked_fill
// keeps (1 byte per key).
double ContextParallelKvBytes(const plan::ModelDesc& m, int tp, int cp, int64_t context, double a) {
  if (cp <= 1 || m.kind != ModelKind::kDecoder) return 0.0;
  const double hd = HeadDimOf(m), heads = D(m.heads) / tp, kv = KvHeadsOf(m) / tp;
  const double kept = kv < heads ? 2.0 * heads * hd : 2.0 * kv * hd;
  return D(cp - 1) * a * kept + D(context);
}

// A decoder's sliding layers under the banded attention (plan/banded_attention.h:
// no CP, the explicit softmax of a CPU slot, its probabilities kept) keep
// BandedKeysPerQuery probabilities per query head instead of the whole
// context's: bytes per local token, as a mean over the layers, that
// DecoderLayerBytes counted and the band does not keep.
double BandedAttentionUnkeptBytes(const plan::ModelDesc& m, int tp, int cp, int64_t context, double a,
                                  bool explicit_attention, bool core_recomputed) {
  const int64_t window = plan::SlidingWindow(m);
  if (m.kind != ModelKind::kDecoder || cp > 1 || !explicit_attention || core_recomputed ||
      !plan::BandedAttention(context, window)) {
    return 0.0;
  }
  const double sliding_share = D(plan::SlidingLayerCount(m)) / D(std::max<int64_t>(m.layers, 1));
  return sliding_share * a * D(m.heads) / tp * (D(context) - plan::BandedKeysPerQuery(context, window));
}

// An encoder block in training (runtime/models/encoders.cc EncoderBlockImpl:
// LayerNorm, fused or separate q/k/v, 2-D RoPE for Qwen2-VL, GELU or
// quick_gelu MLP), bytes per token. TP (planner-only for encoders) divides the
// head and FFN widths.
double EncoderLayerBytes(const plan::ModelDesc& m, int tp, int64_t context, double a, bool explicit_attention,
                         bool core_recomputed) {
  const double c = D(m.hidden), f = D(m.ffn_hidden) / tp, heads = D(m.heads) / tp;
  double e = 0.0;
  e += a * c + 8.0 + a * c;  // block input (kept by layer_norm with its mean and rstd), the norm's output
  e += 3.0 * a * c / tp;     // q, k, v (views of one buffer when fused)
  if (VisionRopeOf(m)) e += 4.0 * 4.0 * c / tp;  // rotate_half's cat and the rotated q and k, in fp32
  if (core_recomputed) {
    // Selective recomputation: the core keeps only q, k, v (above).
  } else if (explicit_attention) {
    e += a * heads * D(context);  // softmax probabilities over the image's patches
  } else {
    e += a * c / tp + 4.0 * heads;
  }
  e += a * c / tp;                 // heads reshaped for the output projection
  e += a * c + 8.0 + a * c;        // the residual, the MLP norm's output
  e += EncoderMlpKept(m) * a * f;  // the MLP's inner activations
  return e;
}

// What one token of a forward-only section occupies at once (no graph: one
// layer's working set over its input and output).
double ForwardOnlyLayerBytes(const plan::ModelDesc& m, int tp, int64_t context, double a, bool explicit_attention) {
  const double c = D(m.hidden), heads = D(m.heads) / tp;
  if (m.kind == ModelKind::kProjector) return a * (D(m.in_dim) + 2.0 * D(m.out_dim));
  const bool decoder = m.kind == ModelKind::kDecoder;
  const double q = decoder ? heads * HeadDimOf(m) : c / tp;
  const double scores = explicit_attention ? 2.0 * heads * D(context) : q;  // scores and their masked / softmaxed copy
  double ffn = (decoder ? 4.0 : EncoderMlpKept(m)) * D(m.ffn_hidden) / tp;
  if (decoder && m.experts > 0) {
    // MoE (elements): the router logits and probabilities, each routed
    // slot's SwiGLU and output; the larger of it and a dense layer's when
    // the decoder has both (one layer at a time).
    const double slots = D(std::max<int64_t>(m.experts_per_token, 1));
    const double moe =
        2.0 * D(m.experts) + slots * (4.0 * D(m.moe_ffn_hidden > 0 ? m.moe_ffn_hidden : m.ffn_hidden) / tp + 2.0 * c);
    ffn = plan::MoeLayerCount(m) < m.layers ? std::max(ffn, moe) : moe;
  }
  return a * (3.0 * c + std::max(3.0 * q + scores, ffn));
}

// The largest parameter tensor on a rank (elements): the optimizer step's
// gradient clipping squares each gradient in fp64 (runtime/section_optimizer.cc
// OptimizerStep: grad.to(kFloat64).pow(2), 16 B per element at once).
double LargestParameter(const plan::ModelDesc& m, int tp) {
  const double c = D(m.hidden);
  switch (m.kind) {
    case ModelKind::kDecoder: return std::max(D(m.vocab) * c, D(m.ffn_hidden) * c / tp);
    case ModelKind::kVit: {
      const int64_t merge = static_cast<int64_t>(ExtraValue(m, "spatial_merge", 0));
      const double in = c * D(merge * merge);
      const double mid = ExtraValue(m, "merger_hidden", 0) > 0 ? ExtraValue(m, "merger_hidden", 0) : in;
      const double patch = c * D(m.channels) * D(m.patch_size) * D(m.patch_size) * ExtraValue(m, "temporal_patch", 1);
      return std::max({D(m.ffn_hidden) * c / tp, 3.0 * c * c / tp, patch, merge > 0 ? in * mid : 0.0});
    }
    case ModelKind::kAudioEncoder: return std::max(D(m.ffn_hidden) * c / tp, 3.0 * c * D(m.mel_bins));
    case ModelKind::kProjector: return std::max(D(m.in_dim), D(m.out_dim)) * D(m.out_dim);
  }
  return 0.0;
}

// Per token, what a section keeps outside its layers: a ViT's input pixels
// (kept by the patch convolution), final norm and patch merger; the audio
// stem; a decoder's final RMSNorm and its output (kept by the LM head).
double StemBytes(const plan::ModelDesc& m, double a) {
  const double c = D(m.hidden);
  switch (m.kind) {
    case ModelKind::kDecoder: return a * c + RmsNormSaved(c, a) + a * c;
    case ModelKind::kVit: {
      double e = 4.0 * D(m.channels) * D(m.patch_size) * D(m.patch_size) + 2.0 * a * c;
      const int64_t merge = static_cast<int64_t>(ExtraValue(m, "spatial_merge", 0));
      if (merge > 0) {
        const double m2 = D(merge * merge);
        const double mid = ExtraValue(m, "merger_hidden", 0) > 0 ? ExtraValue(m, "merger_hidden", 0) : c * m2;
        e += 2.0 * a * c + (2.0 * mid + D(m.out_dim)) * a / m2;
      }
      return e;
    }
    case ModelKind::kAudioEncoder: return 2.0 * 4.0 * D(m.mel_bins) + 6.0 * a * c;
    case ModelKind::kProjector: return 0.0;
  }
  return 0.0;
}

// A training decoder sink's loss chain per token (runtime/section_forward.cc
// PerSampleLoss, fp32 over the vocabulary V). Cross-entropy: at the start of
// backward log_softmax's saved output, its incoming and outgoing gradients
// (3 x 4V). KD over the whole vocabulary: 6 x 4V as measured
// (tests/runtime/memory_run_test.cc: the student's peak above its layers and
// weights); the tensors alive at the KL term (logits, teacher logits, the
// student's two log_softmaxes, the teacher's scaled logits, log-probabilities,
// exp, difference, product) would count 9, an upper bound the run does not
// reach. KD over the teacher's top-k: 5 x 4V. KD from top-K or sampled rows
// (plan/teacher_rows.h): 4 x 4V, an estimate, not measured: top-k's chain
// without the teacher's logits.
double LogitsChainBytes(const SectionWork& s) {
  const double v = D(s.model.vocab);
  if (s.kd_sparse_rows) return 4.0 * 4.0 * v;
  if (s.kd_teacher_hidden <= 0) return 3.0 * 4.0 * v;
  if (s.kd_top_k > 0 && s.kd_top_k < s.model.vocab) return 5.0 * 4.0 * v;
  return 6.0 * 4.0 * v;
}

}  // namespace

// The gradient sync over DP x CP (docs/gradient_sync.md) runs after the
// backwards have freed the graphs and holds, beyond the gradients, one
// packed bucket of at most plan::kGradientBucketBytes (PyTorch DDP's 25 MiB)
// and, on a CPU slot (MPI backend), MPI's buffers for it. Without ZeRO-1
// (runtime/parallel/data_parallel.cc) the in-place all-reduce keeps a
// reduction buffer of the bucket's size (measured before buckets: a ViT at
// CP 2 peaked 2 x its 228 MB of fp32 gradients above an estimate without
// the term, the whole gradient being one "bucket"). Under ZeRO-1
// (distributed_optimizer.cc) Open MPI 4.1's non-blocking reduce-scatter
// (coll/libnbc nbc_ireduce_scatter_block.c) mallocs 2 x its input; gradients
// that fit one bucket are reduce-scattered in place, unpacked. NCCL (a GPU
// slot) reduces in its own fixed-size channel buffers: the packed bucket only.
// ZeRO-1 also allocates the gradient shard the buckets reduce into (1/(dp
// cp) of the gradients) before the first bucket; it lives through AdamW.
double GradientSyncBytes(double gradients, const plan::ParallelConfig& c, bool cpu) {
  const int ranks = std::max(c.dp, 1) * std::max(c.cp, 1);
  if (ranks <= 1 || gradients <= 0) return 0.0;
  const double bucket = std::min(gradients, D(plan::kGradientBucketBytes));
  const bool packed = c.zero_stage < 1 || gradients > D(plan::kGradientBucketBytes);
  const double mpi_buffers = !cpu ? 0.0 : c.zero_stage >= 1 ? 2.0 * bucket : bucket;
  const double gradient_shard = c.zero_stage >= 1 ? gradients / ranks : 0.0;
  return gradient_shard + (packed ? bucket : 0.0) + mpi_buffers;
}

PrecisionBytes BytesOf(ParamPrecision precision) {
  switch (precision) {
    case ParamPrecision::kFp32: return {4.0, 4.0, 8.0, 4.0, 0.0, 4.0};
    case ParamPrecision::kMixedBf16: return {4.0, 4.0, 8.0, 2.0, 2.0, 2.0};
    case ParamPrecision::kPureBf16: return {2.0, 2.0, 4.0, 2.0, 0.0, 2.0};
  }
  return {};
}

double LayerActivationBytes(const plan::ModelDesc& model, int tp, int64_t context, double act_bytes,
                            bool explicit_attention, bool attention_core_recomputed) {
  tp = std::max(tp, 1);
  switch (model.kind) {
    case ModelKind::kDecoder:
      return DecoderLayerBytes(model, tp, context, act_bytes, explicit_attention, attention_core_recomputed);
    case ModelKind::kVit:
    case ModelKind::kAudioEncoder:
      return EncoderLayerBytes(model, tp, context, act_bytes, explicit_attention, attention_core_recomputed);
    case ModelKind::kProjector: return act_bytes * (D(model.in_dim) + 3.0 * D(model.out_dim));
  }
  return 0.0;
}

namespace {

// Where one rank of a section sits: its degrees and, for a stage of a
// pipelined decoder (`stage` >= 0), its layers (plan::StageLayerSpan) and
// whether it is the first or the last stage.
struct RankPlace {
  int tp = 1, pp = 1, cp = 1, dp = 1;
  bool staged = false;
  plan::StageLayerRange stage_span;
  bool first_stage = true, last_stage = true;
  bool holds_head = true;    // the final norm, the head, the loss (every rank when not staged)
  double stage_share = 1.0;  // of the blocks
};

RankPlace PlaceOf(const plan::ModelDesc& m, const plan::ParallelConfig& c, int stage) {
  RankPlace r;
  r.tp = std::max(c.tp, 1);
  r.pp = std::max(c.pp, 1);
  r.cp = std::max(c.cp, 1);
  r.dp = std::max(c.dp, 1);
  r.staged = stage >= 0;
  r.stage_span = r.staged ? plan::StageLayerSpan(c, m.layers, stage) : plan::StageLayerRange{};
  r.first_stage = !r.staged || stage == 0;
  r.last_stage = !r.staged || stage == r.pp - 1;
  r.holds_head = r.last_stage;
  r.stage_share = r.staged ? D(r.stage_span.count()) / D(std::max<int64_t>(m.layers, 1)) : 1.0 / r.pp;
  return r;
}

// The rank's weights, gradients and optimizer states (out's first three
// terms): its share of the parameters under TP, PP and EP, the bf16 copies
// autocast caches of those its matmuls read, a KD student's teacher head,
// ZeRO-1's shards.
void AddParameterMemory(const SectionWork& s, const plan::ParallelConfig& c, const RankPlace& r,
                        const PrecisionBytes& bytes, MemoryBreakdown* out) {
  const plan::ModelDesc& m = s.model;
  const bool train = s.trains();
  const int tp = r.tp, pp = r.pp, cp = r.cp, dp = r.dp;
  const bool staged = r.staged, first_stage = r.first_stage, last_stage = r.last_stage, holds_head = r.holds_head;
  const plan::StageLayerRange& stage_span = r.stage_span;
  const double stage_share = r.stage_share;

  // Parameters of the rank's share, and those its matmuls read (what
  // autocast casts: not a decoder's embedding lookup table nor its norms).
  double params = D(s.facts.params);
  double matmul_params = 0.0;
  // Expert parallelism (docs/moe.md): the routed experts split over the EP
  // group; their optimizer states over the dp / ep ranks that hold the same
  // experts (ZeRO-1), every other parameter's over dp.
  const int ep = m.experts > 0 ? std::max(c.ep, 1) : 1;
  const double expert_params = m.experts > 0 ? RoutedExpertParams(m) : 0.0;
  if (m.kind == ModelKind::kDecoder) {
    const double embed = D(m.vocab) * D(m.hidden), head = m.tie_embeddings ? 0.0 : embed;
    const double norms = D(2 * m.layers + 1) * D(m.hidden);
    const double sharded = std::max(0.0, params - embed - head - norms - expert_params * (1.0 - 1.0 / ep));
    if (staged) {
      // The stage's blocks (their share of the sharded and norm parameters),
      // the embedding on the first stage, the head (a tied one: the same
      // table again) and the final norm on the last.
      const double share = D(stage_span.count()) / D(std::max<int64_t>(m.layers, 1));
      const double head_here = last_stage ? (m.tie_embeddings ? embed : head) : 0.0;
      params = sharded * share / tp + (first_stage ? embed : 0.0) + head_here +
               D(2 * stage_span.count() + (last_stage ? 1 : 0)) * D(m.hidden);
      matmul_params = sharded * share / tp + head_here;
    } else {
      params = sharded / tp + embed + head + norms;
      // A tied head reads the embedding table through a matmul (cast); an
      // untied table is only looked up.
      matmul_params = sharded / tp + (m.tie_embeddings ? embed : head);
    }
  } else {
    // TP splits the blocks' (and merger's, projector's) linear layers; the
    // stems, positions and norms are whole on every TP rank.
    const double split = std::min(params, TpSplitParams(m));
    params = (split / tp + (params - split)) / pp;
    matmul_params = params;
  }
  out->weights = train ? bytes.weight * params + bytes.compute_copy * matmul_params : bytes.forward_weight * params;
  if (s.kd_teacher_hidden > 0 && holds_head) {
    out->weights += 4.0 * D(m.vocab) * D(s.kd_teacher_hidden);  // TeacherHead: fp32
  }
  if (train) {
    out->gradients = bytes.gradient * params;
    if (c.zero_stage >= 1) {
      // ZeRO-1 shards over DP x CP (docs/gradient_sync.md); the routed
      // experts over their expert-DP group (no CP with EP).
      const double experts_here = expert_params / ep / tp * stage_share;  // the rank's routed experts
      out->optimizer = bytes.optimizer * ((params - experts_here) / (dp * cp) + experts_here / std::max(1, dp / ep));
    } else {
      out->optimizer = bytes.optimizer * params;
    }
  }
}

// One rank of section `s`: pipeline stage `stage` of a decoder (its own
// layers, plan::StageLayerSpan; the first also the embedding, the last the
// final norm, the head, the loss and a KD student's teacher head), or, with
// stage < 0, a rank of a section that is not a pipelined decoder.
MemoryBreakdown EstimateRankMemory(const SectionWork& s, const plan::ParallelConfig& c, int stage, double microbatches,
                                   double samples_per_microbatch, const DeviceType& dev) {
  MemoryBreakdown out;
  const PrecisionBytes bytes = BytesOf(dev.precision);
  const double a = bytes.activation;
  const plan::ModelDesc& m = s.model;
  const bool train = s.trains();
  const RankPlace r = PlaceOf(m, c, stage);
  const int tp = r.tp, pp = r.pp, cp = r.cp;
  const bool staged = r.staged, first_stage = r.first_stage, last_stage = r.last_stage, holds_head = r.holds_head;
  const plan::StageLayerRange& stage_span = r.stage_span;
  // libtorch 1.13 on a CPU slot runs the explicit softmax attention; GPUs
  // (libtorch 2.x) a fused one.
  const bool explicit_attention = dev.cpu;

  AddParameterMemory(s, c, r, bytes, &out);

  // Activations of the micro-batches in flight.
  const double mbs = std::max(1.0, std::ceil(microbatches - 1e-9));
  // A mixed modality's encoder: a micro-batch of its largest samples
  // (SectionWork::peak_tokens), attending over its longest sequence.
  const int64_t sample_tokens = s.peak_tokens > 0 ? s.peak_tokens : s.tokens;
  const double tokens_mb = std::max(1.0, std::ceil(samples_per_microbatch - 1e-9)) * D(sample_tokens) / cp;
  const int64_t context = m.kind == ModelKind::kDecoder ? s.tokens
                          : s.peak_context > 0          ? s.peak_context
                                                        : std::max<int64_t>(s.facts.seq_len, 1);
  const double layers = m.kind == ModelKind::kProjector ? 1.0 : D(std::max<int64_t>(m.layers, 1));
  // A KD teacher's rows are 2K or draws + 1 wide when it sends top-K or
  // sampled rows (plan/teacher_rows.h), fp32.
  const double out_width = s.teacher_rows_form >= 0 ? D(s.teacher_rows_width) / a * 4.0
                                                    : D(s.facts.output_dim > 0 ? s.facts.output_dim : m.hidden);
  // ViT CP (docs/context_parallel_vit.md): the stem and the merger run on
  // the whole sequence on every CP rank, and each layer keeps the
  // all-gathered k and v of the whole sequence (cp - 1 chunks more than its own).
  const bool vit_cp = m.kind == ModelKind::kVit && cp > 1;
  const double stem_tokens = vit_cp ? tokens_mb * cp : tokens_mb;
  if (train) {
    const bool selective = c.recompute_granularity() == plan::RecomputeGranularity::kSelective;
    const double layer = LayerActivationBytes(m, tp, context, a, explicit_attention, selective) +
                         ContextParallelKvBytes(m, tp, cp, context, a) -
                         BandedAttentionUnkeptBytes(m, tp, cp, context, a, explicit_attention, selective);
    // A section that waits for gradients from downstream keeps every
    // micro-batch of its replica, or at most the schedule's in-flight cap
    // plus one (the scheduler's deadlock relief: docs/scheduler.md).
    const double held = s.sink ? 1.0 : s.in_flight_cap > 0 ? std::min(mbs, s.in_flight_cap + 1.0) : mbs;
    // 1F1B: stage s keeps the forwards of its warm-up and one more, pp - s.
    const double stage_layers = staged ? D(stage_span.count()) : layers / pp;
    const double copies = staged   ? std::max(std::min<double>(pp - stage, mbs), held)
                          : pp > 1 ? std::max(std::min<double>(pp, mbs), held)
                                   : held;
    // Full recomputation keeps each layer's input (RunRecomputed's saved
    // input), and one layer's graph at a time while it recomputes.
    const double per_mb = c.recompute ? stage_layers * a * D(m.hidden) + layer : stage_layers * layer;
    const double gathered_kv =
        vit_cp && !c.recompute ? stage_layers * 2.0 * a * D(m.hidden) / tp * tokens_mb * (cp - 1) : 0.0;
    // A stage before the last keeps its output rows (sent on, held for backward) instead of the stem.
    const double stem = holds_head ? stem_tokens * StemBytes(m, a) : tokens_mb * a * D(m.hidden);
    double act = copies * (tokens_mb * per_mb + stem + gathered_kv);
    if (m.kind == ModelKind::kDecoder && s.sink && holds_head) {
      // The vocabulary loss runs over chunks of positions past
      // plan::kLossWholeTokens (plan/loss_chunk.h): one chunk's chain at a time.
      const double samples = std::max(1.0, std::ceil(samples_per_microbatch - 1e-9));
      const auto positions = static_cast<int64_t>(std::ceil(D(s.tokens) / cp));
      const double chain_tokens =
          samples * D(plan::LossChunkPositions(static_cast<int64_t>(samples), std::max<int64_t>(positions, 1)));
      act += std::min(tokens_mb, chain_tokens) * LogitsChainBytes(s);
      // The teacher's rows: whole on every CP rank (docs/context_parallel.md).
      // (kd_rows_width: the form's width; a SectionWork built without it: the hidden size.)
      const int64_t rows_width = std::max(s.kd_rows_width, s.kd_teacher_hidden);
      if (rows_width > 0) act += tokens_mb * D(cp) * 4.0 * D(rows_width);
    }
    const double largest =
        staged && !first_stage && !holds_head ? D(m.ffn_hidden) * D(m.hidden) / tp : LargestParameter(m, tp);
    const double optimizer_step = 16.0 * largest;
    out.activations = std::max({act, optimizer_step, GradientSyncBytes(out.gradients, c, dev.cpu)});
  } else {
    // No graph: one layer's working set; a section feeding others keeps every
    // micro-batch's output rows of the step (RankLoop's states).
    double act = tokens_mb * (ForwardOnlyLayerBytes(m, tp, context, a, explicit_attention) +
                              ContextParallelKvBytes(m, tp, cp, context, a)) +
                 stem_tokens * StemBytes(m, a);
    const double merge = ExtraValue(m, "spatial_merge", 0);
    // A CP decoder's output rows are gathered whole on every CP rank.
    const double out_rows = m.kind == ModelKind::kVit && merge > 0 ? tokens_mb / (merge * merge) : tokens_mb * D(cp);
    if (!last_stage) {
      // A stage before the last sends each micro-batch's activation to the
      // next as an fp32 wire copy, held until the step's sends drain
      // (runtime/parallel/pipeline_parallel.h); it keeps no rows of its own.
      act += mbs * tokens_mb * 4.0 * D(m.hidden);
    } else if (!s.sink) {
      act += mbs * out_rows * a * out_width;
    }
    // A KD teacher's top-K or sampled rows: one chunk of plan::kLossChunkTokens
    // tokens' fp32 logits and the form's working copies (about 3 x 4V).
    if (s.teacher_rows_form >= 0 && last_stage) {
      act += std::min(tokens_mb * D(cp), D(plan::kLossChunkTokens)) * 3.0 * 4.0 * D(m.vocab);
    }
    // A later stage of a pipeline streaming ahead holds the input it
    // received for the next step's first micro-batch (runtime/run_ahead.h).
    if (!first_stage && s.pipeline_streams_ahead >= 2) act += tokens_mb * 4.0 * D(m.hidden);
    out.activations = act;
  }
  out.reserved = dev.reserved_bytes;
  return out;
}

bool PipelinedDecoder(const SectionWork& s, const plan::ParallelConfig& c) {
  return s.model.kind == ModelKind::kDecoder && c.pp > 1 && c.pp <= s.model.layers;
}

}  // namespace

MemoryBreakdown EstimateStageMemory(const SectionWork& s, const plan::ParallelConfig& config, int stage,
                                    double microbatches, double samples_per_microbatch, const DeviceType& device) {
  return EstimateRankMemory(s, config, PipelinedDecoder(s, config) ? stage : -1, microbatches, samples_per_microbatch,
                            device);
}

MemoryBreakdown EstimateSectionMemory(const SectionWork& s, const plan::ParallelConfig& config, double microbatches,
                                      double samples_per_microbatch, const DeviceType& device) {
  if (!PipelinedDecoder(s, config)) {
    return EstimateRankMemory(s, config, -1, microbatches, samples_per_microbatch, device);
  }
  MemoryBreakdown heaviest;
  for (int stage = 0; stage < config.pp; ++stage) {
    const MemoryBreakdown m = EstimateRankMemory(s, config, stage, microbatches, samples_per_microbatch, device);
    if (stage == 0 || m.total() > heaviest.total()) heaviest = m;
  }
  return heaviest;
}

}  // namespace maestro::compiler
