// SPDX-License-Identifier: Apache-2.0
// Process exit codes shared by maestro-worker, maestro, maestro-compile and the
// generated job.sbatch (which maps kExitRequeue to `scontrol requeue`).
#pragma once

namespace maestro {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;   // an error; the message says which
inline constexpr int kExitUsage = 2;     // bad input: CLI flags, spec, plan
inline constexpr int kExitNotBuilt = 3;  // a capability this build lacks
// The worker checkpointed after SIGUSR1/SIGTERM (pre-timeout signal or
// preemption) and wants the job requeued; job.sbatch runs `scontrol requeue`.
inline constexpr int kExitRequeue = 85;
// Another rank failed or hung; this rank stopped on purpose (see its message).
inline constexpr int kExitPeerFailure = 86;

}  // namespace maestro
