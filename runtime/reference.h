// SPDX-License-Identifier: Apache-2.0
// The monolithic reference and what runs every section in one process.
//
//   RunReference: one process, the same models (same seeds), the same global
//   batches (the same SampleIndex order), every section one after another
//   over the whole batch, autograd across section boundaries, the same loss
//   scaling and optimizer. A sectioned, wavefront-scheduled run must give
//   the same loss at every step (tests/runtime: within 1e-5 relative, fp32).
//   EvaluateCaptions: caption accuracy of a trained VLM on the test split.
//   EvaluateHeldOut: the plain next-token loss of the sink decoder on the
//   test split (a held-out corpus, `[data] test_corpus`), and eval.json.
// All read samples through the plan's SampleSource (runtime/plan_data.h),
// and compute on the device and in the precision a ComputePlacement says
// (default: the CPU in fp32; runtime/device_choice.h).
//
// May call: runtime/section_runner, runtime/models (the held-out model),
// runtime/plan_data, datalayer, datasets, plan, base, libtorch.
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

// Sections in an order where every edge goes forward (plan.edges are acyclic).
std::vector<int> TopologicalSections(const plan::Plan& plan);

// A fused section's components in the order its runner runs them (every
// component edge forward): indices into fused.components. The one order the
// runner, its checkpoints and its resume share.
std::vector<int> FusedComponentOrder(const plan::SectionPlan& fused);

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

// Caption accuracy on the test split (first `max_samples`, 0 = all) of the
// plan's sections with the given model bytes (section name -> bytes; a
// section without bytes keeps its initial weights).
StatusOr<double> EvaluateCaptions(const plan::Plan& plan, const std::map<std::string, std::string>& models,
                                  int64_t max_samples = 0, const ComputePlacement& compute = {});

// EvaluateCaptions with the models of the last committed checkpoint of the
// run directory `run_dir`.
StatusOr<double> EvaluateRunCaptions(const plan::Plan& plan, const std::string& run_dir, int64_t max_samples = 0,
                                     const ComputePlacement& compute = {});

// The held-out loss of a trained model (`[data] test_corpus`).
struct HeldOutLoss {
  int64_t step = -1;        // the checkpoint's last step (-1: weights given directly)
  std::string section;      // the evaluated section
  double loss = 0.0;        // mean over samples of each sample's mean cross-entropy over its target tokens
  int64_t samples = 0;      // test samples evaluated
  std::string test_corpus;  // plan.data.test_corpus
};

// The section whose held-out loss a run reports: the first training decoder
// no edge leaves (the LM of a VLM, the student of a KD), in plan order.
// FailedPrecondition when the plan has none.
StatusOr<int> HeldOutSection(const plan::Plan& plan);

// The plain next-token cross-entropy (no KD term: the teacher is not run) of
// HeldOutSection with the weights `model_bytes` (a SectionRunner::SaveModel
// archive, full weights) on the first `max_samples` (0 = all) samples of the
// test split: log_softmax in fp32, per sample the mean over its targets that
// are not -100, then the mean over samples. FailedPrecondition when the test
// split is empty.
StatusOr<HeldOutLoss> EvaluateHeldOut(const plan::Plan& plan, const std::string& model_bytes, int64_t max_samples = 0,
                                      const ComputePlacement& compute = {});

// EvaluateHeldOut with the section's weights in the last committed checkpoint
// of `run_dir` (result.step = that checkpoint's step), then writes
// <run_dir>/eval.json atomically:
//   {"step": 39, "section": "student", "loss": 2.71, "samples": 30, "test_corpus": "/abs/heldout"}
StatusOr<HeldOutLoss> EvaluateRunHeldOut(const plan::Plan& plan, const std::string& run_dir, int64_t max_samples = 0,
                                         const ComputePlacement& compute = {});

// "held-out loss 2.71234 over 30 samples (step 39)"
std::string HeldOutLine(const HeldOutLoss& result);

// True when a sample (with or without an image) activates section `s`.
bool SectionActivates(const plan::SectionPlan& s, bool has_image);

}  // namespace maestro::runtime
