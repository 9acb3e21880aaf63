// SPDX-License-Identifier: Apache-2.0
// The outcome of one compile as a value: the grouping chosen, the plan, the
// workload and assignment it was planned from, the sectioned plan's and the
// baselines' simulations, and every rendered output (job.sbatch, the report
// as text and JSON, the --explain text). compiler/compile.h fills it
// (Compile); the renderers (compiler/report.h, compiler/explain.h) read it.
//
// Owns: GroupingChoice, CompileResult.
// May call: plan, compiler/assignment.h (Workload, Assignment),
// compiler/monolithic.h (MonolithicPlan), compiler/refinement.h
// (RefinementStats), compiler/job_alternatives.h (JobPricing), compiler/step_prediction.h, compiler/step_simulation.h
// (SimulatedStep).
// Thread safety: values.
#pragma once

#include <string>
#include <vector>

#include "compiler/assignment.h"
#include "compiler/job_alternatives.h"
#include "compiler/monolithic.h"
#include "compiler/refinement.h"
#include "compiler/step_prediction.h"
#include "compiler/step_simulation.h"
#include "plan/plan.h"

namespace maestro::compiler {

// The grouping the plan runs and the best rejected alternative.
struct GroupingChoice {
  bool fused = false;  // chosen: every component in one fused section
  // Chosen: the one component of the workload at the baseline's
  // configuration and GPUs (compiler/baseline_plan.h), predicted faster than
  // the sectioned search's plan (rejected = "sectioned").
  bool baseline = false;
  double chosen_step_seconds = 0;    // simulated (analytic when no simulation ran)
  std::string rejected;              // "sectioned" | "fused" | "" (none was possible)
  double rejected_step_seconds = 0;  // the rejected alternative's step (0: none)
  std::string why;                   // one line for the report
  // Why no sectioned plan was made ("" when one was): GPU local mode on
  // fewer GPUs than its sections need, planned fused on them
  // (compiler/workload_builder.h LocalGpusTooFewForSections). The
  // assignment is then each component under the fused configuration.
  std::string no_sectioned;
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
  // The job's alternatives priced over its length (compiler/job_pricing.h).
  JobPricing job;
  std::string sbatch;
  std::string report;                 // the human table
  std::string report_json;            // the same as one JSON object
  std::vector<std::string> warnings;  // the report's warning lines (maestro-compile also prints them to stderr)
  std::string explain;                // why each choice (--explain)
};

}  // namespace maestro::compiler
