// SPDX-License-Identifier: Apache-2.0
// What a step reports: every rank's loss, answers, busy and framework time
// and its section's work (runtime/section_work.h: tokens, patches, frames or
// rows, and their model FLOPs, from the real, unpadded counts) summed over
// the world (with the stop flag of a preemption request), and rank 0's
// record of it — a line of <run_dir>/metrics.jsonl and the progress line on
// stderr (a bar on a terminal). At the end of a run, every rank's
// resident memory (RankMemoryTracker: its baseline before the model, its
// peak over the training steps) in one "memory" line of metrics.jsonl.
// May call: runtime/collectives, launcher, plan, base (process_memory). Torch-free.
// Thread safety: one thread per process.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "base/status.h"
#include "launcher/communicators.h"
#include "plan/plan.h"
#include "runtime/section_work.h"

namespace maestro::runtime {

// One rank's share of a step.
struct RankStepStats {
  bool counts_loss = true;  // false on TP ranks other than 0: every TP rank computes the same loss
  double loss_sum = 0.0;
  int64_t loss_samples = 0, answers = 0, answers_right = 0;
  bool stop_requested = false;
  bool checkpoint_due = false;      // rank 0: checkpoint_minutes have passed (one clock decides for all)
  bool checkpoint_writing = false;  // this rank's background checkpoint write has not finished
  double busy_seconds = 0.0;        // compute
  double framework_seconds = 0.0;   // neither compute nor blocked on a peer
  // Per work slot of this rank's section (WorkSlotsOf: 1, or a fused
  // section's components): the work this rank counts (RankLoop::CountWork:
  // TP rank 0, CP rank 0, the first pipeline stage; empty: none).
  std::vector<SectionWork> work;
};

// The world's sum of a step.
struct StepTotals {
  double loss_sum = 0.0, loss_samples = 0.0, answers = 0.0, answers_right = 0.0;
  bool stop = false;                // some rank was asked to stop
  bool checkpoint_due = false;      // some rank (rank 0) found a checkpoint due by time
  bool checkpoint_writing = false;  // some rank's background checkpoint write has not finished
  std::vector<double> busy;         // per section, summed over its ranks
  std::vector<double> framework;    // per section, summed over its ranks
  std::vector<SectionWork> work;    // per work slot (WorkSlotNames), summed over the ranks that count
  double MeanLoss() const { return loss_samples > 0 ? loss_sum / loss_samples : 0.0; }
};

// Collective over `world`: the sum of every rank's `mine` (this rank runs
// section `section` of `plan`).
StatusOr<StepTotals> SumStepStats(launcher::Backend& world, const plan::Plan& plan, int section,
                                  const RankStepStats& mine);

// One rank's resident memory over a run (bytes; 0 where unreadable).
struct RankMemory {
  int section = -1;
  double baseline_rss = 0;      // once the process is up and its data open, before the model is built
  double peak_rss = 0;          // high-water mark over the training steps, checkpoint writes left out
  double process_peak_rss = 0;  // high-water mark of everything, checkpoint serialization included
};

// Follows this rank's resident set (base/process_memory.h). The peak of the
// training steps leaves out checkpoints (their serialized model and
// optimizer bytes are host buffers, not what a step holds): after each
// checkpoint the kernel's high-water mark is folded into the process peak and
// reset.
class RankMemoryTracker {
 public:
  explicit RankMemoryTracker(int section) { memory_.section = section; }
  void MarkBaseline();        // before the section's model is built
  void MarkStepEnd();         // after a step's compute, before its checkpoint
  void MarkCheckpointEnd();   // after a checkpoint
  RankMemory Result() const;  // what the marks saw (and the process peak now)

 private:
  RankMemory memory_;
};

// Collective over `world`: every rank's memory, indexed by world rank.
StatusOr<std::vector<RankMemory>> GatherRankMemory(launcher::Backend& world, int world_size, int world_rank,
                                                   const RankMemory& mine);

// Rank 0's metrics.jsonl and progress line.
class StepReporter {
 public:
  StepReporter(const plan::Plan& plan, bool progress, int64_t total_steps)
      : plan_(plan), progress_(progress), total_steps_(total_steps) {}
  // Appends to <run_dir>/metrics.jsonl from now on.
  void Open(const std::string& run_dir);
  // Step `step` of epoch `epoch`: `samples` samples in `step_seconds`, mean
  // loss `loss`. The line: {"step", "epoch", "loss", "samples",
  // "step_seconds", "samples_per_s", "busy": {section: share of its ranks'
  // time computing}, "overhead", "sections": {name: {"tokens",
  // "tokens_per_s", "model_flops_per_s"}}, ["answer_accuracy"],
  // ["skipped_samples"]}. "sections" is keyed by work slot (WorkSlotNames:
  // the spec's sections, a fused section's components by their names):
  // "tokens" the real, unpadded work items of the step's samples it
  // computed (runtime/section_work.h: a decoder's non-padding tokens, a
  // ViT's patches (+ class token) per image present, an audio encoder's
  // output frames per clip present, a projector's rows of the items
  // present), each sample counted once (TP, CP and PP peers do not add to
  // it; a forward-only section's spool hits are not computed, so not
  // counted); "model_flops_per_s" the model FLOPs of that work
  // (plan/model_flops.h, per real sequence; x3 trained, x1 forward-only)
  // per step second.
  void Report(int64_t step, int64_t epoch, size_t samples, double loss, const StepTotals& totals, double step_seconds);
  // A line {"eval": name, "value": value} (no flush).
  void ReportEval(const std::string& name, double value);
  // A line {"offline_pass_s": seconds, "rows": rows}: the offline spool pass
  // before the first step (plan.offline_spool_pass), its rows on rank 0's
  // replica.
  void ReportOfflinePass(double seconds, int64_t rows);
  // A line {"checkpoint": step, "committed_after_step": t, "async": a,
  // "stall_s": s, "write_s": w, "snapshot_s": c}: the checkpoint of step
  // `step` committed at the end of step t (t = step when written at once;
  // when async, rank 0's commit thread starts then and is waited for before
  // the next checkpoint); s: the seconds rank 0's step loop spent on it (the
  // snapshot, the gather of the ranks' records and, when a previous commit
  // was still running, the wait for it, when async; the whole save
  // otherwise); w: rank 0's seconds writing its file; c: of s, the
  // snapshot's (0 when written at once).
  void ReportCheckpoint(int64_t step, int64_t committed_after_step, bool async, double stall_seconds,
                        double write_seconds, double snapshot_seconds = 0);
  // A line {"memory": [{"rank", "section", "baseline_rss_bytes",
  // "peak_rss_bytes", "process_peak_rss_bytes"}, ...]}, one entry per world rank.
  void ReportMemory(const std::vector<RankMemory>& ranks);
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
