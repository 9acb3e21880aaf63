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
// RankLoop (runtime/rank_loop.h, private) is written in rooms: executor.cc
// (setup, resume, a step's forward, backward and optimizer ops, checkpoints,
// the run), executor_run_ahead.cc (a frozen section computing the next
// batches' rows), executor_pipeline.cc (the hooks between pipeline stages)
// and executor_expert_lockstep.cc (an EP group's passes run together).
// What the runtime refuses is checked first (plan/runtime_support.h
// CheckPlanRuns).
//
// May call: the runtime files above, runtime/section_runner, runtime/parallel,
// runtime/evaluation, scheduler, datalayer, launcher, datasets, plan, base,
// libtorch.
// Thread safety: one thread per process.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "launcher/communicators.h"
#include "launcher/launch_env.h"
#include "plan/plan.h"
#include "runtime/train_options.h"

namespace maestro::runtime {

// Intra-op threads of one rank: $MAESTRO_THREADS_PER_RANK, else the cores
// divided among the ranks on this node (mpirun and srun both say how many).
int ThreadsPerRank();

// Runs the plan's training loop on this rank. Collective: every rank of the
// plan calls it. Returns kAborted("preempted") after a checkpoint when a
// preemption was requested, so the caller exits with kExitRequeue.
StatusOr<TrainSummary> RunTraining(const plan::Plan& plan, const launcher::RankPlace& place,
                                   launcher::Communicators& comms, const TrainOptions& options);

}  // namespace maestro::runtime
