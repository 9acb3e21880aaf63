// SPDX-License-Identifier: Apache-2.0
// The planner: chooses every section's TP/PP/CP/DP, micro-batch size,
// recomputation and GPU count so that
//   - the whole nodes held per GPU type fit that type's node count (het
//     components do not share nodes; a component is part of one node or
//     whole nodes),
//   - every section's per-GPU memory fits,
//   - on every edge DP_from * fanout = DP_to or DP_to * fanin = DP_from
//     (integer; pinned fan-outs hold exactly),
// maximizing the steady-state throughput B / max(section step time, edge
// transfer time): sections run concurrently under the wavefront schedule, a
// section active for a share p of the samples does p of the work.
//
// Method: per section and DP degree, the Pareto front (nodes, seconds) of its
// configurations; a binary search over the candidate bottleneck times; for
// each, the fewest nodes that keep every section and edge under it (exact
// tree dynamic programming when the section graph is a forest on one GPU
// type; branch and bound otherwise). ExhaustiveSearch is the oracle the tests
// compare with; PlanMonolithic is the single-configuration baseline.
//
// Seam: StepPredictor predicts the step of a chosen plan; the compiler uses
// the scheduler's discrete-event simulator (SimulatorStepPredictor,
// compiler/step_simulation.h); AnalyticStepPredictor is the steady-state
// formula it falls back to.
// May call: base, plan, compiler/cost_model.h, compiler/runtime_support.h.
// Thread safety: pure functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/cost_model.h"
#include "compiler/runtime_support.h"

