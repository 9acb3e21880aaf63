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

struct MonolithicPlan {
  bool found = false;
  plan::ParallelConfig config;  // one configuration for every section
  int gpus = 0;
  std::vector<SectionCost> sections;  // each section under `config`
  MemoryBreakdown memory;             // all sections' memory per GPU, summed
  double step_seconds = 0;
  double throughput = 0;
  std::string planner_only;
  std::string why_not;  // when !found
};

// All sections on all GPUs of the default device (index `device`), one after
// another per micro-batch, as single-model trainers run them.
MonolithicPlan PlanMonolithic(const CostModel& model, const Workload& work, int device, const PlannerOptions& options);

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
