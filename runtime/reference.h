// SPDX-License-Identifier: Apache-2.0
// The monolithic reference: one process, the same models (same seeds), the
// same global batches (the same SampleIndex order), every section one after
// another over the whole batch (runtime/graph_forward.h), autograd across
// section boundaries, the same loss scaling and optimizer. A sectioned,
// wavefront-scheduled run must give the same loss at every step
// (tests/runtime: within 1e-5 relative, fp32). It refuses what the
// distributed runtime refuses (plan/runtime_support.h CheckPlanRuns). It
// reads samples through the plan's SampleSource (runtime/plan_data.h), and
// computes on the device and in the precision a ComputePlacement says
// (default: the CPU in fp32; runtime/device_choice.h).
//
// May call: runtime/section_runner, runtime/graph_forward,
// runtime/checkpointing, runtime/plan_data, datalayer, datasets, plan, base,
// libtorch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"
#include "runtime/device_choice.h"

namespace maestro::runtime {

struct StepLoss {
  int64_t step = 0;
  double loss = 0.0;  // mean per-sample loss of the step's sink sections
  int64_t samples = 0;
};

struct ReferenceOptions {
  std::string run_dir;       // its own index and checkpoints
  int64_t steps = -1;        // -1: plan.data.steps; 0 on a fresh run: the initial weights only
  std::string metrics_path;  // "" = none; else one JSON line per step
  ComputePlacement compute;  // every section on this device, in this precision
};

// Trains the plan in one process (see above). Returns each step's loss.
StatusOr<std::vector<StepLoss>> RunReference(const plan::Plan& plan, const ReferenceOptions& options);

}  // namespace maestro::runtime
