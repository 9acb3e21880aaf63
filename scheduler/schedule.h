// SPDX-License-Identifier: Apache-2.0
// A schedule as a value: for one global batch, each section replica's
// micro-batches (the sample ids it stacks) and the order of its forward,
// backward and optimizer ops. What a schedule promises and how ranks run it
// are in scheduler/scheduler.h, which builds, checks and serialises one.
//
// Owns: OpKind, Op, MicroBatch, RankProgram, Schedule and
// Schedule::RankIndex.
// May call: nothing of maestro (the standard library only).
// Called by: scheduler/scheduler.h (which includes it: its users see this
// too) and the builders inside scheduler/ (static_schedule, wavefront).
//
// Thread safety: values; RankIndex is const.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace maestro::scheduler {

enum class OpKind : uint8_t { kForward, kBackward, kOptimizer };

struct Op {
  OpKind kind = OpKind::kForward;
  int32_t micro_batch = -1;  // index into RankProgram::micro_batches; -1 for kOptimizer
  bool operator==(const Op& o) const { return kind == o.kind && micro_batch == o.micro_batch; }
};

struct MicroBatch {
  std::vector<uint64_t> sample_ids;  // Sample::id, in the order they are stacked
  bool operator==(const MicroBatch& o) const { return sample_ids == o.sample_ids; }
};

// One DP replica of one section: its micro-batches and the order of its ops.
struct RankProgram {
  int section = 0;
  int replica = 0;
  std::vector<MicroBatch> micro_batches;
  std::vector<Op> ops;
  bool operator==(const RankProgram& o) const {
    return section == o.section && replica == o.replica && micro_batches == o.micro_batches && ops == o.ops;
  }
};

struct Schedule {
  std::string policy;
  uint64_t seed = 0;
  int64_t step = 0;
  // Sorted by (section, replica); RankIndex() finds one.
  std::vector<RankProgram> ranks;
  // The scheduler's own prediction of the step time (seconds); the simulator
  // recomputes it from the ops (they agree for the wavefront policy).
  double predicted_step_seconds = 0.0;

  int RankIndex(int section, int replica) const;
  bool operator==(const Schedule& o) const {
    return policy == o.policy && seed == o.seed && step == o.step && ranks == o.ranks;
  }
};

}  // namespace maestro::scheduler
