// SPDX-License-Identifier: Apache-2.0
// A distributed run's checkpoints: rank 0 owns the run directory
// (datalayer::TrainingRun); on a resume it sends every training rank its
// state, and at a checkpoint the DP-0 replica of each training section sends
// rank 0 its full model (gathered over TP) and one optimizer shard per TP
// rank. Checkpoint keys: "<section>" holds the model and TP rank 0's
// optimizer state, "<section>#tp<t>" TP rank t's optimizer state.
// Runtime-internal: SectionRunner is a torch class (the header itself is
// torch-free). May call: runtime/section_runner, runtime/collectives,
// datalayer, launcher, plan, base.
// Thread safety: one thread per process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "datalayer/training_run.h"
#include "launcher/communicators.h"
#include "launcher/launch_env.h"
#include "plan/plan.h"

namespace maestro::runtime {

class SectionRunner;

// Checkpoint key of TP rank t's optimizer state of section `name`.
std::string OptimizerKey(const std::string& name, int t);

// Collective over `world`. Rank 0 passes how opening the run went
// (`rank0_status`) and the state it resumed from (`resumed`, nullopt for a
// fresh run); other ranks pass Ok and nullopt. Every rank of a training
// section loads the full model and its own optimizer shard into `runner`.
// An error of rank 0 is every rank's error.
Status ShareResumedState(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Backend& world,
                         const Status& rank0_status, const std::optional<datalayer::CheckpointData>& resumed,
                         SectionRunner& runner);

// Collective over `world`: gathers the state of every training section after
// step `step` on rank 0, which writes it (`run`: non-null on rank 0 only);
// returns once the checkpoint is durable on every rank (a barrier).
Status WriteCheckpoint(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Backend& world,
                       SectionRunner& runner, datalayer::TrainingRun* run, int64_t step);

}  // namespace maestro::runtime
