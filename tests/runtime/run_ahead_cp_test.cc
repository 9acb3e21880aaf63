// SPDX-License-Identifier: Apache-2.0
// Run-ahead and the output spool of a context-parallel frozen section
// (docs/run_ahead.md "Context parallel", runtime/run_ahead.h), labels
// mpi;runtime: the tiny KD with its teacher at CP 2 and at TP 2 x CP 2
// running one batch ahead, under mpirun. TP = CP = 0 owns the spool and
// broadcasts which rows to compute over CP, then TP; a CP peer that
// computed other rows would fail the per-layer K/V all-gather (a size
// mismatch or a timeout), not pass.
//  (a) the student's losses equal the one-process reference's within 1e-5
//      relative; one spool per replica; the teacher computed every later
//      step ahead, each row once (the forwards read them back), and held at
//      most its bound of rows ahead;
//  (b) CP 2 stopped after step 2 and resumed: bit-identical to an
//      uninterrupted run; the rows computed ahead before the stop are read
//      back, not computed again (over both starts each row is computed
//      once); every sample is consumed exactly once.
// Plus CheckRunAheadRuns: a CP section with an upstream section, and an EP
// one, stay refused by name.
// No torch headers here: plans come from the compiler, runs are processes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "datalayer/checkpoint_store.h"
#include "plan/plan.h"
#include "plan/runtime_support.h"
#include "runtime/run_ahead.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using runtime_testing::LastCheckpoint;
using runtime_testing::LoggedNumber;
using runtime_testing::Losses;
using runtime_testing::ParseRunAheadLine;
using runtime_testing::RunAheadLine;
using runtime_testing::RunWorkers;

// The teacher's context (and tensor) parallelism.
struct TeacherLayout {
  std::string name;
  int tp = 1, cp = 2;
};
void PrintTo(const TeacherLayout& layout, std::ostream* os) {
  *os << layout.name;
}

// specs/tiny_kd.toml on this machine (seq_len 64: 2 * cp divides it): the
// teacher (from the seed) at `layout`, running `run_ahead` batches ahead;
// the student TP = CP = DP = 1 with the KD loss; micro-batches of 4 (4 per
// step).
plan::Plan CpKdPlan(const TeacherLayout& layout, int64_t steps, int run_ahead) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_kd.toml", compiler::Grouping::kSectioned);
  plan::SectionPlan* student = runtime_testing::ShapeTinyKd(p, {1, 1, 1, 1, 4}, {layout.tp, 1, layout.cp, 1, 4});
  for (auto& s : p.sections) s.run_ahead = &s == student ? 0 : run_ahead;
  if (student != nullptr) runtime_testing::UseKdLoss(*student);
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// Fresh(name): <test-tmp>/runtime_run_ahead_cp/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_run_ahead_cp"};

class RunAheadContextParallel : public ::testing::TestWithParam<TeacherLayout> {};

// (a) Run-ahead 1 equals the reference within 1e-5; every row computed once.
TEST_P(RunAheadContextParallel, EqualsTheReferenceAndComputesEachRowOnce) {
  constexpr int64_t kSteps = 3;
  const TeacherLayout& layout = GetParam();
  const std::string dir = Fresh("equal_" + layout.name);
  const auto p = CpKdPlan(layout, kSteps, 1);
  const std::string plan_path = runtime_testing::WritePlan(p, dir);
  const auto result = RunWorkers(p, plan_path, dir + "/run");
  ASSERT_EQ(result.exit_code, 0) << result.output;

  int spool_lines = 0;
  const int64_t hits = LoggedNumber(result.output, "spool hits ", &spool_lines);
  const int64_t computed = LoggedNumber(result.output, "computed ");
  EXPECT_EQ(spool_lines, 1) << "one rank of the teacher's replica (TP = CP = 0) owns the spool\n" << result.output;
  const RunAheadLine line = ParseRunAheadLine(result.output);
  EXPECT_EQ(line.steps_ahead, kSteps - 1) << result.output;
  EXPECT_EQ(computed, kSteps * p.data.global_batch)
      << "every row computed once: the forwards read back the rows computed ahead\n"
      << result.output;
  EXPECT_EQ(hits, (kSteps - 1) * p.data.global_batch) << "steps 1-2 read back\n" << result.output;
  EXPECT_EQ(line.bound, p.data.global_batch) << result.output;
  EXPECT_EQ(line.most_rows, p.data.global_batch) << result.output;

  const auto reference = runtime_testing::RunReference(plan_path, dir + "/reference");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto mine = Losses(dir + "/run");
  const auto r = Losses(dir + "/reference");
  ASSERT_EQ(static_cast<int64_t>(mine.size()), kSteps);
  ASSERT_EQ(r.size(), mine.size());
  for (const auto& [step, loss] : mine) EXPECT_NEAR(loss, r.at(step), 1e-5 * std::abs(r.at(step))) << step;
}

