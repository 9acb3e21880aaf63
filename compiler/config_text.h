// SPDX-License-Identifier: Apache-2.0
// How every compiler output writes a parallel configuration: the job
// script's component comments, the report and the --explain text.
//
// Owns: ConfigText. (Its natural home is plan/plan.h, next to
// ParallelConfig; it stays in the compiler, its only user.)
// May call: plan, fmt. Thread safety: pure functions.
#pragma once

#include <fmt/format.h>

#include <string>

#include "plan/plan.h"

namespace maestro::compiler {

// "TP 2 PP 1 CP 1 DP 4, micro-batch 8" (+ ", recompute").
inline std::string ConfigText(const plan::ParallelConfig& c) {
  return fmt::format("TP {} PP {} CP {} DP {}, micro-batch {}{}", c.tp, c.pp, c.cp, c.dp, c.micro_batch,
                     c.recompute ? ", recompute" : "");
}

}  // namespace maestro::compiler
