// SPDX-License-Identifier: Apache-2.0
// Failure reporting for communication: which operation this process is
// waiting in (the in-flight record), what it prints when the launcher stops
// it, and how it ends the whole job when a peer failed.
//
// Under mpirun, a rank that dies makes mpirun send SIGTERM to every other
// rank (then SIGKILL) and print the dead rank's number. The reporter that
// InstallTerminationReporter() sets up prints, from the signal handler, the
// operation, the group and how long this rank had waited, so the job's
// output names the dead rank (mpirun), the group and the operation (ranks).
// A rank that hangs, or dies under a launcher that does not stop the others,
// is caught by Work::WaitFor's deadline instead (comm.h).
//
// May call: base, MPI. Thread safety: the in-flight record is one atomic
// pointer per process, set by the thread that waits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "launcher/comm.h"

namespace maestro::launcher {

// What a waiting thread is blocked in. Lives as long as the wait.
struct InFlightOp {
  const char* op = "";  // "all_reduce", "send", ...
  size_t bytes = 0;
  int peer = -1;  // global rank of the peer (send/recv), or -1
  const GroupInfo* group = nullptr;
  uint64_t seq = 0;      // 1-based count of operations on this group
  int64_t start_ns = 0;  // CLOCK_MONOTONIC when the wait began
};

// "all_reduce #3 of 4 MiB on dp group of section 'llm' (ranks 2,4)".
std::string DescribeOp(const InFlightOp& op);
int64_t MonotonicNanos();

// Marks `op` as what this process waits in, until destroyed.
class InFlightScope {
 public:
  explicit InFlightScope(const InFlightOp* op);
  ~InFlightScope();
  InFlightScope(const InFlightScope&) = delete;
  InFlightScope& operator=(const InFlightScope&) = delete;

 private:
  const InFlightOp* previous_;
};
const InFlightOp* CurrentInFlightOp();

// SIGTERM / SIGINT / SIGHUP: print "maestro rank R: stopped by signal S while
// waiting T s in <op>" (or "... outside communication"), then die of the
// signal as before. While a rank trains, the runtime's PreemptionSignal
// (datalayer/preemption.h) takes SIGTERM and SIGINT over: they then ask for a
// checkpoint at the next step boundary instead (a second SIGINT still ends
// the rank at once); this reporter covers the start-up and what follows the
// training loop.
void InstallTerminationReporter(int world_rank);

// Prints `why` for rank `world_rank` to stderr and ends every rank of the job
// (MPI_Abort) with `exit_code` (kExitPeerFailure for a peer that failed).
// The one place where the launcher ends the process; called by mains only.
[[noreturn]] void AbortJob(int world_rank, const Status& why, int exit_code);

}  // namespace maestro::launcher
