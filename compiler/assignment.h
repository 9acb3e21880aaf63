// SPDX-License-Identifier: Apache-2.0
// What the planner plans and what it returns: the workload (sections and the
// edges between them, with their work), an assignment of one configuration to
// every section with the throughput it reaches, and why planning failed when
// it did (PlanOutcome). Summarize derives an assignment's edge times,
// bottleneck, throughput and nodes from its section choices.
// May call: base, plan, compiler/cost_model.h.
// Thread safety: plain data; Summarize is a pure function of its arguments.
#pragma once

#include <string>
#include <vector>

#include "compiler/cost_model.h"

namespace maestro::compiler {

struct Workload {
  std::vector<SectionWork> sections;
  std::vector<EdgeWork> edges;
};

struct SectionChoice {
  SectionCost cost;
  std::string planner_only;  // features the runtime lacks ("" = runs today)
  // Forward-only sections: global batches computed ahead (ChooseRunAhead,
  // compiler/run_ahead.h); 0 = off.
  int run_ahead = 0;
};

struct Assignment {
  std::vector<SectionChoice> sections;
  std::vector<double> edge_seconds;
  double bottleneck_seconds = 0;  // max over sections and edges
  double throughput = 0;          // samples / s at steady state
  std::vector<int> nodes_per_device;
  int gpus = 0;  // GPUs held (whole nodes)
};

// Why planning failed, pointing at what the spec must change.
struct PlanFailure {
  enum class Kind { kNone, kNoConfigFits, kBudgetTooSmall, kFanOutImpossible };
  Kind kind = Kind::kNone;
  int section = -1;
  int edge = -1;
  std::string message;
};

struct PlanOutcome {
  Assignment assignment;
  PlanFailure failure;
  bool ok() const { return failure.kind == PlanFailure::Kind::kNone; }
  // Per section: configurations evaluated, and how many fit in memory.
  std::vector<int> evaluated, fitting;
};

// Fills edge_seconds, bottleneck, throughput, nodes and GPUs of `a` from its
// section choices.
void Summarize(const CostModel& model, const Workload& work, Assignment& a);

}  // namespace maestro::compiler
