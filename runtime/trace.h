// SPDX-License-Identifier: Apache-2.0
// The Perfetto trace of a run: each rank records its ops (F<m>, B<m>, O,
// A<m> (a frozen section's micro-batch computed ahead, docs/run_ahead.md),
// ahead (the rest of a run-ahead: pipeline drain, spool commit), checkpoint)
// as wall-clock intervals, never nested; at the end every rank writes
// <run_dir>/trace/rank-<r>.json and rank 0 merges them into
// <run_dir>/trace.json (chrome://tracing format: one process per section,
// one thread per rank). Long runs keep their first 20 and last 100 steps.
// May call: runtime/collectives, launcher, plan, base. Torch-free.
// Thread safety: one thread per process.
#pragma once

#include <cstdint>
// GCC 12 reports a false -Wnull-dereference inside nlohmann::json's inlined code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <nlohmann/json.hpp>
#pragma GCC diagnostic pop
#include <string>
#include <vector>

#include "base/status.h"
#include "launcher/communicators.h"
#include "plan/plan.h"

namespace maestro::runtime {

// Microseconds since the epoch (the trace's clock: comparable across ranks of a machine).
int64_t WallMicros();

struct TraceEvent {
  std::string name;
  int64_t step = 0;
  int64_t start_us = 0, dur_us = 0;
  int samples = 0;
  // Of `samples`, the rows the op computed where a spool serves the others
  // (a forward-only section's F or A op); -1: every sample was computed.
  int computed = -1;
};

// One rank's events.
class StepTrace {
 public:
  explicit StepTrace(int64_t total_steps) : total_steps_(total_steps) {}
  // The step the following events belong to.
  void set_step(int64_t step) { step_ = step; }
  // An op `name` from `start_us` (WallMicros) until now, over `samples`
  // samples of which `computed` were computed (-1: all; see TraceEvent).
  void Add(const std::string& name, int64_t start_us, int samples, int computed = -1);
  const std::vector<TraceEvent>& events() const { return events_; }

 private:
  int64_t total_steps_;
  int64_t step_ = 0;
  std::vector<TraceEvent> events_;
};

// Collective over `world`: writes this rank's events (it runs section
// `section`) and, on rank 0, merges every rank's into <run_dir>/trace.json.
// Returns the merged events on rank 0 (an empty array elsewhere).
StatusOr<nlohmann::json> WriteTrace(launcher::Backend& world, const plan::Plan& plan, int section, int world_rank,
                                    const std::string& run_dir, const std::vector<TraceEvent>& events);

}  // namespace maestro::runtime