INSTANTIATE_TEST_SUITE_P(TeacherCp2AndTp2Cp2, RunAheadContextParallel,
                         ::testing::Values(TeacherLayout{"cp2", 1, 2}, TeacherLayout{"tp2cp2", 2, 2}),
                         [](const ::testing::TestParamInfo<TeacherLayout>& layout) { return layout.param.name; });

// (b) Stopped after step 1 (exit 85) with the CP 2 teacher one batch ahead
// and resumed: the rows of step 2, computed before the stop, are read back
// on the owner and its CP peer skips the same forwards.
TEST(RunAheadContextParallelResume, StopAndResumeReusesTheSpooledRowsBitIdentically) {
  constexpr int64_t kSteps = 4;
  const auto p = CpKdPlan(TeacherLayout{"cp2", 1, 2}, kSteps, 1);
  const std::string dir = Fresh("resume_cp2");
  const std::string plan_path = runtime_testing::WritePlan(p, dir);
  const auto whole = RunWorkers(p, plan_path, dir + "/whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto first = RunWorkers(p, plan_path, dir + "/split", {"--stop-after-steps", "2"});
  ASSERT_EQ(first.exit_code, 85) << first.output;
  const auto second = RunWorkers(p, plan_path, dir + "/split");
  ASSERT_EQ(second.exit_code, 0) << second.output;

  const auto a = Losses(dir + "/whole");
  ASSERT_EQ(static_cast<int64_t>(a.size()), kSteps);
  EXPECT_EQ(a, Losses(dir + "/split"));
  const auto x = LastCheckpoint(dir + "/whole");
  const auto y = LastCheckpoint(dir + "/split");
  ASSERT_TRUE(x.sections.count("student") && y.sections.count("student"));
  EXPECT_TRUE(x.sections.at("student").model == y.sections.at("student").model);

  const int64_t computed_whole = LoggedNumber(whole.output, "computed ");
  const int64_t computed_first = LoggedNumber(first.output, "computed ");
  const int64_t computed_second = LoggedNumber(second.output, "computed ");
  EXPECT_EQ(computed_whole, kSteps * p.data.global_batch) << whole.output;
  EXPECT_EQ(computed_first, 3 * p.data.global_batch) << "steps 0-1 and, ahead, 2\n" << first.output;
  EXPECT_EQ(computed_first + computed_second, computed_whole)
      << "the rows computed ahead before the stop are not computed again\n"
      << first.output << second.output;
  // Hits after the resume: step 2 at its forwards and step 3 (computed
  // ahead during step 2).
  EXPECT_EQ(LoggedNumber(second.output, "spool hits "), 2 * p.data.global_batch) << second.output;
  runtime_testing::ExpectWholeAndSplitConsumed(dir, kSteps, kSteps * p.data.global_batch);
}

// CheckRunAheadRuns: a CP teacher without upstream sections runs ahead (with
// TP too); with an upstream section it is refused (its replica computes
// missing rows from the samples alone), and so is EP, each naming the
// section and the fix.
TEST(RunAheadContextParallelRules, UpstreamSectionsAndExpertParallelismStayRefused) {
  auto p = CpKdPlan(TeacherLayout{"tp2cp2", 2, 2}, 2, 1);
  EXPECT_TRUE(plan::CheckRunAheadRuns(p).ok()) << plan::CheckRunAheadRuns(p).ToString();
  auto upstream = p;
  upstream.edges.push_back(runtime_testing::StudentIntoTeacherEdge());
  const Status refused = plan::CheckRunAheadRuns(upstream);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("section 'teacher'"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("CP = 2"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("upstream"), std::string::npos) << refused.ToString();
  auto ep = p;
  ep.sections[static_cast<size_t>(ep.section_index("teacher"))].config.ep = 2;
  const Status ep_refused = plan::CheckRunAheadRuns(ep);
  ASSERT_FALSE(ep_refused.ok());
  EXPECT_NE(ep_refused.message().find("EP = 2"), std::string::npos) << ep_refused.ToString();
  EXPECT_NE(ep_refused.message().find("run_ahead = 0"), std::string::npos) << ep_refused.ToString();
}

}  // namespace
}  // namespace maestro
