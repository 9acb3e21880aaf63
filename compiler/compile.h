// SPDX-License-Identifier: Apache-2.0
// maestro-compile's pipeline as a library: spec -> workload (cost model's
// view) -> planner (+ monolithic baseline) -> simulation of both -> plan.json,
// job.sbatch, report (text and JSON), --explain.
//
// Owns: Compile, the driver that runs those phases in order, the checks that
// need the cost model (a section that fits at no configuration, a budget too
// small, an impossible fan-out; reported as file:line:col), the plan it
// emits, and WriteOutputs. The phases live beside it:
// compiler/workload_builder.h (effective spec, pins, runtime support,
// Workload), compiler/sbatch.h (job.sbatch), compiler/report.h (the report),
// compiler/explain.h (--explain); what a compile returns, CompileResult, is
// compiler/compile_result.h, which the report and --explain read. This
// header includes the first two and compile_result.h, so its users see the
// whole public API.
// May call: base, plan, scheduler (through compiler/step_simulation.h),
// compiler/*. Thread safety: pure functions (the refinement runs its
// simulations on helper threads of its own: compiler/refinement.h).
#pragma once

#include <string>

#include "base/status.h"
#include "compiler/compile_options.h"
#include "compiler/compile_result.h"
#include "compiler/cost_model.h"
#include "compiler/planner.h"
#include "compiler/sbatch.h"
#include "compiler/spec.h"
#include "compiler/step_simulation.h"
#include "compiler/workload_builder.h"
#include "plan/plan.h"

namespace maestro::compiler {

// Why the fused plan (CompileResult::fused: the monolithic baseline's
// configuration, or the best one the pins allow, run as one fused section)
// cannot run on the runtime of `support`; "" when it can.
std::string FusedPlanBlocker(const CompileResult& r, const RuntimeSupport& support);

// Plans the spec and renders every output (writes nothing).
StatusOr<CompileResult> Compile(const Spec& spec, const CompileOptions& options);

// Writes plan.json (plan::PlanToJson), job.sbatch (mode 0755), report.txt
// and report.json (what --json prints) into options.out_dir, creating it:
// all four replaced or none
// (base/files.h WriteFilesAtomically; a directory in the way of one is found
// before anything is written).
Status WriteOutputs(const CompileResult& result, const CompileOptions& options);

}  // namespace maestro::compiler
