// SPDX-License-Identifier: Apache-2.0
// The planner's run-ahead choice (docs/run_ahead.md): per forward-only
// section, how many global batches it computes ahead of the training
// sections (plan.json's `run_ahead`, read by runtime/run_ahead.h).
//
// Rule: a spec's `run_ahead` pin is kept (planner-only where the runtime
// support lacks it). Otherwise every forward-only section that feeds a
// training section directly, where the support has run-ahead (TP and/or
// PP > 1: `run_ahead_mp`; CP > 1: `run_ahead_cp`; either without an
// upstream section; not EP), gets run_ahead = 1 (2 for a pipelined one the
// runtime streams across steps, `run_ahead_stream`: with 1 it would fill and
// drain its pipeline every step) when that shortens the simulated step by
// more than kRefinementTolerance; that suffices in the steady state (the
// simulator, scheduler/simulator.h: the next batch's rows are ready at the
// step's start), more only absorbs step-to-step variation and costs spool.
// The monolithic baseline has no separate forward-only section: nothing here
// touches it.
// May call: compiler (assignment, candidates, spec, step_simulation, refinement), plan, base.
// Thread safety: a pure function of its arguments.
#pragma once

#include <string>

#include "compiler/assignment.h"
#include "compiler/candidates.h"
#include "compiler/refinement.h"
#include "compiler/spec.h"
#include "compiler/step_simulation.h"

namespace maestro::compiler {

// Sets SectionWork::pipeline_streams_ahead (its pin, else
// plan::kMaxRunAhead) on every forward-only section that feeds a training
// section, has no upstream section, and whose run_ahead pin (if any) is 2
// or more, where `support` has run-ahead with model parallelism and the
// stream across steps: ChooseRunAhead gives such a section at PP > 1
// enough batches that those after the next hold PP - 1 of its micro-batches,
// so the analytic search counts its pipeline without a fill per step (the
// runtime pays it once per start).
void MarkPipelineStreams(const Spec& spec, const RuntimeSupport& support, Workload* work);

// Sets a->sections[i].run_ahead (and planner_only for a pin the support
// lacks); returns one line per section considered, for the report and
// --explain ("" when no section is forward-only and feeds a training one).
std::string ChooseRunAhead(const Spec& spec, const CostModel& model, const Workload& work, const PlannerOptions& po,
                           const SimulationSettings& settings, Assignment* a);

}  // namespace maestro::compiler
