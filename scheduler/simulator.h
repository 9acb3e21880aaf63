// SPDX-License-Identifier: Apache-2.0
// The step simulator: predicts what the runtime will do with a schedule.
//
// Owns: Simulate() (discrete events over the schedule's ops: each rank runs
// its ops in order and blocks on its receives, exactly as the runtime
// executes them), the per-rank and per-section statistics (busy, idle,
// bubbles, utilization), and the two pictures of a step: a Chrome-trace /
// Perfetto JSON (pid = section, tid = DP replica) and an SVG Gantt chart (one
// row per rank, one colour per section, backward darker, optimizer grey).
// May call: base, scheduler/problem.h, scheduler/scheduler.h, scheduler/prepared.h
// (internal: the sample index by id), nlohmann-json.
// Called by: compiler (report), bench, tests.
//
// Model: one rank = one DP replica of a section (its TP/PP/CP ranks move
// together); an op lasts what the cost model says; a sample's activation (or
// gradient) arrives TransferSeconds() after its producer op ends; transfers
// overlap with everything (no link contention); the DP gradient all-reduce
// of a training section is a barrier before its replicas' optimizer steps.
// Run-ahead (SectionSpec::run_ahead > 0, forward-only): the steady state, in
// which that section computed this step's rows during the previous step: its
// consumers receive them from the step's start (+ transfer) while its ranks
// compute (the next batch's rows) as their ops say, so the step is bounded by
// the busiest section and the training path fed by ready inputs, with no
// pipeline fill from that section (docs/run_ahead.md).
// Problem::shared_cores > 0 (one machine, more processes than cores): the
// processes computing at each moment share the cores evenly, so an op lasts
// its cost divided by min(1, cores / processes computing) while it runs.
//
// Thread safety: Simulation is a value; Simulate() is reentrant.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "scheduler/problem.h"
#include "scheduler/scheduler.h"

namespace maestro::scheduler {

struct OpInterval {
  int rank = 0;  // index into Schedule::ranks
  OpKind kind = OpKind::kForward;
  int micro_batch = -1;
  int samples = 0;                // samples in the micro-batch
  double start = 0.0, end = 0.0;  // seconds from the start of the step
};

struct RankStats {
  int section = 0, replica = 0;
  double busy_seconds = 0.0;
  double idle_seconds = 0.0;  // step_seconds - busy_seconds
  int bubbles = 0;            // idle gaps (leading and trailing included)
};

struct SectionStats {
  std::string name;
  int replicas = 0;
  double busy_seconds = 0.0;    // summed over replicas
  double utilization = 0.0;     // busy / (replicas * step_seconds)
  double bubble_seconds = 0.0;  // idle, summed over replicas
};

struct Simulation {
  std::string policy;
  double step_seconds = 0.0;
  std::vector<OpInterval> ops;  // every op, grouped by rank, in program order
  std::vector<RankStats> ranks;
  std::vector<SectionStats> sections;
  double utilization = 0.0;  // over all ranks

  // The figures of the step as one JSON object, for reports:
  // {"policy","step_seconds","utilization",
  //  "sections":[{"name","replicas","utilization","busy_seconds","bubble_seconds"}],
  //  "ranks":[{"section","replica","busy_seconds","idle_seconds","bubbles"}]}
  std::string SummaryJson() const;
  // Chrome-trace JSON (open in ui.perfetto.dev or chrome://tracing).
  std::string ChromeTraceJson() const;
  Status WriteChromeTrace(const std::string& path) const;
  // A Gantt chart a person can open in a browser. axis_seconds > 0 draws the
  // time axis to at least that many seconds, so that two charts (a measured
  // step and its prediction) share one scale side by side.
  std::string GanttSvg(const std::string& title = "", double axis_seconds = 0.0) const;
  Status WriteGanttSvg(const std::string& path, const std::string& title = "", double axis_seconds = 0.0) const;
};

// Runs the schedule. Fails (InvalidArgument) when the schedule breaks a
// promise IndexSchedule() checks, or when its op orders deadlock (a rank
// waits for an op that itself waits, directly or not, on that rank); the
// message names the ranks and ops involved.
StatusOr<Simulation> Simulate(const Problem& problem, const Schedule& schedule);

// The inverse of the shared-cores model, for measured traces: given the
// [start, end) intervals in which processes computed (one per process and
// op, every process of the machine), the time each would have taken alone on
// a core: the integral over it of min(1, cores / processes computing). Same
// unit as the input. cores <= 0: the durations as they are.
std::vector<double> AloneSeconds(const std::vector<std::pair<double, double>>& intervals, int cores);

}  // namespace maestro::scheduler
