// SPDX-License-Identifier: Apache-2.0
// The planner: chooses every section's TP/PP/CP/DP, micro-batch size,
// recomputation and GPU count so that
//   - the whole nodes held per GPU type fit that type's node count (het
//     components do not share nodes; a component is part of one node or
//     whole nodes), or, where sections share nodes (DeviceType::packs_nodes),
//     the GPUs per type fit its nodes x gpus_per_node,
//   - every section's per-GPU memory fits,
//   - on every edge a pinned fan-out or fan-in holds exactly; unpinned, any
//     two DP degrees (EdgeDpsAllowed: at most kMostDpSlots placement slots,
//     or one dividing the other under PlannerOptions::nested_dp_edges),
// maximizing the steady-state throughput B / max(section step time, edge
// transfer time): sections run concurrently under the wavefront schedule, a
// section active for a share p of the samples does p of the work.
//
// Method: per section and DP degree, the Pareto front (nodes, seconds) of its
// configurations; a binary search over the candidate bottleneck times; for
// each, the fewest nodes that keep every section and edge under it (exact
// tree dynamic programming when the section graph is a forest on one GPU
// type; branch and bound otherwise). ExhaustiveSearch is the oracle the tests
// compare with. The single-configuration baseline (PlanMonolithic,
// compiler/monolithic.h) calls the planner to find the GPUs it holds; it is
// not a part of it, so this header does not include it.
//
// The public header of the planner; the parts have their own files:
//   compiler/assignment.h       the workload, an assignment, PlanOutcome
//   compiler/candidates.h       the configurations a section may take, and
//                               the rules that gate them; PlannerOptions
//   compiler/planner.cc         PlanSections, in named phases
//   compiler/sectioned_search.h the fronts and their search (internal)
//   compiler/exhaustive_search.cc  the oracle
//   compiler/step_prediction.h  the StepPredictor seam and the analytic
//                               predictor; the simulator fills the seam
//                               (SimulatorStepPredictor,
//                               compiler/step_simulation.h)
// This header includes the headers above but sectioned_search.h, so its
// callers see the whole planner.
// May call: base, plan, compiler/cost_model.h, compiler/runtime_support.h and
// the parts above. Thread safety: pure functions of their arguments.
#pragma once

#include "compiler/assignment.h"
#include "compiler/candidates.h"
#include "compiler/cost_model.h"
#include "compiler/step_prediction.h"

namespace maestro::compiler {

PlanOutcome PlanSections(const CostModel& model, const Workload& work, const PlannerOptions& options);

// Tries every combination of every section's fitting configurations.
// Exponential: for tests on small instances only.
PlanOutcome ExhaustiveSearch(const CostModel& model, const Workload& work, const PlannerOptions& options);

}  // namespace maestro::compiler
