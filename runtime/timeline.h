// SPDX-License-Identifier: Apache-2.0
// A step as it ran and as the step simulator predicts it (the executor
// draws the last one, or under run-ahead the one before it): rank 0
// turns the merged trace (trace.h) into the measured timeline, fits
// per-section costs to the same step's ops, and writes two Gantt charts on
// one time scale (<run_dir>/timeline_measured.svg, timeline_predicted.svg)
// and the step times side by side (timeline.json). A report, not the run's
// result: a simulation that fails writes nothing.
// May call: runtime/cost_model, scheduler, plan, base. Torch-free.
#pragma once

#include <cstdint>
// GCC 12 reports a false -Wnull-dereference inside nlohmann::json's inlined code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <nlohmann/json.hpp>
#pragma GCC diagnostic pop
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"
#include "scheduler/problem.h"
#include "scheduler/simulator.h"

namespace maestro::runtime {

// The ops of step `step` in the merged trace `events`, as a Simulation of
// `schedule` (times in seconds from the step's first op), and each op's time
// alone on a core (scheduler::AloneSeconds over every rank's computing
// intervals, TP ranks too; plan.shared_cores). A run-ahead section's A ops
// are its forwards (at the rows they computed) and its F ops that only read
// rows back are left out, as the simulator's steady state has it. (A run's
// last step computes nothing ahead; under run-ahead the executor draws the
// step before it, the steady state.)
struct MeasuredStep {
  scheduler::Simulation timeline;
  std::vector<double> alone_seconds;  // per timeline.ops[i]
};
MeasuredStep MeasureStep(const plan::Plan& plan, const scheduler::Schedule& schedule, int64_t step,
                         const nlohmann::json& events);

// `plan` with every section's MicroBatchCost fitted to `measured` (fixed +
// per sample through its micro-batches, forward share, optimizer seconds;
// times alone on a core) and free transfers.
plan::Plan FitCostsToStep(const plan::Plan& plan, const scheduler::Schedule& schedule, const MeasuredStep& measured);

// Writes the timelines of step `step` (problem and schedule as it ran) into `run_dir`.
Status WriteTimelines(const plan::Plan& plan, const scheduler::Problem& problem, const scheduler::Schedule& schedule,
                      int64_t step, const nlohmann::json& events, const std::string& run_dir);

}  // namespace maestro::runtime
