// SPDX-License-Identifier: Apache-2.0
// The monolithic baseline the report compares with: every section under one
// configuration on every GPU, one after another per micro-batch, as
// single-model (Megatron-style) trainers run them. docs/monolithic.md has how
// a section runs under the shared configuration, the named terms, their
// formulas and the figures of the example specs. Its simulation is in
// compiler/step_simulation.h (SimulateMonolithic).
// May call: base, plan, compiler/assignment.h, compiler/candidates.h,
// compiler/cost_model.h, compiler/planner.h (PlanMonolithic plans the
// sectioned plan to find the GPUs it holds).
// Thread safety: pure functions of their arguments.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/assignment.h"
#include "compiler/candidates.h"
#include "compiler/cost_model.h"
#include "plan/plan.h"

namespace maestro::compiler {

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

// The best configuration on the GPUs `on` among those `admit` accepts (a
// fused plan that honours the spec's pins: compile.cc), found = false with
// why_not when none fits; no terms. The baseline itself is never filtered.
MonolithicPlan PlanMonolithicAdmitting(const CostModel& model, const Workload& work,
                                       const std::vector<MonolithicDevice>& on, const PlannerOptions& options,
                                       const std::function<bool(const plan::ParallelConfig&)>& admit);

// The baseline the report compares with (docs/monolithic.md, "The fair
// comparison"): a workload on one GPU type runs on all GPUs of the default
// device (index `device`), as single-model trainers run them. A workload
// whose sections are placed on several GPU types (a teacher on an older
// partition) runs on the nodes the sectioned plan holds of each type: the
// best of each type alone and all of them in lockstep.
MonolithicPlan PlanMonolithic(const CostModel& model, const Workload& work, int device, const PlannerOptions& options);

// The terms as report lines ("  name: +x s (why)"), for the --explain text.
std::string DescribeMonolithic(const MonolithicPlan& m);

}  // namespace maestro::compiler
