// SPDX-License-Identifier: Apache-2.0
// Profile calibration: `maestro profile` first times every section alone at
// each micro-batch size (maestro-worker --profile, all ranks side by side),
// then trains the compiled plan for a few steps and compares. Inside a real,
// pipelined run a section's micro-batch costs more than in the sweep (fresh
// samples every time instead of one repeated micro-batch, the activations of
// several micro-batches in flight, the peers' MPI progress and data loading
// on the same cores): on this 2-core machine 5-30% more, which the step
// simulator then under-predicts by as much (docs/e2e.md). CalibrateProfile
// measures that factor per section at its planned micro-batch size and scales
// the section's profile points by it; the optimizer step is replaced by its
// in-run median.
// May call: plan, base, nlohmann-json (the trace). Thread safety: pure functions.
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

struct SectionCalibration {
  std::string section;
  int samples = 0;                // the micro-batch size compared (0: none comparable, ratio 1)
  int ops = 0;                    // in-run micro-batches of that size
  double sweep_seconds = 0.0;     // the profile's forward (+ backward) at that size
  double in_run_seconds = 0.0;    // median in-run forward + median backward at that size
  double ratio = 1.0;             // in_run / sweep: what every point of the section was scaled by
  double optimizer_seconds = -1;  // in-run median optimizer step (-1: none seen, the profile's kept)
};

// profile: the points maestro-worker --profile wrote (plan/profile.h), scaled
// in place. trace: the run's trace.json (Chrome trace: "X" events
// named F<n>/B<n>/O with pid = section index, args.step, args.samples,
// dur in microseconds). Steps below skip_steps (warm-up) are ignored.
StatusOr<std::vector<SectionCalibration>> CalibrateProfile(const plan::Plan& plan, const nlohmann::json& trace,
                                                           int64_t skip_steps,
                                                           std::vector<plan::ProfilePoint>* profile);

}  // namespace maestro::cli