namespace maestro::compiler {

struct Workload {
  std::vector<SectionWork> sections;
  std::vector<EdgeWork> edges;
};

struct PlannerOptions {
  bool allow_planner_only = false;  // search configurations the runtime cannot run yet
  RuntimeSupport support = kRuntimeSupport;
  std::vector<int> micro_batches = {1, 2, 4, 8, 16, 32};
  int max_pp = 64;
  int max_cp = 8;
};

struct SectionChoice {
  SectionCost cost;
  std::string planner_only;  // features the runtime lacks ("" = runs today)
};

struct Assignment {
  std::vector<SectionChoice> sections;
  std::vector<double> edge_seconds;
  double bottleneck_seconds = 0;  // max over sections and edges
  double throughput = 0;          // samples / s at steady state
  std::vector<int> nodes_per_device;
  int gpus = 0;  // GPUs held (whole nodes)
};

// Why planning failed, pointing at what the spec must change.
struct PlanFailure {
  enum class Kind { kNone, kNoConfigFits, kBudgetTooSmall, kFanOutImpossible };
  Kind kind = Kind::kNone;
  int section = -1;
  int edge = -1;
  std::string message;
};

struct PlanOutcome {
  Assignment assignment;
  PlanFailure failure;
  bool ok() const { return failure.kind == PlanFailure::Kind::kNone; }
  // Per section: configurations evaluated, and how many fit in memory.
  std::vector<int> evaluated, fitting;
};

// Every structurally valid configuration of a section (degrees divide the
// model, the GPU count is a divisor or multiple of a node, pins hold,
// runtime-supported unless options.allow_planner_only). Memory not checked.
std::vector<plan::ParallelConfig> CandidateConfigs(const CostModel& model, const SectionWork& section,
                                                   const PlannerOptions& options);

PlanOutcome PlanSections(const CostModel& model, const Workload& work, const PlannerOptions& options);

// Tries every combination of every section's fitting configurations.
// Exponential: for tests on small instances only.
PlanOutcome ExhaustiveSearch(const CostModel& model, const Workload& work, const PlannerOptions& options);

// Fills edge_seconds, bottleneck, throughput, nodes and GPUs of `a` from its
// section choices.
void Summarize(const CostModel& model, const Workload& work, Assignment& a);

// The GPUs a monolithic baseline runs on: `gpus` GPUs of type `device`.
struct MonolithicDevice {
  int device = 0;
  int gpus = 0;
};

// One named effect of running every section under one configuration on
// every GPU (docs/monolithic.md has the list, the formulas and the figures
// of the example specs): what it adds to the monolithic step.
//   stage0_bottleneck: an encoder that cannot be split the way the LLM is
//     runs whole on pipeline stage 0, so stage 0 paces all PP stages for the
//     step's (micro-batches + PP - 1) stage times; without it the encoder's
//     work would be spread over the PP stages.
//   encoder_tp: an encoder forced to the shared TP degree runs whole on every
//     TP rank (our runtime cannot split it) or split into narrow GEMMs with
//     per-layer all-reduces; without it, its single-GPU time / TP.
//   dp_straggler: data-dependent sections (an encoder active for a share p
//     of the samples): the data order dealt round-robin gives each DP replica
//     a Binomial count; the synchronous step waits for the busiest replica;
//     without it every replica gets the mean count.
//   colocated_memory: every section's weights, gradients, optimizer states
//     and activations (of the fullest micro-batch: every sample carrying the
//     modality) share each GPU's memory; the step of the best configuration
//     minus that of the best configuration if each section had the memory to
//     itself (a teacher that does not fit beside the student forces a higher
//     TP/PP or a smaller micro-batch).
//   gpu_type_lockstep: on GPUs of several types one configuration gives every
//     DP replica the same samples, so the slowest type paces the step; the
//     step minus that of the same GPUs with samples dealt in proportion to
//     each type's speed.
// Each is the analytic step of the chosen configuration with the effect
// minus without it (the others kept); they are not additive.
struct MonolithicTerm {
  std::string name;
  double seconds = 0;
  std::string why;
};

struct MonolithicPlan {
  bool found = false;
  plan::ParallelConfig config;  // one configuration for every section
  int gpus = 0;
  std::vector<MonolithicDevice> devices;  // the GPU types it runs on, in lockstep
  double peak_flops = 0;                  // of all its GPUs
  std::vector<SectionCost> sections;      // each section under `config` (on the slowest type)
  MemoryBreakdown memory;                 // all sections' memory per GPU, summed
  double stage0_seconds = 0;              // one micro-batch on pipeline stage 0 (the pacing stage)
  double step_seconds = 0;
  double throughput = 0;
  std::vector<MonolithicTerm> terms;
  std::string basis;  // which GPUs and why (the fair comparison)
  std::string planner_only;
  std::string why_not;  // when !found
};

// Which effects EvaluateMonolithic charges (all by default; tests and the
// terms turn one off at a time).
struct MonolithicEffects {
  bool stage0_bottleneck = true;
  bool encoder_tp = true;
  bool dp_straggler = true;
  bool colocated_memory = true;
  bool gpu_type_lockstep = true;
};

// The monolithic baseline of configuration `c` on the GPUs `on` (dp must be
// their count / (tp * pp * cp)): every section on every GPU, one after
// another per micro-batch; found = false when it does not fit in memory
// (why_not says so) or `c` does not divide the GPUs. Terms not filled.
MonolithicPlan EvaluateMonolithic(const CostModel& model, const Workload& work, const std::vector<MonolithicDevice>& on,
                                  const plan::ParallelConfig& c, const PlannerOptions& options,
                                  const MonolithicEffects& effects = {});

// The best configuration on the GPUs `on`, with its terms.
MonolithicPlan PlanMonolithicOn(const CostModel& model, const Workload& work, const std::vector<MonolithicDevice>& on,
                                const PlannerOptions& options);

// The baseline the report compares with (docs/monolithic.md, "The fair
// comparison"): a workload on one GPU type runs on all GPUs of the default
// device (index `device`), as single-model trainers run them. A workload
// whose sections are placed on several GPU types (a teacher on an older
// partition) runs on the nodes the sectioned plan holds of each type: the
// best of each type alone and all of them in lockstep.
MonolithicPlan PlanMonolithic(const CostModel& model, const Workload& work, int device, const PlannerOptions& options);

// The terms as report lines ("  name: +x s (why)"), for the --explain text.
std::string DescribeMonolithic(const MonolithicPlan& m);

// ---- the simulator seam --------------------------------------------------------
struct StepPrediction {
  double step_seconds = 0;  // one global batch, fill and drain included
  double steady_state_seconds = 0;
  double samples_per_second = 0;
  std::string predictor;  // which model produced it
};

class StepPredictor {
 public:
  virtual ~StepPredictor() = default;
  virtual StepPrediction Predict(const CostModel& model, const Workload& work, const Assignment& a) const = 0;
};

// Steady state = the slowest section or edge; plus the pipeline fill: one
// micro-batch of every upstream section on the longest path.
class AnalyticStepPredictor : public StepPredictor {
 public:
  StepPrediction Predict(const CostModel& model, const Workload& work, const Assignment& a) const override;
};

}  // namespace maestro::compiler
