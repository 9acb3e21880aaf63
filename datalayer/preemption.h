// SPDX-License-Identifier: Apache-2.0
// PreemptionSignal: the worker's side of the preemption protocol
// (docs/datalayer.md "Preemption"). While an instance lives, SIGUSR1, SIGTERM
// and SIGINT only set an atomic flag (async-signal-safe); the training loop
// polls requested() at safe points, finishes or abandons the current step,
// checkpoints, and exits with kExitRequeue (85, base/exit_codes.h), which the
// generated job.sbatch maps to `scontrol requeue` and `maestro run` reports
// as "run the same command again to resume".
//
// SIGINT is an interrupt (Ctrl-C, or srun passing one on): the first is a
// request like SIGUSR1; a second SIGINT ends the process at once, without a
// checkpoint (it prints why and dies of SIGINT). Under `maestro run` the
// workers never see the keyboard's SIGINT: the CLI turns it into SIGUSR1
// (cli/subprocess.h, RunInterruptible).
//
// KeepEarlyPreemptionRequests(): maestro-worker calls it first thing, so that
// a SIGUSR1 that comes while no instance lives (start-up: MPI, the data set,
// the resume) is kept for the next instance instead of killing the process
// (SIGUSR1's default action).
//
// May call: POSIX signals. Thread safety: requested()/signal_number() may be
// called from any thread; at most one instance exists at a time.
#pragma once

#include <memory>

#include "base/status.h"

namespace maestro::datalayer {

class PreemptionSignal {
 public:
  // Installs the handlers; FailedPrecondition if another instance is alive.
  // A request kept by KeepEarlyPreemptionRequests() counts as arrived.
  static StatusOr<std::unique_ptr<PreemptionSignal>> Install();
  ~PreemptionSignal();  // restores the previous handlers
  PreemptionSignal(const PreemptionSignal&) = delete;
  PreemptionSignal& operator=(const PreemptionSignal&) = delete;

  bool requested() const;
  int signal_number() const;  // 0 when none arrived, else SIGUSR1, SIGTERM or SIGINT

 private:
  PreemptionSignal() = default;
};

// From now on, for the whole process: a SIGUSR1 that arrives while no
// PreemptionSignal is installed sets the flag that the next Install() then
// keeps (instead of clearing it). Call it once, before any thread starts.
void KeepEarlyPreemptionRequests();

// SLURM_RESTART_COUNT: 0 when unset (first start), then 1, 2, ... after each
// requeue. A malformed value counts as 0.
int SlurmRestartCount();

}  // namespace maestro::datalayer
