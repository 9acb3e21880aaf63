// SPDX-License-Identifier: Apache-2.0
// Where this rank runs: the launcher's environment (Slurm hetjob step or
// Open MPI's mpirun) read into LaunchEnv, checked against the plan, and
// turned into RankPlace (het component, section, TP/CP/DP/PP coordinates,
// local GPU). Pure functions over an environment lookup: unit-testable
// without a launcher.
//
// Facts (ARCHITECTURE.md, Slurm 22.05): in `srun --mpi=pmix --het-group=0-K`
// one PMIx namespace spans all components, PMIx rank == SLURM_PROCID,
// component 0's tasks first; SLURM_HET_JOB_OFFSET is NOT set in tasks, so the
// component is derived from SLURM_PROCID and the running sum of
// SLURM_NTASKS_HET_GROUP_<n> (n < SLURM_HET_SIZE). GPUs: CUDA_VISIBLE_DEVICES,
// else SLURM_STEP_GPUS (never SLURM_JOB_GPUS, inherited from component 0).
//
// May call: base, plan. Thread safety: pure functions.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::launcher {

enum class LauncherKind { kMpirun, kSlurm, kOther };
const char* LauncherKindName(LauncherKind kind);

struct LaunchEnv {
  LauncherKind launcher = LauncherKind::kOther;
  int het_size = 0;                       // SLURM_HET_SIZE; 0 outside a hetjob step
  std::vector<int> tasks_per_component;   // SLURM_NTASKS_HET_GROUP_<n>, n < het_size
  int procid = -1;                        // SLURM_PROCID / OMPI_COMM_WORLD_RANK
  int local_rank = 0;                     // SLURM_LOCALID / OMPI_COMM_WORLD_LOCAL_RANK
  bool gpu_list_set = false;              // CUDA_VISIBLE_DEVICES or SLURM_STEP_GPUS present
  std::vector<std::string> visible_gpus;  // its entries
  std::string gpu_list_source;            // which variable they came from
  std::string host;                       // SLURMD_NODENAME, else the hostname
};

// Returns the value of an environment variable, or nullptr.
using EnvLookup = std::function<const char*(const char*)>;
EnvLookup ProcessEnv();

// Reads the launcher's variables; malformed numbers are kInvalidArgument.
StatusOr<LaunchEnv> ReadLaunchEnv(const EnvLookup& env);

struct RankPlace {
  int world_rank = -1, world_size = 0;
  int het_component = -1;  // the section's (plan.h: one or more sections per component)
  std::string section_name;
  plan::RankCoords coords;  // section, local_rank, tp, cp, dp, pp
  int local_rank = 0;       // among the ranks on this node
  int local_gpu = -1;       // CUDA device index to use; -1 = CPU only
  std::string host;
  // "rank 3 of 6: section 'llm' (het component 1), local rank 1, tp 1 cp 0 dp 0 pp 0, cpu on node2"
  std::string ToString() const;
};

// Checks the live allocation against the plan (world size, tasks per het
// component, GPUs visible for the section) and places `world_rank`.
// Every mismatch is kFailedPrecondition naming the section, both numbers and
// the fix.
StatusOr<RankPlace> PlaceRank(const plan::Plan& plan, const LaunchEnv& env, int world_rank, int world_size);

}  // namespace maestro::launcher
