// SPDX-License-Identifier: Apache-2.0
// Small collectives of the runtime's control plane over a launcher Backend
// (the world or a group): waits (timed as blocked), integer broadcasts and
// byte strings between two ranks. Torch-free; fp32 tensors travel as
// FloatBuffer (runtime/tensor_buffer.h), the TP all-reduce is
// runtime/parallel/tensor_parallel.h. Point-to-point tags: runtime/message_tags.h.
// May call: launcher, base. Thread safety: one thread per process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "launcher/communicators.h"

namespace maestro::runtime {

// Waits for a collective or point-to-point operation.
Status Wait(StatusOr<launcher::WorkPtr> work);

// Wait, adding the seconds spent waiting to *blocked_seconds (time blocked on
// a peer: neither compute nor framework overhead).
Status TimedWait(StatusOr<launcher::WorkPtr> work, double* blocked_seconds);

// Root 0's `values` (any length) on every rank of `group`.
Status BroadcastInts(launcher::Backend& group, std::vector<int64_t>& values);

// A byte string from this rank to `peer` (its length first), and its receipt.
Status SendBytes(launcher::Backend& group, const std::string& bytes, int peer, int tag);
StatusOr<std::string> RecvBytes(launcher::Backend& group, int peer, int tag);

}  // namespace maestro::runtime
