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
// section's (PP - 1)-stage latency is added to its outgoing transfers,
// except where it runs ahead: its rows were computed during the previous
// step, and its own ranks pay its fill (spread over its micro-batches; none
// where its pipeline streams across steps, run_ahead >= 2). An
// activation (or gradient) reaches the other side after bytes / link
// bandwidth. In the monolithic replica an encoder that cannot be split the
// way the LLM is (tensor- or pipeline-parallel) runs whole on pipeline stage
// 0 of every TP rank, so stage 0 sets the pipeline's pace: its fill and
// drain cost PP - 1 such stage-0 times.
//
// Samples: each carries modality m with probability `fraction` (independent,
// deterministic in (seed, batch)), with the modality's tokens, or with a
// mix its drawn kind's, whose encoder work is that kind's (a micro-batch of
// an encoder costs its stage time at the sum of its samples' work, in mean
// samples); text tokens = seq_len. The prediction is the mean over `batches` sampled global batches.
// May call: base, plan, scheduler (problem, scheduler, simulator),
// compiler/cost_model.h and the planner's parts (compiler/assignment.h,
// compiler/candidates.h, compiler/monolithic.h, compiler/step_prediction.h:
// AnalyticStepPredictor is the fallback when a simulation fails).
// The refinement of a planned assignment by these simulations is
// compiler/refinement.h.
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
#include "compiler/sample_mix.h"
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
  // Modalities with a [[data.modality.mix]] (compiler/sample_mix.h): a
  // sample that carries one draws its kind (DrawMixEntry under `seed`) and
  // carries that kind's placeholders; its encoder charges the kind's work
  // (SectionWork::mix_work). Others carry `tokens`.
  std::vector<ModalityDraws> draws;
  // RefineBySimulation: threads that simulate a section's neighbours ahead
  // (0 = this machine's cores, at most 16). The refined plan does not depend
  // on it (FindBestMove replays the sequential order).
  int threads = 0;
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
