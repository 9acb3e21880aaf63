// SPDX-License-Identifier: Apache-2.0
// Internal to scheduler/: the programs of the static policies (FIFO,
// FIFO-strided, FIFO-contiguous, balance-only), which fix the order from the
// placement alone, without simulating anything.
//
// Owns: StaticSchedule() (each rank's samples in data order, in chunks of
// micro_batch; a loss section runs F0 B0 F1 B1 ..., another training section
// all its forwards then all its backwards, then the optimizer).
// May call: scheduler/prepared.h, scheduler/placement.h, scheduler/schedule.h.
// Called by: scheduler.cc (BuildSchedule) only.
//
// Thread safety: pure function.
#pragma once

#include "scheduler/placement.h"
#include "scheduler/prepared.h"
#include "scheduler/schedule.h"

namespace maestro::scheduler::internal {

// The rank programs for `place`; policy, seed and step are left to the caller.
Schedule StaticSchedule(const Prepared& pr, const Placement& place);

}  // namespace maestro::scheduler::internal
