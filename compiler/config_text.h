// SPDX-License-Identifier: Apache-2.0
// How every compiler output writes a parallel configuration: the job
// script's component comments, the report and the --explain text.
//
// Owns: ConfigText, RecomputeText. (Its natural home is plan/plan.h, next to
// ParallelConfig; it stays in the compiler, its only user.)
// May call: plan, fmt. Thread safety: pure functions.
#pragma once

#include <fmt/format.h>

#include <string>

#include "plan/plan.h"

namespace maestro::compiler {

// "" without recomputation, " recompute" (full) or " selective recompute".
inline std::string RecomputeText(const plan::ParallelConfig& c) {
  switch (c.recompute_granularity()) {
    case plan::RecomputeGranularity::kNone: return "";
    case plan::RecomputeGranularity::kSelective: return " selective recompute";
    case plan::RecomputeGranularity::kFull: return " recompute";
  }
  return "";
}

// "TP 2 PP 1 CP 1 DP 4, micro-batch 8" (+ ", recompute" or ", selective recompute").
inline std::string ConfigText(const plan::ParallelConfig& c) {
  const std::string rc = RecomputeText(c);
  return fmt::format("TP {} PP {} CP {} DP {}, micro-batch {}{}", c.tp, c.pp, c.cp, c.dp, c.micro_batch,
                     rc.empty() ? "" : "," + rc);
}

}  // namespace maestro::compiler
