// SPDX-License-Identifier: Apache-2.0
// Process exit codes shared by maestro-worker, maestro, maestro-compile and the
// generated job.sbatch (which maps kExitRequeue to `scontrol requeue`).
#pragma once

namespace maestro {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // an error; the message says which
inline constexpr int kExitUsage = 2;     // bad input: CLI flags, spec, plan
inline constexpr int kExitNotBuilt = 3;  // a capability this build lacks
// The worker checkpointed after SIGUSR1/SIGTERM/SIGINT (pre-timeout signal,
// preemption, or Ctrl-C) and wants the job requeued; job.sbatch runs
// `scontrol requeue`; `maestro run` returns it after a Ctrl-C too (run the
// same command again to resume at the next step).
inline constexpr int kExitRequeue = 85;
// Another rank failed or hung; this rank stopped on purpose (see its message).
inline constexpr int kExitPeerFailure = 86;
// `maestro run` stopped by a second Ctrl-C, at once, without waiting for a
// checkpoint (128 + SIGINT, what a shell reports for a command SIGINT ended).
inline constexpr int kExitInterrupted = 130;

}  // namespace maestro
