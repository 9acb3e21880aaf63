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
// compiler/explain.h (--explain). This header includes the first two, so its
// users see the whole public API.
// May call: base, plan, scheduler (through compiler/step_simulation.h),
// compiler/*. Thread safety: pure functions (the refinement runs its
// simulations on helper threads of its own: compiler/step_simulation.h).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/compile_options.h"
#include "compiler/cost_model.h"
#include "compiler/planner.h"
#include "compiler/sbatch.h"
#include "compiler/spec.h"
#include "compiler/step_simulation.h"
#include "compiler/workload_builder.h"
#include "plan/plan.h"

namespace maestro::compiler {

// The grouping the plan runs and the best rejected alternative.
struct GroupingChoice {
  bool fused = false;                // chosen: every component in one fused section
  double chosen_step_seconds = 0;    // simulated (analytic when no simulation ran)
  std::string rejected;              // "sectioned" | "fused" | "" (none was possible)
  double rejected_step_seconds = 0;  // the rejected alternative's step (0: none)
  std::string why;                   // one line for the report
};

struct CompileResult {
  GroupingChoice grouping;
  plan::Plan plan;
  Workload workload;
  Assignment assignment;       // after RefineBySimulation
  std::string refinement_log;  // what the simulation changed, one line per change
  std::string run_ahead_log;   // ChooseRunAhead's lines: which forward-only sections run ahead and why
  std::string in_flight_log;   // the in-flight cap chosen and the others tried ("" when none was considered)
  RefinementStats refinement;  // how the refinement's search went (simulations, moves, converged)
  MonolithicPlan monolithic;
  int monolithic_device = 0;           // the GPU type it runs on (index into DevicesOf)
  StepPrediction prediction;           // the sectioned plan's step (simulated)
  SimulatedStep simulated;             // its simulation: per-section utilization and bubbles
  SimulatedStep monolithic_simulated;  // the baseline's, FIFO
  // The fused alternative: the baseline's configuration, or where sections
  // pin their configuration the best one that honours every pin (the
  // baseline itself is never held to pins); found = false with why_not when
  // the pins rule every configuration out.
  MonolithicPlan fused;
  SimulatedStep fused_simulated;
  std::string fused_pins;          // the pins it honours ("tp 2, recompute full"), "" when none
  bool fused_is_baseline = false;  // fused is the baseline's plan (no pins, or pins it meets)
  std::string sbatch;
  std::string report;       // the human table
  std::string report_json;  // the same as one JSON object
  std::string explain;      // why each choice (--explain)
};

// Why the fused plan (CompileResult::fused: the monolithic baseline's
// configuration, or the best one the pins allow, run as one fused section)
// cannot run on the runtime of `support`; "" when it can.
std::string FusedPlanBlocker(const CompileResult& r, const RuntimeSupport& support);

// Plans the spec and renders every output (writes nothing).
StatusOr<CompileResult> Compile(const Spec& spec, const CompileOptions& options);

// Writes plan.json (plan::PlanToJson), job.sbatch (mode 0755) and
// report.txt into options.out_dir, creating it: all three replaced or none
// (base/files.h WriteFilesAtomically; a directory in the way of one is found
// before anything is written).
Status WriteOutputs(const CompileResult& result, const CompileOptions& options);

}  // namespace maestro::compiler
