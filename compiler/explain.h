// SPDX-License-Identifier: Apache-2.0
// The --explain text: why each choice was made. Per section the chosen
// configuration, its work, memory and time per step, whether it is the
// bottleneck, and what the neighbouring choices would have cost; per edge its
// fan-out; what the simulation refined; and why the monolithic baseline is
// slower.
//
// Owns: RenderExplain.
// May call: base (units), plan, compiler/compile_result.h (CompileResult),
// compiler/cost_model.h, compiler/planner.h, compiler/runtime_support.h, fmt.
// Thread safety: pure functions.
#pragma once

#include <string>

#include "compiler/compile_result.h"
#include "compiler/cost_model.h"
#include "compiler/planner.h"

namespace maestro::compiler {

// The explanation of `r` (planned with `options`; `outcome` counts the
// configurations evaluated and fitting per section).
std::string RenderExplain(const CostModel& model, const PlannerOptions& options, const CompileResult& r,
                          const PlanOutcome& outcome);

}  // namespace maestro::compiler
