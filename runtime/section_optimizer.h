// SPDX-License-Identifier: Apache-2.0
// The learning-rate schedule every optimizer of a section follows (the
// replicated AdamW of runtime/model_runner.h and ZeRO-1's shard,
// runtime/parallel/distributed_optimizer.h).
// Torch-free. May call: plan. Thread safety: pure function.
#pragma once

#include <cstdint>

#include "plan/plan.h"

namespace maestro::runtime {

// LR of `step` (0-based): linear warmup over warmup_steps to lr, then
// constant or a cosine to lr / 10 at `total_steps` (0 = constant).
double LearningRate(const plan::OptimizerDesc& opt, int64_t step, int64_t total_steps);

}  // namespace maestro::runtime
