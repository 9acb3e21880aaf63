// SPDX-License-Identifier: Apache-2.0
// BuildSchedule (one home for the policies: which placement, which order)
// and the policy names. The pieces live beside it:
//   schedule.{h,cc}         the Schedule value and Schedule::RankIndex
//   prepared.{h,cc}         what every policy derives from a problem once
//   placement.{h,cc}        contiguous, round-robin and balanced placements
//   static_schedule.{h,cc}  the data-order programs of the static policies
//   wavefront.{h,cc}        the wavefront list scheduler
//   schedule_index.cc       IndexSchedule (validation) and ImpliedTransfers
//   lower_bound.cc          ComputeLowerBound
//   schedule_json.cc        ScheduleToJson / ScheduleFromJson
//
// Wavefront, in two phases (docs/scheduler.md has the long version):
//  1. Placement. Every consistent assignment of a sample to one replica per
//     section is described by a "slot" in [0, L), L = lcm of the DP degrees:
//     replica_s = slot * dp_s / L (nested floor divisions, so every fan-out
//     and fan-in map holds). Samples are placed longest first (by their share
//     of the total work) on the slot that minimises the largest normalised
//     load (load / mean load) over the sections they activate: LPT over a
//     vector of loads, which balances every section's replicas at once.
//  2. Order. One global wave order: samples with the longest dependency
//     chain outside their heaviest section first, interleaved over the
//     replicas of that section. An event-driven list scheduler then runs all
//     ranks together in simulated time (the simulator's semantics). A rank
//     that falls idle forms its next micro-batch from the samples whose
//     inputs have arrived: those that came from upstream first, then those
//     that need no upstream (fillers while upstream work is in flight), each
//     in wave order. Full forward micro-batches go before ready backwards
//     (downstream is kept fed); a loss section runs F then B; a producer's
//     first micro-batch is a quarter size so its consumers start sooner.
#include "scheduler/scheduler.h"

#include <string>
#include <utility>

#include "base/splitmix.h"
#include "scheduler/placement.h"
#include "scheduler/prepared.h"
#include "scheduler/static_schedule.h"
#include "scheduler/wavefront.h"

namespace maestro::scheduler {

using internal::PlaceBalanced;
using internal::PlaceContiguous;
using internal::PlaceRoundRobin;
using internal::Prepare;
using internal::Prepared;
using internal::StaticSchedule;
using internal::WavefrontSchedule;

const char* PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kWavefront: return "wavefront";
    case Policy::kFifo: return "fifo";
    case Policy::kBalanceOnly: return "balance";
    case Policy::kFifoContiguous: return "fifo-contiguous";
    case Policy::kFifoStrided: return "fifo-strided";
  }
  return "?";
}

StatusOr<Policy> PolicyFromName(const std::string& name) {
  for (Policy p : kAllPolicies) {
    if (name == PolicyName(p)) return p;
  }
  return Status::InvalidArgument("unknown scheduling policy '" + name +
                                 "' (expected wavefront, fifo, balance, fifo-contiguous or fifo-strided)");
}

StatusOr<Schedule> BuildSchedule(const Problem& problem, const ScheduleOptions& options) {
  Prepared pr;
  Status st = Prepare(problem, &pr);
  if (!st.ok()) return st;
  const uint64_t tie_seed = SplitMix64(options.seed ^ SplitMix64(static_cast<uint64_t>(options.step)));
  Schedule sch;
  switch (options.policy) {
    case Policy::kFifo: sch = StaticSchedule(pr, PlaceRoundRobin(pr, pr.fifo_block)); break;
    case Policy::kFifoContiguous: sch = StaticSchedule(pr, PlaceContiguous(pr)); break;
    case Policy::kFifoStrided: sch = StaticSchedule(pr, PlaceRoundRobin(pr, /*block=*/1)); break;
    case Policy::kBalanceOnly: sch = StaticSchedule(pr, PlaceBalanced(pr, tie_seed)); break;
    case Policy::kWavefront: {
      auto wf = WavefrontSchedule(pr, PlaceBalanced(pr, tie_seed), tie_seed, options.max_in_flight);
      if (!wf.ok()) return wf.status();
      sch = std::move(wf).value();
      break;
    }
  }
  sch.policy = PolicyName(options.policy);
  sch.seed = options.seed;
  sch.step = options.step;
  return sch;
}

}  // namespace maestro::scheduler
