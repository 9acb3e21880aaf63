// SPDX-License-Identifier: Apache-2.0
// The wavefront scheduler: for one global batch, where (section replica) and
// in which order (micro-batches, forward/backward interleaving) every sample
// runs, plus the sends/receives that implies and the step's lower bound.
//
// Owns: the policies (wavefront, FIFO, FIFO-strided, FIFO-contiguous,
// balance-only), BuildSchedule(), the compact JSON form of a Schedule (the
// value itself, per-rank op sequences, is scheduler/schedule.h, which this
// header includes), IndexSchedule(), ImpliedTransfers(), ComputeLowerBound().
// May call: base, plan, scheduler/problem.h, scheduler/schedule.h,
// nlohmann-json.
// Called by: the compiler (planning, report), the runtime (execution order),
// the datalayer (stores the schedule of each step).
//
// What a schedule promises (tests/scheduler/ checks each over random plans):
//  * every sample is processed exactly once by each section it activates,
//    forward and (for training sections) backward;
//  * a sample's replicas are linked on every edge it crosses (plan::ReplicasLinked);
//  * the set of samples of the step is unchanged (only placement and order);
//  * same (problem, seed, step, policy) -> the same schedule, bit for bit.
//
// Execution model (the runtime's and the simulator's): each rank runs its ops
// in order. A forward of micro-batch m blocks until every sample of m has
// arrived from each upstream section it activates; a backward blocks until
// the gradient of every sample has come back from each downstream training
// section (a training section with no training consumer computes its loss
// locally: its backward follows its forward). An optimizer op ends a training
// rank's sequence. Loss scaling must use the global batch (micro-batches are
// at most micro_batch samples and may be smaller), so the step's gradient is
// the unscheduled one's up to summation order.
//
// Thread safety: free functions over values; safe to call concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "scheduler/problem.h"
#include "scheduler/schedule.h"

namespace maestro::scheduler {

enum class Policy {
  kWavefront,       // balanced placement + wave-ordered list scheduling
  kFifo,            // data order dealt round-robin, one micro-batch at a time, over
                    // the replicas of the widest section (Megatron's sampler);
                    // each rank runs its samples in data order
  kBalanceOnly,     // balanced placement, data-order micro-batches
  kFifoContiguous,  // one contiguous slice of the batch per replica, data order
  kFifoStrided,     // data order dealt round-robin one sample at a time over the
                    // replicas of the widest section (PyTorch's DistributedSampler,
                    // indices[rank::world]), then contiguous micro-batches per rank
};
const char* PolicyName(Policy policy);
StatusOr<Policy> PolicyFromName(const std::string& name);

struct ScheduleOptions {
  Policy policy = Policy::kWavefront;
  uint64_t seed = 0;  // tie-breaking only; (seed, step) fix the schedule
  int64_t step = 0;
  // Wavefront only: a training section that waits for gradients from
  // downstream keeps at most this many micro-batches between forward and
  // backward (their activations stay in memory); 0 = no cap. When two capped
  // branches meet in one sample and would wait on each other, a stalled rank
  // goes one micro-batch over (so the cap is exact on chains of sections).
  int max_in_flight = 0;
};

// Every policy, for loops in tests and benchmarks.
inline constexpr Policy kAllPolicies[] = {Policy::kWavefront, Policy::kFifo, Policy::kBalanceOnly,
                                          Policy::kFifoContiguous, Policy::kFifoStrided};

// Schedules one global batch. Fails (InvalidArgument) on a problem that
// ValidateProblem() rejects. Runs in O(N log N + N * L * S) for N samples,
// S sections and L = lcm of the DP degrees.
StatusOr<Schedule> BuildSchedule(const Problem& problem, const ScheduleOptions& options);

// Where every sample runs in a schedule. Arrays are (section, sample index)
// flattened as section * samples + sample, sample index = position in
// Problem::samples; -1 where the section does not process the sample.
struct ScheduleIndex {
  int num_samples = 0;
  std::vector<int32_t> rank;         // index into Schedule::ranks
  std::vector<int32_t> micro_batch;  // index into RankProgram::micro_batches
  int32_t RankOf(int section, int sample) const {
    return rank[static_cast<size_t>(section) * static_cast<size_t>(num_samples) + static_cast<size_t>(sample)];
  }
  int32_t MicroBatchOf(int section, int sample) const {
    return micro_batch[static_cast<size_t>(section) * static_cast<size_t>(num_samples) + static_cast<size_t>(sample)];
  }
};
// Checks every promise of a schedule against its problem (one program per
// replica, each activated sample exactly once per section and nowhere else,
// replicas linked on every edge, ops well-formed: one F per micro-batch, one B after
// it for training sections, one final optimizer op) and returns the index.
StatusOr<ScheduleIndex> IndexSchedule(const Problem& problem, const Schedule& schedule);

// The sends/receives a schedule implies: one message per (edge, upstream
// micro-batch, downstream micro-batch) pair. The activation goes down after
// the upstream forward; when `gradient` the gradient of the same samples goes
// back up after the downstream backward.
struct Transfer {
  int edge = 0;
  int up_replica = 0, up_micro_batch = 0;
  int down_replica = 0, down_micro_batch = 0;
  bool gradient = false;  // true when a gradient comes back up this message
  std::vector<uint64_t> sample_ids;
};
// Sorted by (edge, up_replica, up_micro_batch, down_replica, down_micro_batch).
StatusOr<std::vector<Transfer>> ImpliedTransfers(const Problem& problem, const Schedule& schedule);

// The step's lower bound (seconds):
//   max( max_s work_s / dp_s,  longest single-sample dependency chain )
// with work_s the forward (+ backward + optimizer) seconds of section s when
// its samples form full micro-batches.
struct LowerBound {
  double seconds = 0.0;
  double critical_path_seconds = 0.0;
  std::vector<double> section_seconds;  // work_s / dp_s
  int bottleneck_section = -1;          // argmax of section_seconds
};
StatusOr<LowerBound> ComputeLowerBound(const Problem& problem);

// Compact JSON form (what the datalayer stores per step):
// {"v":1,"policy":"wavefront","seed":7,"step":3,"predicted":1.25,
//  "ranks":[{"s":0,"r":0,"mb":[[ids...],...],"ops":"F0 F1 B0 B1 O"},...]}
std::string ScheduleToJson(const Schedule& schedule);
StatusOr<Schedule> ScheduleFromJson(const std::string& text, const std::string& origin = "schedule");

}  // namespace maestro::scheduler
