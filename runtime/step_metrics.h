// SPDX-License-Identifier: Apache-2.0
// What a step reports: every rank's loss, answers, busy and framework time
// summed over the world (with the stop flag of a preemption request), and
// rank 0's record of it — a line of <run_dir>/metrics.jsonl and the progress
// line on stderr (a bar on a terminal).
// May call: runtime/collectives, launcher, plan, base. Torch-free.
// Thread safety: one thread per process.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "launcher/communicators.h"
#include "plan/plan.h"

namespace maestro::runtime {

// One rank's share of a step.
struct RankStepStats {
  bool counts_loss = true;  // false on TP ranks other than 0: every TP rank computes the same loss
  double loss_sum = 0.0;
  int64_t loss_samples = 0, answers = 0, answers_right = 0;
  bool stop_requested = false;
  double busy_seconds = 0.0;       // compute
  double framework_seconds = 0.0;  // neither compute nor blocked on a peer
};

// The world's sum of a step.
struct StepTotals {
  double loss_sum = 0.0, loss_samples = 0.0, answers = 0.0, answers_right = 0.0;
  bool stop = false;              // some rank was asked to stop
  std::vector<double> busy;       // per section, summed over its ranks
  std::vector<double> framework;  // per section, summed over its ranks
  double MeanLoss() const { return loss_samples > 0 ? loss_sum / loss_samples : 0.0; }
};

// Collective over `world`: the sum of every rank's `mine` (this rank runs
// section `section` of `sections`).
StatusOr<StepTotals> SumStepStats(launcher::Backend& world, size_t sections, int section, const RankStepStats& mine);

// Rank 0's metrics.jsonl and progress line.
class StepReporter {
 public:
  StepReporter(const plan::Plan& plan, bool progress, int64_t total_steps)
      : plan_(plan), progress_(progress), total_steps_(total_steps) {}
  // Appends to <run_dir>/metrics.jsonl from now on.
  void Open(const std::string& run_dir);
  // Step `step` of epoch `epoch`: `samples` samples in `step_seconds`, mean loss `loss`.
  void Report(int64_t step, int64_t epoch, size_t samples, double loss, const StepTotals& totals, double step_seconds);
  // A line {"eval": name, "value": value} (no flush).
  void ReportEval(const std::string& name, double value);
  // From now on every step line carries "skipped_samples": n, the samples
  // the data source left out (a manifest with on_bad_sample = "skip").
  void SetSkippedSamples(int64_t n) { skipped_samples_ = n; }

 private:
  const plan::Plan& plan_;
  bool progress_;
  int64_t total_steps_;
  std::ofstream metrics_;
  int64_t skipped_samples_ = -1;  // < 0: not reported
};

}  // namespace maestro::runtime
