// SPDX-License-Identifier: Apache-2.0
// Edges between any two DP degrees (plan::EdgeDpRuleHolds, docs/scheduler.md
// "DP degrees that divide neither way"): the planner may join degrees that
// divide neither way, plans each spec both ways when it does, and keeps the
// shorter simulated step; what it writes links the replicas whose shares of
// the batch overlap.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "base/checks.h"
#include "compiler/candidates.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "plan/plan.h"

namespace maestro::compiler {
namespace {

const std::string kSpecs = std::string(MAESTRO_SOURCE_DIR) + "/specs/";

StatusOr<CompileResult> CompileSpec(const std::string& name) {
  MAESTRO_ASSIGN_OR_RETURN(Spec spec, ParseSpecFile(kSpecs + name));
  return Compile(spec, CompileOptions{});
}

bool Nests(int a, int b) {
  return a % b == 0 || b % a == 0;
}

// The DP degrees of the plan's one edge.
std::pair<int, int> EdgeDps(const CompileResult& r) {
  const auto& e = r.workload.edges.at(0);
  return {r.assignment.sections[static_cast<size_t>(e.from)].cost.config.dp,
          r.assignment.sections[static_cast<size_t>(e.to)].cost.config.dp};
}

TEST(DpEdges, TheRuleAllowsAnyDegreesAndThePlannerCapsTheirSlots) {
  PlannerOptions any;
  EXPECT_TRUE(EdgeDpsAllowed(43, 21, 0, 0, any));
  EXPECT_TRUE(EdgeDpsAllowed(8, 24, 0, 0, any));
  EXPECT_TRUE(EdgeDpsAllowed(61, 67, 0, 0, any));   // 4087 slots
  EXPECT_FALSE(EdgeDpsAllowed(61, 71, 0, 0, any));  // 4331 slots
  EXPECT_EQ(DpSlots({61, 67}), 4087);
  EXPECT_GT(DpSlots({61, 67, 2}), kMostDpSlots);
  PlannerOptions nested;
  nested.nested_dp_edges = true;
  EXPECT_FALSE(EdgeDpsAllowed(43, 21, 0, 0, nested));
  EXPECT_TRUE(EdgeDpsAllowed(7, 21, 0, 0, nested));
  EXPECT_FALSE(EdgeDpsAllowed(2, 6, 2, 0, any));  // a pinned fan-out is exact
}

// kd_32b_to_1_5b: the teacher's and the student's replica counts that best
// share 64 GPUs divide neither way (12 -> 16); the compile planned both ways
// (the explain output has both steps).
TEST(DpEdges, AKdSpecPlansDegreesThatDivideNeitherWay) {
  auto r = CompileSpec("kd_32b_to_1_5b.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->grouping.fused);
  const auto [from, to] = EdgeDps(*r);
  EXPECT_FALSE(Nests(from, to)) << from << " -> " << to;
  const size_t at = r->explain.find("  edges: ");
  ASSERT_NE(at, std::string::npos) << r->explain;
  const std::string line = r->explain.substr(at, r->explain.find('\n', at) - at);
  EXPECT_NE(line.find("any DP degrees"), std::string::npos) << line;
  EXPECT_NE(line.find("planned with nested DP degrees"), std::string::npos) << line;
  // plan.json links every overlapping pair, and says neither fan-out nor fan-in.
  ASSERT_EQ(r->plan.edges.size(), 1u);
  EXPECT_EQ(r->plan.edges[0].fanout, 0);
  EXPECT_EQ(r->plan.edges[0].fanin, 0);
  EXPECT_EQ(static_cast<int>(r->plan.links.size()), from + to - std::gcd(from, to));
  EXPECT_NE(r->report.find("links by overlapping shares"), std::string::npos) << r->report;
}

// kd_72b_to_7b_4k: the analytic search's best plan (teacher DP 43 -> student
// DP 21) simulates slower than it predicts (the student waits); the
// refinement trades replicas between the sections (one more for the
// student, one fewer for the teacher) while that shortens the simulated
// step, within the 128 GPUs.
TEST(DpEdges, ReplicasTradedBetweenSectionsShortenTheStepWithinTheBudget) {
  auto r = CompileSpec("kd_72b_to_7b_4k.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->grouping.fused);
  const size_t at = r->explain.find(", section 'teacher': DP ");
  ASSERT_NE(at, std::string::npos) << r->explain;
  const size_t line = r->explain.rfind('\n', at) + 1;
  const std::string trade = r->explain.substr(line, r->explain.find('\n', at) - line);
  double before = 0, after = 0;
  const size_t steps = trade.find("simulated step ");
  ASSERT_NE(steps, std::string::npos) << trade;
  ASSERT_EQ(std::sscanf(trade.c_str() + steps, "simulated step %lf s -> %lf s", &before, &after), 2) << trade;
  EXPECT_LT(after, before) << trade;
  EXPECT_LE(r->simulated.step_seconds, before) << trade;
  int gpus = 0;
  for (const auto& s : r->assignment.sections) gpus += s.cost.gpus;
  EXPECT_LE(gpus, 128);
}

}  // namespace
}  // namespace maestro::compiler
