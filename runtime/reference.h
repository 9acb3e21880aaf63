// SPDX-License-Identifier: Apache-2.0
// The monolithic reference and what runs every section in one process.
//
//   RunReference: one process, the same models (same seeds), the same global
//   batches (the same SampleIndex order), every section one after another
//   over the whole batch, autograd across section boundaries, the same loss
//   scaling and optimizer. A sectioned, wavefront-scheduled run must give
//   the same loss at every step (tests/runtime: within 1e-5 relative, fp32).
//   EvaluateCaptions: caption accuracy of a trained VLM on the test split.
// Both read samples through the plan's SampleSource (runtime/plan_data.h).
//
// May call: runtime/section_runner, runtime/plan_data, datalayer, datasets,
// plan, base, libtorch.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::runtime {

// Sections in an order where every edge goes forward (plan.edges are acyclic).
std::vector<int> TopologicalSections(const plan::Plan& plan);

struct StepLoss {
  int64_t step = 0;
  double loss = 0.0;  // mean per-sample loss of the step's sink sections
  int64_t samples = 0;
};

struct ReferenceOptions {
  std::string run_dir;       // its own index and checkpoints
  int64_t steps = -1;        // -1: plan.data.steps; 0 on a fresh run: the initial weights only
  std::string metrics_path;  // "" = none; else one JSON line per step
};

// Trains the plan in one process (see above). Returns each step's loss.
StatusOr<std::vector<StepLoss>> RunReference(const plan::Plan& plan, const ReferenceOptions& options);

// Caption accuracy on the test split (first `max_samples`, 0 = all) of the
// plan's sections with the given model bytes (section name -> bytes; a
// section without bytes keeps its initial weights).
StatusOr<double> EvaluateCaptions(const plan::Plan& plan, const std::map<std::string, std::string>& models,
                                  int64_t max_samples = 0);

// EvaluateCaptions with the models of the last committed checkpoint of the
// run directory `run_dir`.
StatusOr<double> EvaluateRunCaptions(const plan::Plan& plan, const std::string& run_dir, int64_t max_samples = 0);

// True when a sample (with or without an image) activates section `s`.
bool SectionActivates(const plan::SectionPlan& s, bool has_image);

}  // namespace maestro::runtime
