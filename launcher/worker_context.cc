// SPDX-License-Identifier: Apache-2.0
#include "launcher/worker_context.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "base/checks.h"
#include "base/log.h"
#include "launcher/failure.h"

namespace maestro::launcher {

StatusOr<std::unique_ptr<WorkerContext>> WorkerContext::Start(const plan::Plan& plan, const CommOptions& options,
                                                              int* rank_for_errors) {
  std::unique_ptr<WorkerContext> w(new WorkerContext());
  w->options_ = options;
  MAESTRO_ASSIGN_OR_RETURN(w->store_, PmixStore::Connect());
  if (rank_for_errors != nullptr) *rank_for_errors = w->store_->rank();
  SetLogRank(w->store_->rank());
  // A PMIx fence between MPI_Init and the first MPI message (mpi_backend.h).
  PmixStore* store = w->store_.get();
  MAESTRO_ASSIGN_OR_RETURN(w->mpi_, MpiSession::Init([store, &options] { return store->Fence(options.timeout); }));
  InstallTerminationReporter(w->store_->rank());
  const Status s = w->Connect(plan);
  if (!s.ok()) {
    // Leave MPI and PMIx initialized: the caller ends the job with AbortJob
    // (MPI_Abort). MPI_Finalize here would leave the other ranks waiting.
    (void)w->comms_.release();
    (void)w->mpi_.release();
    (void)w->store_.release();
    return s;
  }
  return w;
}

Status WorkerContext::Connect(const plan::Plan& plan) {
  if (mpi_->rank() != store_->rank() || mpi_->size() != store_->job_size()) {
    return Status::FailedPrecondition(fmt::format(
        "PMIx says rank {} of {} but MPI says rank {} of {}: start the worker with one launcher (mpirun or srun "
        "--mpi=pmix), not nested",
        store_->rank(), store_->job_size(), mpi_->rank(), mpi_->size()));
  }
  MAESTRO_ASSIGN_OR_RETURN(const LaunchEnv env, ReadLaunchEnv(ProcessEnv()));
  MAESTRO_ASSIGN_OR_RETURN(place_, PlaceRank(plan, env, store_->rank(), store_->job_size()));
  slurm_het_size_ = env.launcher == LauncherKind::kSlurm ? env.het_size : 0;
  MAESTRO_RETURN_IF_ERROR(store_->Put("maestro/rank", place_.ToString()));
  MAESTRO_RETURN_IF_ERROR(store_->Commit());
  Log(LogLevel::kDebug, "{} (launcher {}, PMIx namespace {})", place_.ToString(), LauncherKindName(env.launcher),
      store_->nspace());
  MAESTRO_ASSIGN_OR_RETURN(comms_, Communicators::Create(plan, place_, *mpi_, *store_, options_));
  return Status::Ok();
}

WorkerContext::~WorkerContext() {
  comms_.reset();
  mpi_.reset();
  store_.reset();
  if (slurm_het_size_ > 1 && place_.het_component > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500) * place_.het_component);
  }
}

}  // namespace maestro::launcher
