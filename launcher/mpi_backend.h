// SPDX-License-Identifier: Apache-2.0
// The MPI backend (Open MPI): CPU buffers, every dtype (bf16/f16 reductions
// through user-defined MPI ops), non-blocking MPI calls completed by polling
// MPI_Testall against a deadline (comm.h: Work::WaitFor).
//
// MpiSession owns MPI_Init_thread .. MPI_Finalize and the "health"
// communicator: when a wait times out, the waiting rank asks the other ranks
// of its group what they are doing; ranks that wait in any operation answer
// from their polling loop, so the message names the rank that is missing
// (dead, stopped, or busy outside communication) and what the others wait in.
//
// Group creation: SplitWorld() is collective over all ranks (MPI_Comm_split);
// CreateGroup() only over the group's ranks (MPI_Comm_create_group), so ranks
// must create the groups they share in one global order.
//
// May call: MPI, base. Thread safety: MPI_THREAD_FUNNELED; one thread uses
// the session and its backends. REQUIRES: backends are destroyed before the
// session.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "launcher/comm.h"

namespace maestro::launcher {

class MpiSession {
 public:
  // MPI_Init_thread (FUNNELED), then `barrier` (when given) before the first
  // MPI message. Call after PmixStore::Connect().
  // Why the barrier: under Slurm's direct launch (srun --mpi=pmix), Open MPI
  // 4.1 may return from MPI_Init on one rank while another is still inside it,
  // before its PML has registered its receive callbacks (the modex fence runs
  // in the background); a message that reaches that rank over the TCP BTL
  // then calls a null callback and the rank dies of SIGSEGV in MPI_Init
  // (seen in ~1 of 10 starts of 8 ranks on the local cluster; core dump:
  // btl_tcp's receive handler calling the active-message callback of tag
  // 0x41, ob1's MATCH, which was still null). A PMIx fence after every rank
  // returned from MPI_Init closes that window.
  static StatusOr<std::unique_ptr<MpiSession>> Init(const std::function<Status()>& barrier = nullptr);
  ~MpiSession();  // MPI_Finalize
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const;
  int size() const;

  // All ranks; `description` names it in messages ("world").
  StatusOr<std::unique_ptr<Backend>> World(Millis timeout);
  // Collective over ALL ranks: those passing the same `color` form a group,
  // ordered as info.ranks (info.my_index must be this rank's index there).
  StatusOr<std::unique_ptr<Backend>> SplitWorld(int color, GroupInfo info, Millis timeout);
  // Asks world `ranks` what they wait in (over the health channel; a rank
  // answers once it waited 20 ms in any operation) for up to `grace`.
  // "; rank 3 is waiting in all_reduce #1 of 4 MiB on ..." per answer, and
  // "missing rank(s) ..." for those that did not answer. Used by timeouts.
  std::string Survey(const std::vector<int>& ranks, Millis grace);
  // Collective over info.ranks only (MPI_Comm_create_group with `tag`).
  StatusOr<std::unique_ptr<Backend>> CreateGroup(GroupInfo info, int tag, Millis timeout);

  struct Impl;

 private:
  MpiSession();
  std::unique_ptr<Impl> impl_;
};

// A raw MPI_Send/MPI_Recv loop between world ranks 0 and 1 of MPI_COMM_WORLD,
// the baseline of `maestro-bench comm`. Returns seconds for `iterations`
// one-way messages of `bytes` plus a 1-byte acknowledgement.
StatusOr<double> RawMpiPingSeconds(size_t bytes, int iterations);

}  // namespace maestro::launcher
