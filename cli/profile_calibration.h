// SPDX-License-Identifier: Apache-2.0
// Profile calibration: `maestro profile` first times every section alone at
// each micro-batch size (maestro-worker --profile, all ranks side by side),
// then trains the compiled plan for a few steps and calibrates the profile
// to what the sections cost in that run. Inside a real, pipelined run a
// micro-batch costs other than in the sweep: fresh samples every time instead
// of one repeated micro-batch, the activations of several micro-batches in
// flight, partial micro-batches whose fixed cost the sweep's few sizes do not
// pin down, and the peers' work on the same cores (docs/e2e.md).
//
// CalibrateProfile, per section:
//  1. Each in-run op's time alone on a core. When the plan's ranks share
//     `plan.shared_cores` cores, an op that ran while D processes computed
//     (every rank's trace events, all ranks' clocks being this machine's)
//     advanced at min(1, cores / D): its alone time is the integral of that
//     rate over the op (the inverse of the simulator's processor sharing).
//     Without shared cores it is the op's duration.
//     A forward-only section's ops where a spool served rows (the trace's
//     "computed" argument: a run-ahead teacher's F ops read the rows its A
//     ops computed a step earlier) count at the rows they computed, and A
//     ops count as forwards: the rows read back are not the section's cost.
//  2. The median forward and backward at every micro-batch size the run
//     used at least kMinOps times. Two sizes or more: the weighted
//     least-squares line seconds = fixed + per_sample * samples through them
//     (forward likewise) replaces the section's points between the smallest
//     and largest of those sizes, and the points outside are scaled by the
//     line over the sweep at the nearer end. One size: every point is scaled
//     by in-run over sweep at that size. None: the sweep is kept.
//  3. The optimizer step becomes its in-run median (the trace's "O" is the
//     optimizer's compute, without the DP all-reduce's wait).
// May call: plan, base, scheduler (AloneSeconds), nlohmann-json (the trace). Thread safety: pure functions.
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
#include "plan/profile.h"

namespace maestro::cli {

// In-run micro-batches of one size needed for that size to count.
inline constexpr int kMinOps = 3;

struct SectionCalibration {
  std::string section;
  int sizes = 0;                  // micro-batch sizes with >= kMinOps in-run ops (0: the sweep is kept)
  int smallest = 0, largest = 0;  // the smallest and largest of them
  int ops = 0;                    // in-run micro-batches of those sizes
  // The in-run line (alone on a core): forward + backward of a micro-batch
  // of n samples = fixed_seconds + seconds_per_sample * n. With one size:
  // fixed 0, per sample = its median / n.
  double fixed_seconds = 0.0;
  double seconds_per_sample = 0.0;
  double sweep_seconds = 0.0;     // the sweep at the planned micro-batch size
  double in_run_seconds = 0.0;    // the calibrated profile there
  double ratio = 1.0;             // in_run / sweep at the planned size
  double optimizer_seconds = -1;  // in-run median optimizer step (-1: none seen, the profile's kept)
};

// profile: the points maestro-worker --profile wrote (plan/profile.h),
// changed in place. trace: the run's trace.json (Chrome trace: "X" events
// named F<n>/B<n>/O (others, e.g. "checkpoint", count as computing) with
// pid = section index, tid = global rank, ts and dur in microseconds,
// args.step, args.samples). Steps below skip_steps (warm-up) are not
// calibrated on.
StatusOr<std::vector<SectionCalibration>> CalibrateProfile(const plan::Plan& plan, const nlohmann::json& trace,
                                                           int64_t skip_steps,
                                                           std::vector<plan::ProfilePoint>* profile);

// Scales sweep points measured side by side by `world` processes on
// `shared_cores` cores to times alone on a core (x min(1, cores / world)):
// the sweep keeps every rank computing at once. No-op when shared_cores is 0.
void ScaleSweepToOneCore(int shared_cores, int world, std::vector<plan::ProfilePoint>* profile);

}  // namespace maestro::cli
