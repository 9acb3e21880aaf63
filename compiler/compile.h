// SPDX-License-Identifier: Apache-2.0
// maestro-compile's pipeline as a library: spec -> workload (cost model's
// view) -> planner (+ monolithic baseline) -> plan.json, job.sbatch, report.
//
// Owns: the mapping from spec to the cost model's inputs (tokens per section,
// activation shares, edge bytes), the checks that need the cost model (a
// section that fits at no configuration, a budget too small, an impossible
// fan-out; reported as file:line:col), and the three emitters. Every user
// string that reaches job.sbatch is shell-quoted or was rejected by the spec
// reader.
// May call: base, plan, scheduler (through compiler/step_simulation.h),
// compiler/*. Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/cost_model.h"
#include "compiler/planner.h"
#include "compiler/spec.h"
#include "compiler/step_simulation.h"
#include "plan/plan.h"

namespace maestro::compiler {

// One `--pin SECTION.KEY=VALUE`: overrides (or adds) a pin of the spec.
struct PinOverride {
  std::string section;
  std::string key;  // tp | dp | pp | micro_batch
  int value = 0;
  std::string text;  // as given, for messages
};

// Parses "SECTION.KEY=VALUE" (KEY one of tp, dp, pp, micro_batch; VALUE a
// positive integer). InvalidArgument with the fix otherwise.
StatusOr<PinOverride> ParsePin(const std::string& text);

// Parses --runtime-support: a comma list of the features the target runtime
// has, from dp, micro_batch, tp_decoder, pp_decoder, tp_encoder, pp_encoder,
// cp, ep, moe, recompute; or "all". InvalidArgument names an unknown one.
StatusOr<RuntimeSupport> ParseRuntimeSupport(const std::string& list);
std::string RuntimeSupportText(const RuntimeSupport& support);

struct CompileOptions {
  std::string out_dir = ".";              // as given: job.sbatch names plan.json through it
  std::string worker = "maestro-worker";  // the step's program (a stub in Slurm tests)
  std::vector<std::string> worker_args;   // appended (shell-quoted) to the worker's command line
  bool allow_planner_only = false;
  // What the target runtime runs (--runtime-support); this build's table by
  // default. Local mode always plans for this build's runtime.
  RuntimeSupport support = kRuntimeSupport;
  bool support_given = false;               // --runtime-support was used
  std::vector<ProfileSpec> extra_profiles;  // from --profiles (measured by the runtime)
  std::vector<PinOverride> pins;            // from --pin, applied over the spec's pins
  // > 0: local mode (`maestro run`): ignore [cluster]'s node and GPU counts and
  // plan for this machine: one node of `local_ranks` CPU slots that every
  // section shares (no whole-node rule), only configurations the runtime runs.
  int local_ranks = 0;
  // Local mode: the cores those ranks share (--local-cores; 0: one each).
  // Fewer cores than ranks makes the step simulation share them
  // (plan.shared_cores), as the operating system does.
  int local_cores = 0;
};

struct CompileResult {
  plan::Plan plan;
  Workload workload;
  Assignment assignment;       // after RefineBySimulation
  std::string refinement_log;  // what the simulation changed, one line per change
  MonolithicPlan monolithic;
  int monolithic_device = 0;           // the GPU type it runs on (index into DevicesOf)
  StepPrediction prediction;           // the sectioned plan's step (simulated)
  SimulatedStep simulated;             // its simulation: per-section utilization and bubbles
  SimulatedStep monolithic_simulated;  // the baseline's, FIFO
  std::string sbatch;
  std::string report;       // the human table
  std::string report_json;  // the same as one JSON object
  std::string explain;      // why each choice (--explain)
};

std::vector<DeviceType> DevicesOf(const Spec& spec);

// The spec as compiled under `options`: --pin applied (an unknown section is
// InvalidArgument), and in local mode [cluster] replaced by one node of
// options.local_ranks slots of the spec's first CPU type (else a synthetic
// "cpu" type: 4 GB, 0.05 TFLOP/s) that every section runs on.
StatusOr<Spec> EffectiveSpec(const Spec& spec, const CompileOptions& options);
StatusOr<Workload> BuildWorkload(const Spec& spec, const std::vector<DeviceType>& devices,
                                 const std::vector<ProfileSpec>& extra_profiles = {});

// Plans the spec and renders every output (writes nothing).
StatusOr<CompileResult> Compile(const Spec& spec, const CompileOptions& options);

// Writes plan.json (through plan::SavePlan), job.sbatch (mode 0755) and
// report.txt into options.out_dir, creating it.
Status WriteOutputs(const CompileResult& result, const CompileOptions& options);

// Reads a JSON array of {"section","gpus","micro_batch","seconds"} objects
// (what the runtime writes) into profiles.
StatusOr<std::vector<ProfileSpec>> ReadProfilesJson(const std::string& path);

// The job script of a plan (exposed for tests).
std::string RenderSbatch(const plan::Plan& plan, const Spec& spec, const CompileOptions& options);

}  // namespace maestro::compiler
