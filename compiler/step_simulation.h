// SPDX-License-Identifier: Apache-2.0
// Step prediction by simulation: the compiler's cost model behind the
// scheduler's SectionCostModel interface, sampled global batches, and
// FromPlan -> BuildSchedule -> Simulate for both plans the report compares:
//   - the sectioned plan, each section on its own ranks, wavefront schedule;
//   - the monolithic baseline as ONE section (every rank runs every section
//     of the workload, one after another per micro-batch), FIFO: the data
//     order dealt round-robin over the DP replicas, as single-model trainers
//     (Megatron's sampler) do. A replica that drew more images than the
//     others is a straggler the step waits for.
//
// What a micro-batch of n samples costs on one replica (both plans): the cost
// model's time of one micro-batch on one pipeline stage at n samples
// (CostModel::EvaluateWith), split forward : backward = 1 : 2 (1 : 3 with
// recomputation). Per step, a training section adds its DP gradient sync and
// the (PP - 1) stage times of 1F1B fill and drain; a pipelined upstream
// section's (PP - 1)-stage latency is added to its outgoing transfers. An
// activation (or gradient) reaches the other side after bytes / link
// bandwidth. In the monolithic replica an encoder that cannot be split the
// way the LLM is (tensor- or pipeline-parallel) runs whole on pipeline stage
// 0 of every TP rank, so stage 0 sets the pipeline's pace: its fill and
// drain cost PP - 1 such stage-0 times.
//
// Samples: each carries modality m with probability `fraction` (independent,
// deterministic in (seed, batch)), with the modality's tokens; text tokens =
// seq_len. The prediction is the mean over `batches` sampled global batches.
// May call: base, plan, scheduler (problem, scheduler, simulator),
// compiler/cost_model.h and the planner's parts (compiler/assignment.h,
// compiler/candidates.h, compiler/monolithic.h, compiler/step_prediction.h:
// AnalyticStepPredictor is the fallback when a simulation fails).
// Thread safety: pure functions; the cost-model adapters are immutable after
// construction.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/assignment.h"
#include "compiler/candidates.h"
#include "compiler/cost_model.h"
#include "compiler/monolithic.h"
#include "compiler/step_prediction.h"
#include "plan/plan.h"
#include "scheduler/problem.h"
#include "scheduler/scheduler.h"

namespace maestro::compiler {

struct SimulationSettings {
  int batches = 4;  // sampled global batches the prediction averages
  uint64_t seed = 0;
  int64_t seq_len = 1;
  std::vector<plan::ModalityDesc> modalities;
};

struct SectionSimulation {
  std::string name;
  int replicas = 0;
  double utilization = 0;     // busy / (replicas * step), mean over batches
  double bubble_seconds = 0;  // idle per replica per step, mean
  double bubbles = 0;         // idle gaps per replica per step, mean
};

struct SimulatedStep {
  bool ok = false;
  std::string error;  // why not, when !ok
  std::string policy;
  int batches = 0;
  double step_seconds = 0;  // mean over the sampled batches
  double min_step_seconds = 0, max_step_seconds = 0;
  double utilization = 0;  // over all replicas, mean
  std::vector<SectionSimulation> sections;
};

// What the sectioned simulation charges one micro-batch of section `s` under
// `cost` (its planned configuration), as a line in the samples it holds
// (through 1 and micro_batch samples), for plan.json: the runtime schedules
// with it and draws its predicted timeline with it.
plan::MicroBatchCost MicroBatchCostOf(const CostModel& model, const SectionWork& s, const SectionCost& cost);

// The global batch number `batch` of the settings' distribution, with bits
// over `modality_names` (those of scheduler::ModalityNamesOf).
std::vector<scheduler::Sample> SampleGlobalBatch(int64_t global_batch, const SimulationSettings& settings, int batch,
                                                 const std::vector<std::string>& modality_names);

// The sectioned plan of `a` under `policy` (wavefront by default).
SimulatedStep SimulateSectioned(const CostModel& model, const Workload& work, const Assignment& a,
                                const SimulationSettings& settings,
                                scheduler::Policy policy = scheduler::Policy::kWavefront);

// The monolithic baseline `m` (PlanMonolithic on device `device`), FIFO.
SimulatedStep SimulateMonolithic(const CostModel& model, const Workload& work, const MonolithicPlan& m, int device,
                                 const SimulationSettings& settings);

// Refines a planned assignment by simulation: for one section at a time, the
// neighbouring configurations (micro-batch, DP, and TP or PP halved or
// doubled; same CP and recomputation) that hold the same nodes (so a section of a
// few GPUs may grow its DP into the rest of its node instead of idling it),
// fit in memory, keep every edge's fan-out rule and pins; the one with the
// shortest simulated step (wavefront, one sampled batch) wins when it beats
// the current one by > 0.5%. Rounds repeat until nothing improves (at most
// `rounds`), within a budget of 24 simulations. `log` gets one line per
// change. The analytic planner's objective is the steady state; this adds
// what it cannot see: pipeline fill between sections (an upstream section
// with large micro-batches makes the downstream one wait) and the drain.
Assignment RefineBySimulation(const CostModel& model, const Workload& work, const Assignment& a,
                              const PlannerOptions& options, const SimulationSettings& settings, std::string* log,
                              int rounds = 4);

// The prediction a simulation gives (the analytic one, saying why, when it failed).
StepPrediction PredictionOf(const SimulatedStep& sim, const CostModel& model, const Workload& work,
                            const Assignment& a);

// The StepPredictor seam filled by the simulator (wavefront); falls back to
// the analytic prediction, saying so in `predictor`, when simulation fails.
class SimulatorStepPredictor : public StepPredictor {
 public:
  explicit SimulatorStepPredictor(SimulationSettings settings) : settings_(std::move(settings)) {}
  StepPrediction Predict(const CostModel& model, const Workload& work, const Assignment& a) const override;
  // The full simulation behind Predict's number.
  SimulatedStep Run(const CostModel& model, const Workload& work, const Assignment& a) const;

 private:
  SimulationSettings settings_;
};

}  // namespace maestro::compiler
