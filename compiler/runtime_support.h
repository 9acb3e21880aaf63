// SPDX-License-Identifier: Apache-2.0
// The compiler's view of what maestro-worker's runtime runs. The table
// itself and the rules of what the runtime refuses live in one place that
// both the compiler and the runtime read, plan/runtime_support.h; here are
// its names in the compiler's namespace and the planner's question of it:
// which features of a configuration the runtime lacks. The planner emits
// only configurations the table allows; with --allow-planner-only it
// searches the whole space and the report marks the sections whose
// configuration the runtime cannot run yet ("planner-only").
// tests/runtime/runtime_refusal_test.cc holds PlannerOnlyFeatures and the
// runtime's refusals (plan::CheckPlanRuns) to the same answers.
// May call: plan. Thread safety: constant data, pure functions.
#pragma once

#include <string>

#include "plan/plan.h"
#include "plan/runtime_support.h"

namespace maestro::compiler {

using plan::kRuntimeSupport;
using plan::RuntimeSupport;

// "" when `config` of a section with `model` runs on the runtime; otherwise
// the features that make it planner-only, e.g. "CP=2, recompute".
std::string PlannerOnlyFeatures(const plan::ModelDesc& model, const plan::ParallelConfig& config,
                                const RuntimeSupport& support = kRuntimeSupport);

}  // namespace maestro::compiler
