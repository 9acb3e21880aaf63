// SPDX-License-Identifier: Apache-2.0
// The global batch of a step as every rank sees it: global rank 0 reads it
// from the SampleIndex and broadcasts it; every rank decodes the same sample
// ids and token counts (what the scheduler needs, no payloads).
//
// Encoding (int64): [step, epoch, n, then n x (id, modality mask, text tokens,
// tokens of each modality...)]; [-1]: no more steps; [-2]: rank 0 failed.
// With a lookahead (run-ahead, runtime/run_ahead.h) the batches of the next
// steps follow, each as [length, its encoding]: they are read from the
// SampleIndex's deterministic schedule (SampleIndex::BatchForStep) without
// advancing the run, so nothing is consumed before its step is done.
// May call: runtime/collectives, datalayer, scheduler, launcher, base. Torch-free.
// Thread safety: one thread per process.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "datalayer/training_run.h"
#include "launcher/communicators.h"
#include "scheduler/problem.h"
#include "scheduler/scheduler.h"

namespace maestro::runtime {

struct StepBatch {
  int64_t step = -1;  // -1: no more steps
  int64_t epoch = 0;
  std::vector<scheduler::Sample> samples;
  std::vector<int64_t> ids;
};

// The batch and its samples' token counts per modality (`modalities`: the
// plan's modality names, scheduler::ModalityNamesOf), encoded as above.
std::vector<int64_t> EncodeBatch(const datalayer::GlobalBatch& batch, const std::vector<datalayer::SampleInfo>& infos,
                                 const std::vector<std::string>& modalities);
// The inverse of EncodeBatch (`modalities`: how many modality names).
StepBatch DecodeBatch(const std::vector<int64_t>& v, size_t modalities);

// The schedule of `batch` every rank builds alike (the plan's policy and
// seed, the batch's step; `costs` the run's, RuntimeCostModel), and its
// problem in *problem.
StatusOr<scheduler::Schedule> ScheduleOfBatch(const plan::Plan& plan,
                                              std::shared_ptr<const scheduler::SectionCostModel> costs,
                                              const StepBatch& batch, scheduler::Problem* problem);

// Collective over `world`: rank 0 (`run` non-null there, null elsewhere)
// reads the next batch unless run->next_step() >= total_steps, and every rank
// gets it (step -1 when the run is done). A rank other than 0 counts its wait
// in *blocked_seconds (rank 0's reading is framework time). An error of rank
// 0 is every rank's error.
// `lookahead` > 0 (the same on every rank): *ahead also gets the batches of
// the up to `lookahead` steps after it (fewer near total_steps), in order.
StatusOr<StepBatch> ShareNextBatch(launcher::Backend& world, datalayer::TrainingRun* run, int64_t total_steps,
                                   const std::vector<std::string>& modalities, double* blocked_seconds,
                                   int lookahead = 0, std::vector<StepBatch>* ahead = nullptr);

}  // namespace maestro::runtime
