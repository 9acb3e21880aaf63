// SPDX-License-Identifier: Apache-2.0
// Run-ahead as a planner decision (compiler/run_ahead.h, docs/run_ahead.md):
// the planner sets run_ahead = 1 on a frozen teacher that feeds a trained
// student where it shortens the simulated step, a spec pin wins, the report
// and --explain say so, plan.json writes the field only when on, and a
// training section may not run ahead (spec and plan).
#include "compiler/run_ahead.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

#include "base/checks.h"
#include "compiler/compile.h"
#include "compiler/model.h"
#include "compiler/spec.h"
#include "compiler/step_simulation.h"
#include "compiler/workload_builder.h"
#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"
#include "tests/fixtures/workloads.h"

namespace maestro::compiler {
namespace {

std::string TinyKdText() {
  std::ifstream in(std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_kd.toml");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// tiny_kd.toml with `extra` inserted after the line `name = "<section>"`.
std::string WithSectionKey(const std::string& section, const std::string& extra) {
  std::string text = TinyKdText();
  const std::string at = "name = \"" + section + "\"\n";
  const size_t pos = text.find(at);
  EXPECT_NE(pos, std::string::npos) << at;
  if (pos != std::string::npos) text.insert(pos + at.size(), extra + "\n");
  return text;
}

StatusOr<CompileResult> CompileText(const std::string& text) {
  MAESTRO_ASSIGN_OR_RETURN(Spec spec,
                           ParseSpecString(text, "tiny_kd.toml", std::string(MAESTRO_SOURCE_DIR) + "/specs"));
  CompileOptions options;
  options.grouping = Grouping::kSectioned;
  return Compile(spec, options);
}

// specs/`name`, compiled sectioned for this build's runtime or `support`.
StatusOr<CompileResult> CompileExampleSectioned(const std::string& name, const RuntimeSupport* support = nullptr) {
  MAESTRO_ASSIGN_OR_RETURN(Spec spec, ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/" + name));
  CompileOptions options;
  options.grouping = Grouping::kSectioned;
  if (support != nullptr) {
    options.support = *support;
    options.support_given = true;
  }
  return Compile(spec, options);
}

int TeacherRunAhead(const plan::Plan& p) {
  return p.sections[static_cast<size_t>(p.section_index("teacher"))].run_ahead;
}

// What ChooseRunAhead gives a teacher of `config` running `microbatches`
// per step on this build's runtime (run_ahead_stream): 1, or at PP > 1
// enough batches that those after the next hold PP - 1 of its micro-batches.
int StreamingRunAhead(const plan::ParallelConfig& config, double microbatches) {
  if (config.pp <= 1) return 1;
  const int per_step = std::max(1, static_cast<int>(std::floor(microbatches)));
  return std::min(plan::kMaxRunAhead, 1 + (config.pp - 1 + per_step - 1) / per_step);
}

TEST(RunAheadPlanner, TheTeacherRunsAheadWhereItShortensTheSimulatedStep) {
  auto chosen = CompileText(TinyKdText());
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  auto off = CompileText(WithSectionKey("teacher", "run_ahead = 0"));
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  const SectionCost& teacher_cost = chosen->assignment.sections[0].cost;
  const int k = StreamingRunAhead(teacher_cost.config, teacher_cost.microbatches);
  EXPECT_EQ(TeacherRunAhead(chosen->plan), k);
  EXPECT_EQ(TeacherRunAhead(off->plan), 0);
  EXPECT_EQ(chosen->plan.sections[static_cast<size_t>(chosen->plan.section_index("student"))].run_ahead, 0);
  EXPECT_LT(chosen->simulated.step_seconds, off->simulated.step_seconds * (1 - 0.005));
  // The baseline is not touched.
  EXPECT_DOUBLE_EQ(chosen->monolithic_simulated.step_seconds, off->monolithic_simulated.step_seconds);
  // Said in the report, its JSON and --explain.
  EXPECT_NE(chosen->report.find("run-ahead"), std::string::npos) << chosen->report;
  EXPECT_EQ(off->report.find("run-ahead ("), std::string::npos) << off->report;
  const auto js = nlohmann::json::parse(chosen->report_json);
  EXPECT_EQ(js["sections"][0]["name"], "teacher");
  EXPECT_EQ(js["sections"][0]["run_ahead"], k);
  EXPECT_NE(chosen->explain.find(fmt::format("run_ahead = {}", k)), std::string::npos) << chosen->explain;
  EXPECT_NE(off->explain.find("pinned in the spec"), std::string::npos) << off->explain;
  // A pin of 2 is kept.
  auto two = CompileText(WithSectionKey("teacher", "run_ahead = 2"));
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(TeacherRunAhead(two->plan), 2);
}

TEST(RunAheadPlanner, ATrainingSectionMayNotRunAhead) {
  auto r = CompileText(WithSectionKey("student", "run_ahead = 1"));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("run_ahead applies to a forward-only section"), std::string::npos)
      << r.status().ToString();
  EXPECT_NE(r.status().message().find("tiny_kd.toml:"), std::string::npos) << r.status().ToString();
}

TEST(RunAheadPlan, WrittenOnlyWhenOnAndRefusedOnATrainingSection) {
  auto chosen = CompileText(TinyKdText());
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  plan::Plan p = chosen->plan;
  const std::string on = plan::PlanToJson(p);
  EXPECT_NE(on.find("\"run_ahead\""), std::string::npos);
  auto back = plan::PlanFromJson(on, "plan.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_GE(TeacherRunAhead(*back), 1);
  EXPECT_EQ(TeacherRunAhead(*back), TeacherRunAhead(p));
  p.sections[static_cast<size_t>(p.section_index("teacher"))].run_ahead = 0;
  const std::string off = plan::PlanToJson(p);
  EXPECT_EQ(off.find("\"run_ahead\""), std::string::npos) << "an older plan's shape: no field";
  p.sections[static_cast<size_t>(p.section_index("student"))].run_ahead = 1;
  auto refused = plan::PlanFromJson(plan::PlanToJson(p), "plan.json");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("section 'student': run_ahead = 1"), std::string::npos)
      << refused.status().ToString();
}

// The 72B KD teacher runs tensor- and/or pipeline-parallel: with this
// build's runtime support (run_ahead_model_parallel) the planner lets it run
// ahead and the plan is not planner-only, as with --runtime-support all.
TEST(RunAheadPlanner, AModelParallelTeacherRunsAheadOnThisRuntime) {
  auto r = CompileExampleSectioned("kd_72b_to_7b.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const plan::Plan& p = r->plan;
  const auto& teacher = p.sections[static_cast<size_t>(p.section_index("teacher"))];
  EXPECT_TRUE(teacher.config.tp > 1 || teacher.config.pp > 1) << teacher.config.tp << " " << teacher.config.pp;
  const auto i = static_cast<size_t>(p.section_index("teacher"));
  ASSERT_LT(i, r->assignment.sections.size());
  const SectionCost& cost = r->assignment.sections[i].cost;
  EXPECT_EQ(teacher.run_ahead, StreamingRunAhead(cost.config, cost.microbatches)) << r->explain;
  EXPECT_EQ(r->assignment.sections[i].planner_only, "") << r->report;
  if (teacher.config.pp > 1) {
    // Its pipeline streams across steps: the step model charges no fill.
    EXPECT_EQ(cost.fill_stages, 0) << r->explain;
    EXPECT_NE(r->explain.find("no fill: its pipeline streams across steps"), std::string::npos) << r->explain;
  }
}

// A runtime without the stream across steps (`run_ahead_stream` off): a
// pipelined teacher runs one batch ahead and pays its fill every step, in
// the analytic model and the simulation alike; the plan for this build's
// runtime, whose teacher streams, is not slower.
TEST(RunAheadPlanner, WithoutTheStreamAPipelinedTeacherPaysItsFillEveryStep) {
  auto with = CompileExampleSectioned("kd_72b_to_7b.toml");
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  RuntimeSupport plain = kRuntimeSupport;
  plain.run_ahead_stream = false;
  auto without = CompileExampleSectioned("kd_72b_to_7b.toml", &plain);
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  const auto i = static_cast<size_t>(without->plan.section_index("teacher"));
  const auto& teacher = without->plan.sections[i];
  EXPECT_LE(teacher.run_ahead, 1) << without->explain;
  EXPECT_EQ(without->workload.sections[i].pipeline_streams_ahead, 0);
  EXPECT_EQ(without->assignment.sections[i].cost.fill_stages, teacher.config.pp - 1) << without->explain;
  EXPECT_LE(with->simulated.step_seconds, without->simulated.step_seconds) << with->explain << without->explain;
  EXPECT_GE(with->workload.sections[i].pipeline_streams_ahead, 2);
}

// The simulation's refinement searches with run-ahead priced (compile.cc:
// ChooseRunAhead before and after RefineBySimulation): on the 72B KD the
// teacher, off the critical path, may take configurations the fill-priced
// search rejects; maestro-compile keeps the shorter of refining first and
// adding run-ahead after, and refining with run-ahead priced, for this
// build's runtime and for one with every feature. (Since decoder CP landed
// the two orders reach plans within 0.5% of each other on this spec.)
TEST(RunAheadPlanner, TheRefinementSearchesWithRunAheadPricedOnAKdTeacher) {
  for (const char* support : {"", "all"}) {
    auto spec = ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/kd_72b_to_7b.toml");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    fixtures::PlanningInputs inputs = fixtures::PlanningInputsOf(*spec);
    auto& work = inputs.work;
    const CostModel& model = inputs.model;
    const SimulationSettings& s = inputs.settings;
    ASSERT_TRUE(work.ok());
    PlannerOptions o;
    if (*support != '\0') o.support = *ParseRuntimeSupport(support);
    MarkPipelineStreams(*spec, o.support, &*work);  // as Compile does
    const PlanOutcome planned = PlanSections(model, *work, o);
    ASSERT_TRUE(planned.ok()) << planned.failure.message;
    // From `start`: refined without run-ahead, then run-ahead added (the
    // order before); and run-ahead priced during the refinement.
    const auto both_orders = [&](const Assignment& start) {
      Assignment after_refinement = RefineBySimulation(model, *work, start, o, s, nullptr);
      (void)ChooseRunAhead(*spec, model, *work, o, s, &after_refinement);
      Assignment priced = start;
      (void)ChooseRunAhead(*spec, model, *work, o, s, &priced);
      priced = RefineBySimulation(model, *work, priced, o, s, nullptr);
      (void)ChooseRunAhead(*spec, model, *work, o, s, &priced);
      return std::make_pair(std::move(after_refinement), std::move(priced));
    };
    const auto [after_refinement, priced] = both_orders(planned.assignment);
    const size_t teacher = 0;
    ASSERT_EQ(work->sections[teacher].name, "teacher");
    // This build's teacher runs ahead; with every feature too where that
    // shortens the step (a CP teacher: run_ahead_cp).
    if (*support == '\0') {
      EXPECT_GE(priced.sections[teacher].run_ahead, 1) << support;
    }
    const SimulatedStep before = SimulateSectioned(model, *work, after_refinement, s);
    const SimulatedStep now = SimulateSectioned(model, *work, priced, s);
    ASSERT_TRUE(before.ok && now.ok) << before.error << now.error;
    // The same two searches from the plan with nested DP degrees only
    // (compile.cc plans both ways when the first plan's edge divides neither
    // way; the refinement then allows any degrees).
    PlannerOptions nested = o;
    nested.nested_dp_edges = true;
    const PlanOutcome planned_nested = PlanSections(model, *work, nested);
    ASSERT_TRUE(planned_nested.ok()) << planned_nested.failure.message;
    const auto [nested_after, nested_priced] = both_orders(planned_nested.assignment);
    const SimulatedStep nested_before = SimulateSectioned(model, *work, nested_after, s);
    const SimulatedStep nested_now = SimulateSectioned(model, *work, nested_priced, s);
    ASSERT_TRUE(nested_before.ok && nested_now.ok) << nested_before.error << nested_now.error;
    // maestro-compile keeps the shortest of the searches.
    CompileOptions options;
    options.grouping = Grouping::kSectioned;
    options.support = o.support;
    options.support_given = *support != '\0';
    auto compiled = Compile(*spec, options);
    ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
    const double shorter =
        std::min({before.step_seconds, now.step_seconds, nested_before.step_seconds, nested_now.step_seconds});
    EXPECT_NEAR(compiled->simulated.step_seconds, shorter, 1e-9 * shorter) << support;
  }
}

// specs/kd_32b_to_1_5b.toml on this build's runtime plans its teacher with
// CP > 1 (docs/run_ahead.md "Context parallel"): the planner sets run_ahead
// = 1 on it because that shortens the simulated step (ChooseRunAhead on the
// compiled assignment with the teacher's run-ahead off: the same choice,
// the step longer without it), the plan is not planner-only; a runtime
// without `run_ahead_cp` gets no run-ahead on that teacher, naming why.
TEST(RunAheadPlanner, AContextParallelTeacherRunsAheadWhereItShortensTheStep) {
  auto spec = ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/kd_32b_to_1_5b.toml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  CompileOptions options;
  options.grouping = Grouping::kSectioned;
  auto r = Compile(*spec, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const plan::Plan& p = r->plan;
  const auto i = static_cast<size_t>(p.section_index("teacher"));
  const auto& teacher = p.sections[i];
  ASSERT_GT(teacher.config.cp, 1) << "the test needs a CP teacher; the plan changed:\n" << r->report;
  EXPECT_EQ(teacher.run_ahead, 1) << r->explain;
  ASSERT_LT(i, r->assignment.sections.size());
  EXPECT_EQ(r->assignment.sections[i].planner_only, "") << r->report;

  auto [work, model, s] = fixtures::PlanningInputsOf(*spec);
  ASSERT_TRUE(work.ok());
  PlannerOptions o;
  Assignment off = r->assignment;
  off.sections[i].run_ahead = 0;
  const SimulatedStep without = SimulateSectioned(model, *work, off, s);
  Assignment chosen = off;
  const std::string log = ChooseRunAhead(*spec, model, *work, o, s, &chosen);
  EXPECT_EQ(chosen.sections[i].run_ahead, 1) << log;
  const SimulatedStep with = SimulateSectioned(model, *work, chosen, s);
  ASSERT_TRUE(without.ok && with.ok) << without.error << with.error;
  EXPECT_LT(with.step_seconds, without.step_seconds * (1 - kRefinementTolerance)) << log;
  EXPECT_NEAR(with.step_seconds, r->simulated.step_seconds, 1e-9 * with.step_seconds);

  // A runtime without run_ahead_cp: the same assignment gets none, and says why.
  o.support.run_ahead_context_parallel = false;
  Assignment refused = off;
  const std::string why = ChooseRunAhead(*spec, model, *work, o, s, &refused);
  EXPECT_EQ(refused.sections[i].run_ahead, 0) << why;
  EXPECT_NE(why.find(fmt::format("run-ahead with CP={}", teacher.config.cp)), std::string::npos) << why;
}

}  // namespace
}  // namespace maestro::compiler
