// SPDX-License-Identifier: Apache-2.0
// The step model from parts (issue #23, first step): the seconds of one
// training step of a decoder section on one GPU, as the sum of what the
// runtime's code really runs (runtime/models/decoder.cc, runtime/models/
// layers.h, runtime/decoder_speed.cc, torch::optim::AdamW):
//  - GEMMs: each projection's forward y = x W^T (M tokens, K inner, N output
//    per TP rank) and its two backward GEMMs with their own shapes
//    (dX: M x N -> K; dW: N x M -> K), each at the device's measured
//    efficiency for its shape (DeviceProfile::GemmFlopsPerSecond);
//  - causal attention, forward + backward, at the measured flash-attention
//    efficiency for (head_dim, T);
//  - memory-bound kernels: every elementwise / reduction kernel the eager
//    code launches (the unfused fp32 RMSNorm chain, RoPE by narrow/cat/mul,
//    repeat_interleave of K/V, SiLU * up, residual adds, the fp32 logits'
//    log_softmax + gather, the backward of each, the gradient accumulations),
//    each max(bytes read + written / bandwidth, the per-kernel launch floor);
//  - the optimizer: torch::optim::AdamW's per-parameter loop, 8 kernels per
//    parameter tensor over bf16 param, grad, m, v.
// Not modelled yet: TP/CP communication, encoders, MoE, CPU slots, memory.
// No planner or compiler output uses this yet (docs/step_model.md).
// May call: compiler/device_profile.h, compiler/model.h, plan.
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "compiler/device_profile.h"
#include "plan/plan.h"

namespace maestro::compiler {

struct StepTerm {
  std::string name;  // e.g. "gemm mlp.gate_proj", "memory rms_norm (fp32 chain)"
  double seconds = 0;
  double kernels = 0;  // kernel launches per step
};

struct StepBreakdown {
  double gemm_seconds = 0;       // all layers + LM head, forward and backward
  double attention_seconds = 0;  // forward + backward
  double memory_seconds = 0;     // elementwise / reduction kernels of the layers, head and embedding
  double optimizer_seconds = 0;  // AdamW
  double total_seconds = 0;
  double model_flops = 0;  // 3 x the compiler's forward FLOPs (compiler/model.h), the MFU numerator
  double mfu = 0;          // model_flops / total / peak
  std::vector<StepTerm> terms;
};

// One training step (forward, fp32 cross-entropy, backward, AdamW) of a dense
// decoder `desc` (plan::ModelKind::kDecoder, no experts) on one TP rank of
// degree `tp`: (micro_batch, seq_len) token ids, pure bf16 parameters and
// activations. REQUIRES: CheckModelShape(desc).ok(), tp divides heads,
// kv_heads and ffn_hidden; micro_batch, seq_len >= 1.
StatusOr<StepBreakdown> PredictDecoderStepFromParts(const plan::ModelDesc& desc, int64_t micro_batch, int64_t seq_len,
                                                    int tp, const DeviceProfile& device);

// Seconds of a training step's GEMMs for y = x W^T, x (m, k), W (n, k):
// forward plus both backward GEMMs, each at its own shape's efficiency.
double TrainGemmSeconds(double m, double k, double n, const DeviceProfile& device);

}  // namespace maestro::compiler
