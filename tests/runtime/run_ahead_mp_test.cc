// SPDX-License-Identifier: Apache-2.0
// Run-ahead of a tensor- or pipeline-parallel frozen section
// (docs/run_ahead.md, runtime/run_ahead.h), labels mpi;runtime: the tiny KD
// with its teacher at TP 2, PP 2 or TP 2 x PP 2 (the rank that sends
// downstream owns the spool and tells its TP peer and the other stage which
// rows to compute; a peer that computed other rows would fail the TP
// all-reduce or the stage's receive, not pass)
// running ahead, under mpirun:
//  (a) the student's losses and weights equal those of run-ahead 0 bit for
//      bit, the one-process reference's losses within 1e-5 relative; the
//      teacher computed every later step ahead, each row once, and held at
//      most its bound of rows ahead;
//  (b) stopped after a checkpoint and resumed: bit-identical to an
//      uninterrupted run, the rows computed ahead before the stop are read
//      back (over both starts each row is computed once), every sample is
//      consumed exactly once;
//  (c) one teacher rank killed (SIGKILL) mid-run: the job ends (no hang),
//      the resumed run reuses the spooled rows and ends as an uninterrupted
//      run; every sample consumed exactly once.
// Plus the wire form of the set of rows to compute (PackRowsToCompute).
// No torch headers here: plans come from the compiler, runs are processes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "datalayer/checkpoint_store.h"
#include "datalayer/sample_index.h"
#include "plan/plan.h"
#include "runtime/run_ahead.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using runtime_testing::ConsumedSamples;
using runtime_testing::LastCheckpoint;
using runtime_testing::LoggedNumber;
using runtime_testing::Losses;
using runtime_testing::ParseRunAheadLine;
using runtime_testing::RunAheadLine;
using runtime_testing::RunReference;
using runtime_testing::RunWorkers;

// The teacher's model parallelism.
struct TeacherLayout {
  std::string name;
  int tp = 1, pp = 1;
  int student_pp = 1;  // the student's stages (the teacher's rows relayed to its last stage)
};

// specs/tiny_kd.toml on this machine: the teacher (from the seed) at
// `layout`, running `run_ahead` batches ahead; the student TP = DP = 1 (PP
// as the layout says) with the KD loss; micro-batches of 4 (4 per step: a pipeline has work to
// stream).
plan::Plan MpKdPlan(const TeacherLayout& layout, int64_t steps, int run_ahead) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_kd.toml", compiler::Grouping::kSectioned);
  for (auto& s : p.sections) {
    const bool student = s.name == "student";
    s.init_from.clear();
    runtime_testing::SetDegrees(s, {student ? 1 : layout.tp, student ? layout.student_pp : layout.pp, 1, 1, 4});
    s.config.zero_stage = 0;
    s.run_ahead = student ? 0 : run_ahead;
    if (student) runtime_testing::UseKdLoss(s);
  }
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

std::string Fresh(const std::string& name) {
  return runtime_testing::FreshDir(std::string(MAESTRO_TEST_TMP) + "/runtime_run_ahead_mp", name);
}

class RunAheadModelParallel : public ::testing::TestWithParam<TeacherLayout> {};

// (a) Equal to run-ahead 0 bit for bit and to the reference within 1e-5.
TEST_P(RunAheadModelParallel, EqualsRunAheadZeroBitForBitAndTheReference) {
  constexpr int64_t kSteps = 4;
  const TeacherLayout& layout = GetParam();
  const std::string dir = Fresh("equal_" + layout.name);
  std::map<int, std::map<int64_t, double>> losses;
  std::map<int, datalayer::CheckpointData> last;
  std::string plan_path;
  for (int k : {0, 2}) {
    const auto p = MpKdPlan(layout, kSteps, k);
    plan_path = runtime_testing::WritePlan(p, fmt::format("{}/plan{}", dir, k));
    const std::string run = fmt::format("{}/k{}", dir, k);
    const auto result = RunWorkers(p, plan_path, run);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    losses[k] = Losses(run);
    last[k] = LastCheckpoint(run);
    const RunAheadLine line = ParseRunAheadLine(result.output);
    if (k == 0) {
      EXPECT_EQ(line.steps_ahead, -1) << "run_ahead 0 runs nothing ahead\n" << result.output;
      continue;
    }
    int spool_lines = 0;
    const int64_t hits = LoggedNumber(result.output, "spool hits ", &spool_lines);
    const int64_t computed = LoggedNumber(result.output, "computed ");
    EXPECT_EQ(spool_lines, 1) << "one rank of the teacher's replica owns the spool\n" << result.output;
    EXPECT_EQ(line.steps_ahead, kSteps - 1) << result.output;
    EXPECT_EQ(computed, kSteps * p.data.global_batch)
        << "every row computed once: the forwards read back the rows computed ahead\n"
        << result.output;
    EXPECT_EQ(hits, (kSteps - 1) * p.data.global_batch) << "steps 1-3 read back\n" << result.output;
    EXPECT_EQ(line.bound, k * p.data.global_batch) << result.output;
    EXPECT_EQ(line.most_rows, k * p.data.global_batch) << result.output;
  }
  ASSERT_EQ(static_cast<int64_t>(losses[0].size()), kSteps);
  EXPECT_EQ(losses[2], losses[0]);
  ASSERT_TRUE(last[2].sections.count("student") && last[0].sections.count("student"));
  EXPECT_TRUE(last[2].sections.at("student").model == last[0].sections.at("student").model);

  const auto reference = RunReference(plan_path, dir + "/reference");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto r = Losses(dir + "/reference");
  ASSERT_EQ(r.size(), losses[2].size());
  runtime_testing::ExpectLossesNear(layout.name + " run_ahead 2", losses[2], r);
}

