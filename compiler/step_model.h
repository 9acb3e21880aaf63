// SPDX-License-Identifier: Apache-2.0
// The step model from parts (issue #23): the seconds of one micro-batch of a
// section on one GPU (or CPU slot with its own tables), as the sum of what
// the runtime's code really runs (runtime/models/decoder.cc, encoders.cc,
// layers.h, runtime/section_forward.cc, torch::optim::AdamW):
//  - GEMMs: each projection's forward y = x W^T (M tokens, K inner, N output
//    per TP rank) and, when the section trains, its two backward GEMMs with
//    their own shapes (dX: M x N -> K; dW: N x M -> K), each at the device's
//    measured efficiency for its shape (DeviceProfile::GemmFlopsPerSecond);
//  - attention (flash SDPA; causal for decoders, per image / per clip for
//    encoders), forward and backward, at the measured efficiency for
//    (head_dim, context); CP splits the queries;
//  - memory-bound kernels: every elementwise / reduction kernel the eager
//    code launches (the unfused fp32 RMSNorm chain, RoPE by narrow/cat/mul,
//    repeat_interleave of K/V, SiLU * up, LayerNorm, GELU, residual adds, the
//    fp32 logits' log_softmax + gather, the KD teacher head and KL, the
//    backward of each, the gradient accumulations), each max(bytes read +
//    written / bandwidth, the per-kernel launch floor);
//  - the optimizer: torch::optim::AdamW's per-parameter loop, 8 kernels per
//    parameter tensor, once per step; and autograd's .grad accumulation for
//    every micro-batch after the first.
// Bytes follow the activation dtype (bf16 on GPUs, fp32 on CPU slots: the
// runtime's ParamPrecision); casts to fp32 vanish when activations are fp32.
// What it leaves to the caller (compiler/cost_model.cc): TP all-reduces, CP
// ring exchanges, PP sends, DP gradient sync (communication terms).
// docs/step_model.md lists every term and its source.
// May call: compiler/device_profile.h, compiler/model.h, plan.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "compiler/device_profile.h"
#include "compiler/step_breakdown.h"
#include "plan/plan.h"

