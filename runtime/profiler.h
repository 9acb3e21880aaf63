// SPDX-License-Identifier: Apache-2.0
// Section profiles: each section's measured time per micro-batch against its
// size (forward, backward, and the optimizer step), written as the profile
// file the compiler reads with --profiles (plan/profile.h), so the cost model
// and the step simulator predict with this machine's numbers
// (`maestro profile`).
//
// Two ways to measure:
//  - ProfileRanks: collective under the run's launcher (mpirun or srun) with
//    the run's plan. Every rank measures its own section, at its TP degree
//    with its TP group, at the same time as every other rank, so the numbers
//    include the contention the run will see (ranks of one machine share its
//    cores and memory bandwidth; an MPI rank that waits keeps polling).
//  - ProfileSections: one process, every section in turn at TP 1 (no MPI).
// Inputs that arrive from upstream sections are random rows of the right
// shape; the samples are real ones of the plan's dataset that activate the
// section.
// May call: runtime/section_runner, runtime/reference, runtime/collectives,
// launcher, datasets, plan, base, libtorch.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "launcher/communicators.h"
#include "launcher/launch_env.h"
#include "plan/plan.h"
#include "plan/profile.h"

namespace maestro::runtime {

// One measured point (plan/profile.h): seconds and forward_seconds are
// medians of the timed runs; optimizer_seconds is clip + AdamW of the
// replica's shard.
using ProfilePoint = plan::ProfilePoint;

struct ProfileOptions {
  std::vector<int> micro_batches{1, 2, 4, 8, 16, 32, 64};  // each capped at the global batch
  int repeats = 5;                                         // timed runs per size, after 2 warm-ups
  int threads = 1;  // intra-op threads (ProfileSections; ProfileRanks uses the run's share)
};

StatusOr<std::vector<ProfilePoint>> ProfileSections(const plan::Plan& plan, const ProfileOptions& options);

// Collective over every rank of `plan`. Rank 0 returns every section's points
// (the median over a section's replicas); the others return an empty list.
StatusOr<std::vector<ProfilePoint>> ProfileRanks(const plan::Plan& plan, const launcher::RankPlace& place,
                                                 launcher::Communicators& comms, const ProfileOptions& options);

}  // namespace maestro::runtime
