// SPDX-License-Identifier: Apache-2.0
// The section executor: what maestro-worker runs on every rank of a plan.
//
// Owns the training loop of one rank (RankLoop in executor.cc): each step's
// global batch (step_batch.h: rank 0 reads, everyone gets it), the schedule
// (every rank builds the same one from the batch, the plan and the step:
// scheduler/scheduler.h, costs from cost_model.h), and the dispatch of this
// rank's ops in order: forward = receive upstream rows, compute, send rows
// down; backward = receive gradients from downstream, backprop, send input
// gradients up (edge_exchange.h: the wire protocol); optimizer = DP
// all-reduce (parallel/data_parallel.h), clip, AdamW. The rooms around it:
// the spool of a forward-only section's outputs (output_spool.h), the resume
// handoff and checkpoints (checkpointing.h; rank 0 writes them through
// datalayer::TrainingRun), what a step reports (step_metrics.h: metrics.jsonl
// and the progress line; at the end each rank's baseline and peak memory), the Perfetto trace (trace.h) and the
// measured vs predicted timelines (timeline.h). Samples come through the plan's datasets::SampleSource (plan_data.h).
// Each rank computes on the device device_choice.h picks (its section's GPU
// or the CPU; fp32 or bf16 mixed precision); edge_exchange.h copies what
// crosses sections between that device and the wire (device_staging.h).
// The loop stops on a preemption signal (exit 85 after a checkpoint).
//
// May call: the runtime files above, runtime/section_runner, runtime/pipeline, runtime/fused_pipeline,
// runtime/parallel, runtime/reference (evaluation), scheduler, datalayer, launcher, datasets, plan, base,
// libtorch.
// Thread safety: one thread per process.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "launcher/communicators.h"
#include "launcher/launch_env.h"
#include "plan/plan.h"
#include "runtime/device_choice.h"

namespace maestro::runtime {

struct TrainOptions {
  std::string run_dir;            // index, spool, checkpoints, metrics.jsonl, trace.json
  int64_t steps = -1;             // stop after this global step count (-1: plan.data.steps; 0 on a
                                  // fresh run: write the initial weights, train nothing)
  int64_t stop_after_steps = -1;  // test hook: behave as if preempted after this many steps of this start
  bool progress = true;           // rank 0 prints a line (or a bar on a terminal) per step
  bool evaluate = true;           // at the end: caption accuracy (captions), held-out loss (test_corpus)
  int64_t eval_samples = 0;       // 0: the whole test split
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

// Intra-op threads of one rank: $MAESTRO_THREADS_PER_RANK, else the cores
// divided among the ranks on this node (mpirun and srun both say how many).
int ThreadsPerRank();

// Runs the plan's training loop on this rank. Collective: every rank of the
// plan calls it. Returns kAborted("preempted") after a checkpoint when a
// preemption was requested, so the caller exits with kExitRequeue.
StatusOr<TrainSummary> RunTraining(const plan::Plan& plan, const launcher::RankPlace& place,
                                   launcher::Communicators& comms, const TrainOptions& options);

}  // namespace maestro::runtime
