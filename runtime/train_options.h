// SPDX-License-Identifier: Apache-2.0
// What a caller asks of a rank's training loop and what one start of it
// returns (runtime/executor.h RunTraining; the loop's private class
// runtime/rank_loop.h reads them too).
// Torch-free. May call: runtime/device_choice (the device request), base.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/device_choice.h"

namespace maestro::runtime {

struct TrainOptions {
  std::string run_dir;            // index, spool, checkpoints, metrics.jsonl, trace.json
  int64_t steps = -1;             // stop after this global step count (-1: plan.data.steps; 0 on a
                                  // fresh run: write the initial weights, train nothing)
  int64_t stop_after_steps = -1;  // test hook: behave as if preempted after this many steps of this start
  bool progress = true;           // rank 0 prints a line (or a bar on a terminal) per step
  bool evaluate = true;           // at the end: caption accuracy (captions), held-out loss (runtime/evaluation.h
                                  // EvaluatesHeldOut)
  int64_t eval_samples = 0;       // 0: the whole test split
  // false (--no-spool-reuse; or the plan's spool_reuse false, the compiler's
  // choice over the job): no frozen section's rows are read back from an
  // earlier epoch or start: a sectioned one computes every epoch's rows
  // again (its spool serves only the rows run ahead in this epoch), a fused
  // plan's frozen components keep no spool at all: the fused plan as it ran
  // before spools ("fused, every epoch", the baseline maestro-bench kd and
  // the KD demo measure).
  bool reuse_spools = true;
  // Where each rank computes and in which precision (runtime/device_choice.h:
  // auto = the plan's GPUs when this libtorch sees them, bf16 there, else
  // the CPU in fp32).
  DeviceRequest device = DeviceRequest::kAuto;
  PrecisionRequest precision = PrecisionRequest::kAuto;
};

// The result of one start of the loop (rank 0's view; other ranks see the
// same step numbers).
struct TrainSummary {
  int64_t first_step = 0;  // the step this start resumed at
  int64_t steps_done = 0;  // steps run by this start
  bool preempted = false;  // stopped on a signal (or stop_after_steps) after a checkpoint
  double final_loss = 0.0;
  double caption_accuracy = -1.0;  // -1: not evaluated
  double heldout_loss = -1.0;      // -1: not evaluated; else the sink decoder's loss on the test corpus (eval.json)
};

}  // namespace maestro::runtime
