// SPDX-License-Identifier: Apache-2.0
// What the step model returns for one pass: its time by kind (GEMMs,
// attention, memory-bound kernels, optimizer) and its named terms.
// compiler/step_model.h predicts it; compiler/step_sum.h accumulates it.
// May call: the standard library.
#pragma once

#include <string>
#include <vector>

namespace maestro::compiler {

struct StepTerm {
  std::string name;  // e.g. "gemm mlp.gate_proj", "memory rms_norm (fp32 chain)"
  double seconds = 0;
  double kernels = 0;  // kernel launches
};

struct StepBreakdown {
  double gemm_seconds = 0;       // all layers + LM head, forward and backward
  double attention_seconds = 0;  // forward + backward
  double memory_seconds = 0;     // elementwise / reduction kernels of the layers, head and embedding
  double optimizer_seconds = 0;  // AdamW
  // What the CPU's issuing of autograd-tracked kernels adds beyond the
  // device's time (compiler/step_sum.h; 0 where the profile gives no issue
  // cost or the device is the slower), and how many such kernels a step has.
  double issue_seconds = 0;
  double tracked_kernels = 0;
  double total_seconds = 0;
  double model_flops = 0;  // 3 x the compiler's forward FLOPs (compiler/model.h), the MFU numerator
  double mfu = 0;          // model_flops / total / peak
  std::vector<StepTerm> terms;
};

}  // namespace maestro::compiler
