// SPDX-License-Identifier: Apache-2.0
// The measured step of runtime/timeline.h from a trace: a run-ahead teacher's
// A ops (its micro-batches computed ahead) are its forwards and its F ops that
// only read rows back are not, so the costs fitted to the step are what the
// teacher computes. No torch, no ranks: the trace is written here.
#include "runtime/timeline.h"

#include <gtest/gtest.h>

#include "tests/runtime/local_plan.h"

namespace maestro::runtime {
namespace {

// An "X" event of section `pid` on rank `tid` in step 5, from `start` for
// `seconds`; `computed` >= 0 adds the trace's argument.
nlohmann::json Op(const std::string& name, int pid, int samples, double start, double seconds, int computed = -1) {
  nlohmann::json args = {{"step", 5}, {"samples", samples}};
  if (computed >= 0) args["computed"] = computed;
  return {{"name", name},         {"ph", "X"},   {"pid", pid}, {"tid", pid}, {"ts", start * 1e6},
          {"dur", seconds * 1e6}, {"args", args}};
}

TEST(Timeline, ARunAheadTeacherIsTimedByTheRowsItComputedAhead) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_kd.toml", compiler::Grouping::kSectioned);
  ASSERT_EQ(p.sections.size(), 2u);
  ASSERT_EQ(p.sections[0].mode, plan::SectionMode::kForward) << "the premise: section 0 is the frozen teacher";
  for (auto& s : p.sections) {
    s.config.tp = s.config.pp = s.config.cp = s.config.dp = 1;
    s.config.micro_batch = 8;
  }
  runtime_testing::PlaceOnThisMachine(p, 10);
  p.shared_cores = 0;  // each op's time alone is its duration
  scheduler::Schedule schedule;
  schedule.ranks = {scheduler::RankProgram{0, 0, {}, {}}, scheduler::RankProgram{1, 0, {}, {}}};

  nlohmann::json events = nlohmann::json::array();
  // The teacher reads this step's rows back (computed 0), then computes the
  // next step's two micro-batches ahead; the student trains two.
  events.push_back(Op("F0", 0, 8, 0.000, 0.0005, 0));
  events.push_back(Op("F1", 0, 8, 0.001, 0.0005, 0));
  events.push_back(Op("A0", 0, 8, 0.002, 0.100, 8));
  events.push_back(Op("A1", 0, 8, 0.102, 0.100, 8));
  events.push_back(Op("ahead", 0, 0, 0.202, 0.001));
  events.push_back(Op("F0", 1, 8, 0.002, 0.020));
  events.push_back(Op("B0", 1, 8, 0.022, 0.040));
  events.push_back(Op("F1", 1, 8, 0.062, 0.020));
  events.push_back(Op("B1", 1, 8, 0.082, 0.040));
  events.push_back(Op("O", 1, 0, 0.122, 0.005));

  const MeasuredStep measured = MeasureStep(p, schedule, 5, events);
  int teacher_forwards = 0;
  for (size_t i = 0; i < measured.timeline.ops.size(); ++i) {
    const auto& op = measured.timeline.ops[i];
    if (schedule.ranks[static_cast<size_t>(op.rank)].section != 0) continue;
    ++teacher_forwards;
    EXPECT_EQ(op.kind, scheduler::OpKind::kForward);
    EXPECT_EQ(op.samples, 8);
    EXPECT_NEAR(measured.alone_seconds[i], 0.100, 1e-9) << "an A op, not a read-back";
  }
  EXPECT_EQ(teacher_forwards, 2);
  // From the first op that computed (0.002) to the end of the last A op.
  EXPECT_NEAR(measured.timeline.step_seconds, 0.200, 1e-9);

  const plan::Plan fitted = FitCostsToStep(p, schedule, measured);
  const plan::MicroBatchCost& teacher = fitted.sections[0].cost;
  EXPECT_NEAR(teacher.fixed_seconds + 8 * teacher.seconds_per_sample, 0.100, 1e-9);  // read-backs: 0.0005
  const plan::MicroBatchCost& student = fitted.sections[1].cost;
  EXPECT_NEAR(student.fixed_seconds + 8 * student.seconds_per_sample, 0.060, 1e-9);
  EXPECT_NEAR(student.optimizer_seconds, 0.005, 1e-9);
}

}  // namespace
}  // namespace maestro::runtime
