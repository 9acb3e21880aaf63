// SPDX-License-Identifier: Apache-2.0
// What the planner plans and what it returns: the workload (sections and the
// edges between them, with their work), an assignment of one configuration to
// every section with the throughput it reaches, and why planning failed when
// it did (PlanOutcome). Summarize derives an assignment's edge times,
// bottleneck, throughput and nodes from its section choices; PackNodeGroups
// packs its sections into het components (node groups) where sections share
// nodes (DeviceType::packs_nodes), the one home of that packing (the plan's
// placements and the nodes held both come from it).
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
  // The schedule's in-flight cap (plan::Plan::schedule_max_in_flight; 0 =
  // none). Set with SetInFlightCap, which gives every section its copy
  // (SectionWork::in_flight_cap, what the memory model reads).
  int max_in_flight = 0;
};

inline void SetInFlightCap(Workload& w, int cap) {
  w.max_in_flight = cap;
  for (SectionWork& s : w.sections) s.in_flight_cap = cap;
}

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
  double bottleneck_seconds = 0;      // max over sections and edges
  double throughput = 0;              // samples / s at steady state
  std::vector<int> nodes_per_device;  // whole nodes held (local mode: slots)
  int gpus = 0;                       // GPUs the sections run on (at most those of the nodes held)
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

// One het component of the plan: sections of one GPU type on `nodes` nodes,
// `tasks_per_node` tasks on each but the last, ranks in the order of
// `sections` (indexes into the workload).
struct NodeGroupChoice {
  int device = 0;
  int nodes = 1;  // a shared_node device (local mode): its one node
  int tasks_per_node = 1;
  std::vector<int> sections;
};

// The het components of an assignment, in rank order. A device that does not
// pack nodes gives every section its own component (whole nodes or part of
// one node). A packs_nodes device puts all its sections in one component,
// ordered by TP*CP, then GPUs, descending (the widest groups first, so that
// power-of-two groups start at multiples of their size), when that keeps
// every TP*CP group of at most a node's GPUs, and every section of at most a
// node's GPUs, inside one node (the cost model prices those at intra-node
// bandwidth); otherwise every section gets its own component on the whole
// nodes its GPUs fill. Components follow the order of their devices' first
// sections.
std::vector<NodeGroupChoice> PackNodeGroups(const CostModel& model, const Workload& w,
                                            const std::vector<SectionChoice>& sections);

// Fills edge_seconds, bottleneck, throughput, nodes and GPUs of `a` from its
// section choices.
void Summarize(const CostModel& model, const Workload& work, Assignment& a);

}  // namespace maestro::compiler
