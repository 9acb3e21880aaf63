// SPDX-License-Identifier: Apache-2.0
// PreemptionSignal: the worker's side of the preemption protocol
// (docs/datalayer.md "Preemption"). While an instance lives, SIGUSR1 and
// SIGTERM only set an atomic flag (async-signal-safe); the training loop
// polls requested() at safe points, finishes or abandons the current step,
// checkpoints, and exits with kExitRequeue (85, base/exit_codes.h), which the
// generated job.sbatch maps to `scontrol requeue`.
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
  static StatusOr<std::unique_ptr<PreemptionSignal>> Install();
  ~PreemptionSignal();  // restores the previous handlers
  PreemptionSignal(const PreemptionSignal&) = delete;
  PreemptionSignal& operator=(const PreemptionSignal&) = delete;

  bool requested() const;
  int signal_number() const;  // 0 when none arrived, else SIGUSR1 or SIGTERM

 private:
  PreemptionSignal() = default;
};

// SLURM_RESTART_COUNT: 0 when unset (first start), then 1, 2, ... after each
// requeue. A malformed value counts as 0.
int SlurmRestartCount();

}  // namespace maestro::datalayer