// A PP 2 teacher running ahead into a PP 2 student (the rows arrive at the
// student's first stage and are relayed to its last, docs/pipeline.md):
// the losses of run-ahead 0 bit for bit, the reference's within 1e-5.
TEST(RunAheadModelParallelIntoAPipeline, Pp2TeacherIntoAPp2StudentEqualsRunAheadZeroAndTheReference) {
  constexpr int64_t kSteps = 3;
  const TeacherLayout layout{"pp2_into_pp2", 1, 2, 2};
  const std::string dir = Fresh("pp2_into_pp2");
  std::map<int, std::map<int64_t, double>> losses;
  std::string plan_path;
  for (int k : {0, 1}) {
    const auto p = MpKdPlan(layout, kSteps, k);
    plan_path = runtime_testing::WritePlan(p, fmt::format("{}/plan{}", dir, k));
    const std::string run = fmt::format("{}/k{}", dir, k);
    const auto result = RunWorkers(p, plan_path, run);
    ASSERT_EQ(result.exit_code, 0) << result.output;
    losses[k] = Losses(run);
    if (k == 1) {
      EXPECT_EQ(ParseRunAheadLine(result.output).steps_ahead, kSteps - 1) << result.output;
    }
  }
  ASSERT_EQ(static_cast<int64_t>(losses[0].size()), kSteps);
  EXPECT_EQ(losses[1], losses[0]);
  const auto reference = RunReference(plan_path, dir + "/reference");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto r = Losses(dir + "/reference");
  ASSERT_EQ(r.size(), losses[1].size());
  runtime_testing::ExpectLossesNear("pp2_into_pp2 run_ahead 1", losses[1], r);
}

// (b) Stopped after step 2 (exit 85) with the teacher 2 batches ahead and
// resumed: the rows of steps 3 and 4 computed before the stop are read back
// on the owner, and its peers skip the same forwards.
TEST_P(RunAheadModelParallel, StopAndResumeReusesTheRowsComputedAhead) {
  constexpr int64_t kSteps = 6;
  const TeacherLayout& layout = GetParam();
  const auto p = MpKdPlan(layout, kSteps, 2);
  const std::string dir = Fresh("resume_" + layout.name);
  runtime_testing::StopAndResumeRuns runs;
  ASSERT_NO_FATAL_FAILURE(runs = runtime_testing::ExpectStopAndResumeLossesEqual(layout.name, p, dir, 3));
  runtime_testing::ExpectSameSectionWeights(layout.name, dir + "/whole", dir + "/split", "student");

  const int64_t computed_whole = LoggedNumber(runs.whole.output, "computed ");
  const int64_t computed_first = LoggedNumber(runs.first.output, "computed ");
  const int64_t computed_second = LoggedNumber(runs.second.output, "computed ");
  EXPECT_EQ(computed_whole, kSteps * p.data.global_batch) << runs.whole.output;
  EXPECT_EQ(computed_first, 5 * p.data.global_batch) << "steps 0-2 and, ahead, 3-4\n" << runs.first.output;
  EXPECT_EQ(computed_first + computed_second, computed_whole) << runs.first.output << runs.second.output;
  // Hits after the resume: steps 3 and 4 at their forwards, step 4 once more
  // when step 3 runs ahead (found in the spool, not computed), and step 5
  // (computed ahead during step 3).
  EXPECT_EQ(LoggedNumber(runs.second.output, "spool hits "), 4 * p.data.global_batch) << runs.second.output;
  for (const std::string run : {"whole", "split"}) {
    EXPECT_EQ(ConsumedSamples(dir + "/" + run, kSteps), kSteps * p.data.global_batch) << run;
  }
}

