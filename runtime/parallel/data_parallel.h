// SPDX-License-Identifier: Apache-2.0
// Data parallelism across a section's replicas: the gradient all-reduce
// before the optimizer step (a sum, not a mean: runtime/section_runner.h's
// loss scaling makes the sum the step's gradient).
// Runtime-internal (torch). May call: launcher, runtime/collectives, libtorch.
// Thread safety: one thread per process.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "base/status.h"
#include "launcher/communicators.h"

namespace maestro::runtime {

// Sums the gradients of `params` (each with a defined fp32 .grad(), any
// shape) over `dp` in one flat buffer and writes the sums back; a no-op for a
// single replica. The wait counts in *blocked_seconds.
Status AllReduceGradients(launcher::Backend& dp, const std::vector<torch::Tensor>& params, double* blocked_seconds);

}  // namespace maestro::runtime
