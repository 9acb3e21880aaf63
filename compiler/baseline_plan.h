// SPDX-License-Identifier: Apache-2.0
// The baseline as the plan of a one-component workload (issue #41 item 6):
// "never slower than the baseline, by construction". With several
// components the baseline's configuration becomes a plan as one fused
// section (compile.cc, ChooseGrouping); with one there is nothing to fuse,
// so the plan is that one section at the baseline's configuration and GPUs.
// When the baseline (or, where the section pins its configuration, the best
// configuration the pins allow: CompileResult::fused) is predicted faster
// than the sectioned search's plan, the compile takes it: its predicted step
// is the baseline's own simulation (the same configuration on the same
// GPUs), so speedup_vs_monolithic is 1 exactly; the report names the
// rejected sectioned plan and its step.
//
// Owns: AdoptBaselineForOneComponent.
// May call: compiler/compile_result.h and what it includes (the assignment,
// the monolithic plan, the simulations), compiler/compile_options.h,
// compiler/cost_model.h, compiler/candidates.h.
// Thread safety: a pure function of its arguments and `r`.
#pragma once

#include "compiler/candidates.h"
#include "compiler/compile_options.h"
#include "compiler/compile_result.h"
#include "compiler/cost_model.h"

namespace maestro::compiler {

// Under --grouping auto, a workload of one component whose sectioned plan is
// predicted slower than CompileResult::fused (found, runnable under the
// planned runtime, on the section's GPU type): `r`'s assignment, simulation,
// prediction and grouping become that configuration's (grouping.baseline).
// Otherwise `r` is left as it is and the reason is returned ("" when taken).
std::string AdoptBaselineForOneComponent(const CompileOptions& options, const CostModel& model,
                                         const PlannerOptions& po, bool local, CompileResult& r);

}  // namespace maestro::compiler