namespace maestro::compiler {

// Which of the three standard fusions the runtime's code path uses (issue
// #19; ../shared/research/h100-measurements.md section 2 measures each):
// GQA inside SDPA (no repeat_interleave of K and V), at::rms_norm (one
// kernel forward, two backward, instead of the fp32 chain), and
// at::_fused_adamw_ (multi-tensor launches over all parameters instead of
// 8 kernels per parameter tensor). compiler/runtime_support.h says which the
// runtime has; the model follows it.
struct FusedOps {
  bool gqa_in_sdpa = false;
  bool rms_norm = false;
  bool adamw = false;
};

// One micro-batch of a section as the runtime runs it.
struct PassShape {
  double samples = 1;            // samples in the micro-batch (a mean may be fractional)
  double tokens_per_sample = 1;  // rows the model processes per sample (a ViT: K images x patches)
  double attention_context = 0;  // tokens one attention spans (a ViT: one image's patches); 0 = tokens_per_sample
  bool train = true;             // backward through the section (else forward only, no graph kept)
  bool recompute = false;        // the blocks' forward again during backward
  bool recompute_attention_core = false;  // selective: the attention core's forward again during backward
  bool lm_loss = false;                   // decoder: LM head + fp32 cross-entropy (a sink that trains)
  int64_t kd_teacher_hidden = 0;          // decoder: a KD student's teacher head (hidden_t -> vocab) and KL; 0 = none
  bool kd_sparse_rows = false;            // decoder: a KD student's KL over top-K or sampled rows (no teacher head)
  int teacher_rows_form = -1;             // decoder: a KD teacher's head and rows (plan::TeacherRowsForm); -1 = none
  // The vocabulary loss in chunks past plan::kLossWholeTokens, recomputed in
  // backward, as runtime/vocab_loss.cc runs it (plan/loss_chunk.h); false: whole,
  // as runtime/section_speed.cc's timed loop (PredictDecoderStepFromParts).
  bool loss_in_chunks = true;
  int tp = 1, cp = 1, pp = 1;
  int ep = 1;                // MoE: the EP group the routed experts split over (docs/moe.md)
  int activation_bytes = 2;  // bf16 2, fp32 4
  // Bytes of a parameter element that AdamW and the .grad accumulation
  // touch; 0 = activation_bytes (pure bf16, what section_speed.cc times).
  // The runtime keeps fp32 masters under mixed bf16 (runtime/section_runner.h):
  // 4.
  int param_bytes = 0;
  // ZeRO-1 (runtime/parallel/distributed_optimizer.h): AdamW steps one flat
  // fp32 shard of 1/optimizer_shards of the parameters, op by op (8 kernels
  // over the shard, not per tensor, and not at::_fused_adamw_); 1 = every
  // rank steps all its parameters.
  int optimizer_shards = 1;
  FusedOps fused;
  // false: PassTimes::detail has the sums but no terms (no strings built:
  // the cost model's evaluations read only the times).
  bool keep_terms = true;
};

struct PassTimes {
  double forward_seconds = 0;     // one micro-batch on the busiest pipeline stage
  double backward_seconds = 0;    // its backward (recompute included)
  double optimizer_seconds = 0;   // AdamW over this rank's parameters, once per step (0: forward only)
  double accumulate_seconds = 0;  // adding one more micro-batch's gradients into .grad
  StepBreakdown detail;           // every term, whole model (all stages), both phases
};

// REQUIRES: CheckModelShape(desc).ok(); shape.samples > 0; tp, cp, pp >= 1.
// MoE blocks: the router, each rank's E/ep experts at m*k/E*ep rows each
// (capacity factor 1: an even routing), the shared expert (docs/moe.md).
// Refuses TP degrees that do not divide the widths it splits.
StatusOr<PassTimes> PredictSectionPass(const plan::ModelDesc& desc, const PassShape& shape,
                                       const DeviceProfile& device);

// One training step (forward, fp32 cross-entropy, backward, AdamW) of a dense
// decoder `desc` (plan::ModelKind::kDecoder, no experts) on one TP rank of
// degree `tp`: (micro_batch, seq_len) token ids, pure bf16 parameters and
// activations: PredictSectionPass with lm_loss, one micro-batch, plus the
// optimizer. What runtime/section_speed.cc times and the H100 measurements
// report. REQUIRES: CheckModelShape(desc).ok(), tp divides heads, kv_heads
// and ffn_hidden; micro_batch, seq_len >= 1.
StatusOr<StepBreakdown> PredictDecoderStepFromParts(const plan::ModelDesc& desc, int64_t micro_batch, int64_t seq_len,
                                                    int tp, const DeviceProfile& device, const FusedOps& fused = {});

// One micro-batch of runtime/section_speed.h's timed step as the step model
// sees it: a decoder's (micro_batch, seq_len) with its LM loss, or a ViT's
// micro_batch images (attention within each image); `precision` "mixed"
// (fp32 masters, autocast, fused AdamW and the chunked loss where the
// runtime has them), "bf16" (pure, the loss whole) or "fp32". What
// `maestro-bench gpu` predicts and the issue probe's calibration counts.
// REQUIRES: desc.kind is kDecoder or kVit; micro_batch, seq_len >= 1.
PassShape SectionSpeedShape(const plan::ModelDesc& desc, int64_t micro_batch, int64_t seq_len,
                            const std::string& precision);

// Seconds of a training step's GEMMs for y = x W^T, x (m, k), W (n, k):
// forward plus both backward GEMMs, each at its own shape's efficiency.
double TrainGemmSeconds(double m, double k, double n, const DeviceProfile& device);

}  // namespace maestro::compiler
