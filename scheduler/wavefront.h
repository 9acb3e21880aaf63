// SPDX-License-Identifier: Apache-2.0
// Internal to scheduler/: the wavefront list scheduler, the order half of the
// wavefront policy (the placement half is PlaceBalanced in placement.h).
//
// Owns: the wave order (one global priority over the samples: the longest
// dependency chain outside their heaviest section first, interleaved over
// that section's replicas) and the event-driven list scheduler that runs
// every rank together in simulated time (the simulator's semantics): an idle
// rank forms its next micro-batch from the samples whose inputs have arrived
// (those from upstream first, then fillers that need no upstream, each in
// wave order); full forwards go before ready backwards; a loss section runs
// F then B; a producer's first micro-batch is a quarter size; with an
// in-flight cap, a stalled rank may go one micro-batch over (deadlock
// relief). docs/scheduler.md has the long version.
// May call: base, scheduler/prepared.h, scheduler/placement.h,
// scheduler/schedule.h.
// Called by: scheduler.cc (BuildSchedule) only.
//
// Thread safety: pure function (its state lives in one call).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "scheduler/placement.h"
#include "scheduler/prepared.h"
#include "scheduler/schedule.h"

namespace maestro::scheduler::internal {

// The rank programs of the wavefront policy for `place` (ties broken by
// `tie_seed`), with predicted_step_seconds set to the simulated makespan;
// policy, seed and step are left to the caller. max_in_flight as in
// ScheduleOptions. Fails (Internal) only on a bug: a rank left unfinished.
StatusOr<Schedule> WavefrontSchedule(const Prepared& pr, const Placement& place, uint64_t tie_seed, int max_in_flight);

}  // namespace maestro::scheduler::internal