// (c) kill -9 of one teacher rank (the spool's owner at TP 2, the first
// stage at PP 2) after step 4 is logged: the job ends; run again, it
// resumes from the last checkpoint, reads back the rows the owner had
// spooled, and ends as an uninterrupted run.
TEST_P(RunAheadModelParallel, ATeacherRankKilledMidRunResumesAndReusesTheSpool) {
  constexpr int64_t kSteps = 10;
  const TeacherLayout& layout = GetParam();
  auto p = MpKdPlan(layout, kSteps, 2);
  p.checkpoint_every = 2;
  const std::string dir = Fresh("kill9_" + layout.name);
  const std::string plan_path = runtime_testing::WritePlan(p, dir);
  const auto whole = RunWorkers(p, plan_path, dir + "/whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  // TP 2: TP rank 0 (the owner); PP 2 and TP 2 x PP 2: stage 0, TP rank 0 (not the owner).
  const int victim = plan::GlobalRankOf(p, p.section_index("teacher"), 0, 0, 0, 0);
  const auto killed = runtime_testing::RunAndKillRank(p, plan_path, dir + "/split", victim, 5,
                                                      std::chrono::seconds(180), std::chrono::milliseconds(20));
  ASSERT_GT(killed.pid, 0) << "the run made no progress\n" << killed.result.output;
  ASSERT_NE(killed.result.exit_code, 0) << "killed mid-run: " << killed.result.output;
  ASSERT_LT(Losses(dir + "/split").size(), static_cast<size_t>(kSteps)) << "killed before the end";

  const auto resumed = RunWorkers(p, plan_path, dir + "/split");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(Losses(dir + "/whole"), Losses(dir + "/split"));
  runtime_testing::ExpectSameSectionWeights(layout.name, dir + "/whole", dir + "/split", "student");

  // At least the rows of the steps past the last checkpoint (logged before
  // the kill) were read back, not computed again.
  const int64_t hits = LoggedNumber(resumed.output, "spool hits ");
  const int64_t computed = LoggedNumber(resumed.output, "computed ");
  ASSERT_GE(hits, 0) << resumed.output;
  EXPECT_GE(hits, p.data.global_batch) << "rows spooled before the kill are reused\n" << resumed.output;
  EXPECT_LT(computed, LoggedNumber(whole.output, "computed ")) << resumed.output;
  EXPECT_EQ(ConsumedSamples(dir + "/split", kSteps), kSteps * p.data.global_batch) << "every sample consumed once";
}

INSTANTIATE_TEST_SUITE_P(TeacherTp2AndPp2, RunAheadModelParallel,
                         ::testing::Values(TeacherLayout{"tp2", 2, 1}, TeacherLayout{"pp2", 1, 2},
                                           TeacherLayout{"tp2pp2", 2, 2}),
                         [](const ::testing::TestParamInfo<TeacherLayout>& layout) { return layout.param.name; });

// CheckRunAheadRuns: a model-parallel section runs ahead only without an
// upstream section (its replica computes missing rows from the samples
// alone); at TP = PP = 1 the rule is as before. The error names the section.
TEST(RunAheadRowsToCompute, AModelParallelSectionWithAnUpstreamSectionIsRefused) {
  auto p = MpKdPlan(TeacherLayout{"tp2", 2, 1}, 2, 1);
  EXPECT_TRUE(runtime::CheckRunAheadRuns(p).ok()) << runtime::CheckRunAheadRuns(p).ToString();
  plan::EdgePlan into_teacher;
  into_teacher.from = "student";
  into_teacher.to = "teacher";
  p.edges.push_back(into_teacher);
  const Status refused = runtime::CheckRunAheadRuns(p);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("section 'teacher'"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("upstream"), std::string::npos) << refused.ToString();
  auto single = MpKdPlan(TeacherLayout{"tp1", 1, 1}, 2, 1);
  single.edges.push_back(into_teacher);
  EXPECT_TRUE(runtime::CheckRunAheadRuns(single).ok()) << runtime::CheckRunAheadRuns(single).ToString();
}

// The wire form of the rows to compute round-trips, empty micro-batches
// included; a truncated or overlong message is an error, not a guess.
TEST(RunAheadRowsToCompute, PackAndUnpackRoundTripAndRejectMalformedMessages) {
  const std::vector<std::vector<int64_t>> positions{{0, 2, 3}, {}, {1}, {}};
  const auto wire = runtime::PackRowsToCompute(positions);
  auto back = runtime::UnpackRowsToCompute(wire);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, positions);
  auto empty = runtime::UnpackRowsToCompute(runtime::PackRowsToCompute({}));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  auto truncated = wire;
  truncated.pop_back();
  EXPECT_FALSE(runtime::UnpackRowsToCompute(truncated).ok());
  auto longer = wire;
  longer.push_back(7);
  EXPECT_FALSE(runtime::UnpackRowsToCompute(longer).ok());
}

}  // namespace
}  // namespace maestro
