// SPDX-License-Identifier: Apache-2.0
// WorkerContext: the start-up of one maestro-worker rank, in order:
//   1. PMIx_Init (PmixStore::Connect): job size and rank; outside a PMIx
//      launcher it stops with a message saying how to start the worker;
//   2. MPI_Init_thread (MpiSession) -- both coexist in one process under
//      mpirun and under srun --mpi=pmix;
//   3. the launcher's environment checked against the plan and this rank
//      placed (launch_env.h: het component, section, TP/CP/DP/PP, GPU);
//   4. this rank's facts published in the store ("maestro/rank": RankPlace);
//   5. every group and link built (Communicators).
// Owns them and tears them down in reverse order. In a Slurm hetjob step of
// two or more components, component k's ranks then wait k x 0.5 s before
// they exit: Slurm 22.05's srun can hang forever when the tasks of two
// components end at the same moment (docs/local-cluster.md).
//
// May call: everything in launcher/. Thread safety: one thread.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "launcher/communicators.h"
#include "launcher/launch_env.h"
#include "launcher/mpi_backend.h"
#include "launcher/pmix_store.h"
#include "plan/plan.h"

namespace maestro::launcher {

class WorkerContext {
 public:
  // Collective over the job. On error, `rank_for_errors` (when >= 0) tells
  // the caller which rank failed, for AbortJob.
  static StatusOr<std::unique_ptr<WorkerContext>> Start(const plan::Plan& plan, const CommOptions& options,
                                                        int* rank_for_errors);
  ~WorkerContext();

  const RankPlace& place() const { return place_; }
  const CommOptions& options() const { return options_; }
  PmixStore& store() { return *store_; }
  MpiSession& mpi() { return *mpi_; }
  Communicators& comms() { return *comms_; }

 private:
  WorkerContext() = default;
  Status Connect(const plan::Plan& plan);  // steps 3-5
  std::unique_ptr<PmixStore> store_;
  std::unique_ptr<MpiSession> mpi_;
  RankPlace place_;
  int slurm_het_size_ = 0;  // > 1: stagger the exit of the components
  CommOptions options_;
  std::unique_ptr<Communicators> comms_;
};

}  // namespace maestro::launcher
