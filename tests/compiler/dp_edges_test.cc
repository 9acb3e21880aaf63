// SPDX-License-Identifier: Apache-2.0
// Edges between any two DP degrees (plan::EdgeDpRuleHolds, docs/scheduler.md
// "DP degrees that divide neither way"): the planner may join degrees that
// divide neither way, plans each spec both ways when it does, and keeps the
// shorter simulated step; what it writes links the replicas whose shares of
// the batch overlap.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>

#include "base/checks.h"
#include "compiler/candidates.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "compiler/step_simulation.h"
#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"

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

// kd_72b_to_7b_4k from a start the analytic search would not give: as many
// student replicas as pay for one more teacher replica (the plan's units:
// 2 and 10 GPUs today) turned into it. The student, now the slowest, cannot
// grow inside its own units, so
// single moves cannot undo it; the refinement trades replicas between the
// sections (one more for the student, paid by the teacher's fewest replicas
// that free enough) while that shortens the simulated step, within the 128
// GPUs.
TEST(DpEdges, ReplicasTradedBetweenSectionsShortenTheStepWithinTheBudget) {
  auto spec = ParseSpecFile(kSpecs + "kd_72b_to_7b_4k.toml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto r = Compile(*spec, CompileOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->grouping.fused);
  const Workload& work = r->workload;
  const CostModel model(DevicesOf(*spec), spec->data.global_batch);
  const size_t teacher = 0, student = 1;
  ASSERT_EQ(work.sections[teacher].name, "teacher");
  ASSERT_EQ(work.sections[student].name, "student");
  Assignment start = r->assignment;
  plan::ParallelConfig t = start.sections[teacher].cost.config, s = start.sections[student].cost.config;
  const int student_units = s.tp * s.pp * s.cp, teacher_units = t.tp * t.pp * t.cp;
  const int traded = (teacher_units + student_units - 1) / student_units;  // replicas that pay for a teacher's
  ASSERT_GT(s.dp, traded + 1) << "the student keeps replicas to grow back";
  s.dp -= traded;
  t.dp += 1;
  start.sections[student].cost = model.Evaluate(work.sections[student], s);
  start.sections[teacher].cost = model.Evaluate(work.sections[teacher], t);
  Summarize(model, work, start);
  SimulationSettings settings;
  settings.seq_len = spec->data.seq_len;
  settings.modalities = spec->data.modalities;
  settings.seed = spec->data.seed;
  const SimulatedStep before = SimulateSectioned(model, work, start, settings);
  ASSERT_TRUE(before.ok) << before.error;
  std::string log;
  const Assignment refined = RefineBySimulation(model, work, start, PlannerOptions{}, settings, &log);
  const SimulatedStep after = SimulateSectioned(model, work, refined, settings);
  ASSERT_TRUE(after.ok) << after.error;
  const std::string trade = fmt::format("section 'student': DP {} -> {}", s.dp, s.dp + 1);
  EXPECT_NE(log.find(trade), std::string::npos) << log;
  EXPECT_GT(refined.sections[student].cost.config.dp, s.dp) << log;
  EXPECT_LT(after.step_seconds, before.step_seconds * (1 - 0.005)) << log;
  int gpus = 0;
  for (const auto& section : refined.sections) gpus += section.cost.gpus;
  EXPECT_LE(gpus, 128);
}

}  // namespace
}  // namespace maestro::compiler
