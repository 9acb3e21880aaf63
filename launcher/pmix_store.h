// SPDX-License-Identifier: Apache-2.0
// PmixStore: this process's PMIx client (PMIx_Init .. PMIx_Finalize) and the
// key-value store built on it, the rendezvous of everything else (NCCL
// unique ids, per-rank facts). Works under srun --mpi=pmix (one namespace
// spans all het components) and under Open MPI's mpirun (numeric namespace).
//
// Semantics (measured with OpenPMIx 4.2 under mpirun and Slurm 22.05):
//   Put(key, value) + Commit()  publishes `key` for this rank;
//   Get(rank, key, timeout)      waits until `rank` has committed `key`
//                                (direct modex), or kTimeout;
//   Fence(timeout)               all ranks of the job; collects the data.
// Keys are write-once per rank: publish a new key instead of overwriting.
//
// May call: PMIx. Thread safety: one thread at a time.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "launcher/comm.h"

namespace maestro::launcher {

class PmixStore {
 public:
  // PMIx_Init. Started outside a PMIx launcher it returns kUnavailable with a
  // message that says how to start the worker.
  static StatusOr<std::unique_ptr<PmixStore>> Connect();
  ~PmixStore();  // PMIx_Finalize
  PmixStore(const PmixStore&) = delete;
  PmixStore& operator=(const PmixStore&) = delete;

  int rank() const { return rank_; }
  int job_size() const { return job_size_; }
  const std::string& nspace() const { return nspace_; }

  Status Put(const std::string& key, const std::string& value);
  Status Commit();
  Status Fence(Millis timeout);
  StatusOr<std::string> Get(int rank, const std::string& key, Millis timeout);

 private:
  PmixStore() = default;
  std::string nspace_;
  int rank_ = -1;
  int job_size_ = 0;
  bool initialized_ = false;
};

}  // namespace maestro::launcher
