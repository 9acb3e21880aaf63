// SPDX-License-Identifier: Apache-2.0
// A trained run measured at its end, in one process (every section on this
// rank, runtime/graph_forward.h):
//   EvaluateCaptions: caption accuracy of a trained VLM on the test split.
//   EvaluateHeldOut: the plain next-token loss of the sink decoder on the
//   test split (a held-out corpus, `[data] test_corpus`, or the demo text's
//   held-out chunks), and eval.json.
// Both read samples through the plan's SampleSource (runtime/plan_data.h)
// and compute on the device and in the precision a ComputePlacement says
// (default: the CPU in fp32; runtime/device_choice.h).
//
// May call: runtime/section_runner, runtime/graph_forward, runtime/models
// (the held-out model), runtime/checkpointing (the run's model bytes),
// runtime/plan_data, datalayer, datasets, plan, base, libtorch.
// Thread safety: one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"
#include "plan/plan.h"
#include "runtime/device_choice.h"

namespace maestro::runtime {

// Caption accuracy on the test split (first `max_samples`, 0 = all) of the
// plan's sections with the given model bytes (section name -> bytes; a
// section without bytes keeps its initial weights).
StatusOr<double> EvaluateCaptions(const plan::Plan& plan, const std::map<std::string, std::string>& models,
                                  int64_t max_samples = 0, const ComputePlacement& compute = {});

// EvaluateCaptions with the models of the last committed checkpoint of the
// run directory `run_dir`.
StatusOr<double> EvaluateRunCaptions(const plan::Plan& plan, const std::string& run_dir, int64_t max_samples = 0,
                                     const ComputePlacement& compute = {});

// True when a run of `plan` ends on the held-out loss of its sink decoder
// (HeldOutSection): `[data] test_corpus` is set (a plan without such a
// section then fails at the end, saying so), or the plan reads the built-in
// demo text, whose last chunks are held out (datasets/demo_data.h), and has
// a training decoder that ends the graph.
bool EvaluatesHeldOut(const plan::Plan& plan);

// What the held-out split is, for logs: the test corpus's prefix, or "the
// demo text's held-out chunks".
std::string HeldOutSplitName(const plan::Plan& plan);

// The held-out loss of a trained model (`[data] test_corpus`, or the demo
// text's held-out chunks).
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

}  // namespace maestro::runtime
