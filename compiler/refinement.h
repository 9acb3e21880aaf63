// SPDX-License-Identifier: Apache-2.0
// The refinement of a planned assignment by simulation: a local search that
// moves one section at a time (its TP, PP, CP, recomputation, DP and
// micro-batch inside the nodes it holds), simulates each neighbour's step
// (compiler/step_simulation.h, wavefront) and takes the move that shortens
// it most, until none does. It sees what the analytic planner's steady state
// cannot: pipeline fill between sections and the drain.
//
// Owns: RefinementMove, the move set (NeighbourAssignments), the search's
// settings and caps (RefinementSearchSettings, kRefinementTolerance),
// RefineBySimulation and its RefinementStats.
// May call: base, plan, compiler/cost_model.h, compiler/assignment.h,
// compiler/candidates.h, compiler/step_simulation.h (SimulateSectioned).
// Thread safety: pure functions. RefineBySimulation simulates a section's
// neighbours on up to SimulationSettings::threads helper threads (each on its
// own copy of the assignment; the CostModel and Workload are only read) and
// replays their results in order: its plan, log and counts do not depend on
// the threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/assignment.h"
#include "compiler/candidates.h"
#include "compiler/cost_model.h"
#include "compiler/step_simulation.h"

namespace maestro::compiler {

// The refinement of a planned assignment by simulation (RefineBySimulation)
// is a local search. Its move set, per section, inside the nodes the section
// holds: one of
//   - TP, PP or CP: any degree the candidates allow (compiler/candidates.h);
//   - recomputation on or off, where the runtime support has it;
//   - none of these,
// with any DP and any micro-batch size of PlannerOptions::micro_batches
// re-chosen along (the same nodes hold fewer, wider replicas or more,
// narrower ones; a wider or recomputing replica has memory for another
// micro-batch). So a micro-batch move reaches every size, not only the
// halved or doubled one, and a section on part of a node may grow its DP
// into the rest. It contains the former neighbourhood (micro-batch, DP and
// TP or PP each halved or doubled at once).
enum class RefinementMove { kMicroBatch, kDp, kTp, kPp, kCp, kRecompute };
const char* RefinementMoveName(RefinementMove move);

// A move is taken only when it shortens the simulated step by more than this
// share of it (0.5%: below it a one-batch simulation's sampling noise
// decides; it also bounds the number of moves).
constexpr double kRefinementTolerance = 0.005;

struct RefinementNeighbour {
  RefinementMove move;
  Assignment assignment;  // `a` with the section moved, summarized
};

// Every feasible single move of section `section` in `a` (the move set
// above), in a fixed order. `move` names what it changes: TP, PP, CP or
// recomputation when one of them, else micro-batch when that, else DP.
std::vector<RefinementNeighbour> NeighbourAssignments(const CostModel& model, const Workload& work, const Assignment& a,
                                                      size_t section, const PlannerOptions& options);

// What the search compares: `settings` on its first sampled batches, as many
// as cover 2048 samples of `global_batch` (at least one, at most
// settings.batches: a small global batch's one batch is too noisy to rank
// plans by; a large one is the sample).
SimulationSettings RefinementSearchSettings(const SimulationSettings& settings, int64_t global_batch);

struct RefinementStats {
  bool ran = false;        // the plan could be simulated (else it is kept as planned)
  int simulations = 0;     // run by the search
  int moves = 0;           // taken
  bool converged = false;  // ended at a local optimum, not at the cap
};

// Refines a planned assignment by simulation (wavefront, on the search
// settings above): coordinate descent over the sections (those others wait
// for first): a section takes its best move (the shortest simulated step,
// by > kRefinementTolerance; links must keep up: every edge's busy time under
// the step) until none improves, then the next section; a section searched
// without result is searched again only after another one moved. It ends
// when no single move of any section improves the step (a local optimum),
// then a section on part of its node(s) takes the rest of them (more DP)
// when that does not lengthen the step by > 0.1% (slack for late samples),
// and the descent runs again. Capped at 400 simulations and 8e5 simulated
// samples x sections (the 6-section, 4096-sample benchmark: 32, ~0.8 s), counted,
// so the same spec gives the same plan; `stats->converged` is false when the
// cap ended it. Neighbours whose section alone is busy longer than the step
// to beat are not simulated. `log` gets one line per change. The analytic
// planner's objective is the steady state; this adds what it cannot see:
// pipeline fill between sections (an upstream section with large
// micro-batches makes the downstream one wait) and the drain.
Assignment RefineBySimulation(const CostModel& model, const Workload& work, const Assignment& a,
                              const PlannerOptions& options, const SimulationSettings& settings, std::string* log,
                              RefinementStats* stats = nullptr);

}  // namespace maestro::compiler
