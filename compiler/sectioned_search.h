// SPDX-License-Identifier: Apache-2.0
// The search behind PlanSections (compiler/planner.h): per section and DP
// degree, the Pareto front (nodes, seconds) of its configurations that fit
// (SectionTable); per pair of sections joined by edges, the DP options that
// keep every edge's fan-out rule (plan::EdgeDpRuleHolds) with the slowest
// edge time (SectionPair); and, for a bottleneck time T, the fewest nodes
// that keep every section and edge at most T (FrontPlanner::Solve): exact
// tree dynamic programming when the section graph is a forest on one GPU
// type, branch and bound otherwise.
// Internal to the planner: PlanSections is its one caller.
// May call: base, plan, compiler/assignment.h, compiler/cost_model.h.
// Thread safety: a FrontPlanner is immutable after construction; Solve is
// const.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "compiler/assignment.h"
#include "compiler/candidates.h"
#include "compiler/cost_model.h"
#include "plan/plan.h"

namespace maestro::compiler::internal {

struct FrontEntry {
  int nodes;
  double seconds;
  plan::ParallelConfig config;
};

struct DpOption {
  int dp;
  std::vector<FrontEntry> front;  // nodes ascending, seconds strictly descending
};

struct SectionTable {
  std::vector<DpOption> options;
};

// A pair of sections joined by one or more edges, with the compatible
// (option index of a, option index of b) pairs and the slowest edge time.
struct PairEntry {
  int ia, ib;
  double edge_seconds;
};
struct SectionPair {
  int a, b;  // a < b
  std::vector<int> edges;
  std::vector<PairEntry> entries;
  std::unordered_map<int64_t, double> lookup;  // ia * nb + ib -> edge_seconds
  int nb = 0;
};

struct Solution {
  bool found = false;
  std::vector<int> option;  // per section: index into options
  std::vector<int> entry;   // per section: index into front
  long long nodes = 0;
};

class FrontPlanner {
 public:
  // `tables`: one per section of `w`, every option's front non-empty.
  // `options`: which DP degrees an edge may join (EdgeDpsAllowed).
  FrontPlanner(const CostModel& model, const Workload& w, std::vector<SectionTable> tables,
               const PlannerOptions& options);

  const std::vector<SectionPair>& pairs() const { return pairs_; }
  const std::vector<SectionTable>& tables() const { return tables_; }

  // The fewest nodes with every section and edge at most T, within the node
  // counts of every GPU type when `use_budget`.
  Solution Solve(double T, bool use_budget) const;

 private:
  void BuildPairs();
  void ClassifyGraph();
  // Fewest nodes per section option with time <= T (INT_MAX: none).
  std::vector<std::vector<int>> NodesAt(double T, std::vector<std::vector<int>>* entry_at) const;
  Solution TreeDp(double T, const std::vector<std::vector<int>>& nodes) const;
  Solution BranchAndBound(double T, const std::vector<std::vector<int>>& nodes, bool use_budget) const;

  const CostModel& model_;
  const Workload& w_;
  std::vector<SectionTable> tables_;
  PlannerOptions options_;
  std::vector<SectionPair> pairs_;
  std::vector<std::vector<size_t>> adj_;
  bool forest_ = true;
  bool single_device_ = true;
};

}  // namespace maestro::compiler::internal
