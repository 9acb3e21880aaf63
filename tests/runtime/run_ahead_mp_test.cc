// SPDX-License-Identifier: Apache-2.0
// Run-ahead of a tensor- or pipeline-parallel frozen section
// (docs/run_ahead.md, runtime/run_ahead.h), labels mpi;runtime: the tiny KD
// with its teacher at TP 2, PP 2, TP 2 x PP 2 or PP 3 (the rank that sends
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
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "datalayer/checkpoint_store.h"
#include "datalayer/sample_index.h"
#include "plan/plan.h"
#include "plan/runtime_support.h"
#include "runtime/cost_model.h"
#include "runtime/run_ahead.h"
#include "runtime/step_batch.h"
#include "tests/fixtures/test_paths.h"
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
  plan::SectionPlan* student =
      runtime_testing::ShapeTinyKd(p, {1, layout.student_pp, 1, 1, 4}, {layout.tp, layout.pp, 1, 1, 4});
  for (auto& s : p.sections) s.run_ahead = &s == student ? 0 : run_ahead;
  if (student != nullptr) runtime_testing::UseKdLoss(*student);
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// Fresh(name): <test-tmp>/runtime_run_ahead_mp/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_run_ahead_mp"};

// A run of MpKdPlan(layout, steps, run_ahead): the plan written to
// <dir>/plan<run_ahead>, run under mpirun in <dir>/k<run_ahead>.
struct RunAheadRun {
  plan::Plan plan;
  std::string plan_path, run_dir;
  runtime_testing::RunResult result;
};
// Runs it; fatal unless it exits 0.
void RunAtRunAhead(const TeacherLayout& layout, int64_t steps, int run_ahead, const std::string& dir,
                   RunAheadRun* out) {
  out->plan = MpKdPlan(layout, steps, run_ahead);
  out->plan_path = runtime_testing::WritePlan(out->plan, fmt::format("{}/plan{}", dir, run_ahead));
  out->run_dir = fmt::format("{}/k{}", dir, run_ahead);
  out->result = RunWorkers(out->plan, out->plan_path, out->run_dir);
  ASSERT_EQ(out->result.exit_code, 0) << out->result.output;
}

// The reference of `plan_path` run in <dir>/reference (fatal unless it exits
// 0 with as many losses as `losses`): `losses` within 1e-5 of its.
void ExpectReferenceLosses(const std::string& what, const std::string& plan_path, const std::string& dir,
                           const std::map<int64_t, double>& losses) {
  const auto reference = RunReference(plan_path, dir + "/reference");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto r = Losses(dir + "/reference");
  ASSERT_EQ(r.size(), losses.size());
  runtime_testing::ExpectLossesNear(what, losses, r);
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
    RunAheadRun run;
    ASSERT_NO_FATAL_FAILURE(RunAtRunAhead(layout, kSteps, k, dir, &run));
    const plan::Plan& p = run.plan;
    const runtime_testing::RunResult& result = run.result;
    plan_path = run.plan_path;
    losses[k] = Losses(run.run_dir);
    last[k] = LastCheckpoint(run.run_dir);
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
    // Stage j lags the first by j micro-batches in every call that appends a
    // later batch (steps 0 .. kSteps - 3; 4 micro-batches per step, more
    // than PP - 1): the pipeline streams from one step into the next.
    for (int j = 0; layout.pp > 1 && j < layout.pp; ++j) {
      EXPECT_EQ(LoggedNumber(result.output, fmt::format("stage {}: carried ", j)), j * (kSteps - 2)) << result.output;
    }
  }
  ASSERT_EQ(static_cast<int64_t>(losses[0].size()), kSteps);
  EXPECT_EQ(losses[2], losses[0]);
  ASSERT_TRUE(last[2].sections.count("student") && last[0].sections.count("student"));
  EXPECT_TRUE(last[2].sections.at("student").model == last[0].sections.at("student").model);
  ExpectReferenceLosses(layout.name + " run_ahead 2", plan_path, dir, losses[2]);
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
    RunAheadRun run;
    ASSERT_NO_FATAL_FAILURE(RunAtRunAhead(layout, kSteps, k, dir, &run));
    plan_path = run.plan_path;
    losses[k] = Losses(run.run_dir);
    if (k == 1) {
      EXPECT_EQ(ParseRunAheadLine(run.result.output).steps_ahead, kSteps - 1) << run.result.output;
    }
  }
  ASSERT_EQ(static_cast<int64_t>(losses[0].size()), kSteps);
  EXPECT_EQ(losses[1], losses[0]);
  ExpectReferenceLosses("pp2_into_pp2 run_ahead 1", plan_path, dir, losses[1]);
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
  // Steps 0-2 and, ahead, 3-4 before the stop.
  ASSERT_NO_FATAL_FAILURE(
      runs = runtime_testing::ExpectRunAheadResumeComputesEachRowOnce(layout.name, p, dir, 3, 5 * p.data.global_batch));
  EXPECT_EQ(LoggedNumber(runs.whole.output, "computed "), kSteps * p.data.global_batch) << runs.whole.output;
  // Hits after the resume: steps 3 and 4 at their forwards, step 4 once more
  // when step 3 runs ahead (found in the spool, not computed), and step 5
  // (computed ahead during step 3).
  EXPECT_EQ(LoggedNumber(runs.second.output, "spool hits "), 4 * p.data.global_batch) << runs.second.output;
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

  // TP 2: TP rank 0 (the owner); with PP: stage 0, TP rank 0 (not the owner).
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
                                           TeacherLayout{"tp2pp2", 2, 2}, TeacherLayout{"pp3", 1, 3}),
                         [](const ::testing::TestParamInfo<TeacherLayout>& layout) { return layout.param.name; });

// CheckRunAheadRuns: a model-parallel section runs ahead only without an
// upstream section (its replica computes missing rows from the samples
// alone); at TP = PP = 1 the rule is as before. The error names the section.
TEST(RunAheadRowsToCompute, AModelParallelSectionWithAnUpstreamSectionIsRefused) {
  auto p = MpKdPlan(TeacherLayout{"tp2", 2, 1}, 2, 1);
  EXPECT_TRUE(plan::CheckRunAheadRuns(p).ok()) << plan::CheckRunAheadRuns(p).ToString();
  const plan::EdgePlan into_teacher = runtime_testing::StudentIntoTeacherEdge();
  p.edges.push_back(into_teacher);
  const Status refused = plan::CheckRunAheadRuns(p);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("section 'teacher'"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("upstream"), std::string::npos) << refused.ToString();
  auto single = MpKdPlan(TeacherLayout{"tp1", 1, 1}, 2, 1);
  single.edges.push_back(into_teacher);
  EXPECT_TRUE(plan::CheckRunAheadRuns(single).ok()) << plan::CheckRunAheadRuns(single).ToString();
}

// ---- The stream of a pipelined replica across steps (RunAhead, torch-free) --
// P stages' RunAhead objects driven as the executor drives them, one call per
// step each (stage 0 first: a stage needs only what earlier stages computed,
// so this order is one the concurrent run can take). A stage's compute or
// receive of a micro-batch is a message from the previous stage, which must
// have computed it in the same call (nothing in flight across steps), and a
// stage computes a micro-batch it did not receive earlier only after the
// previous stage did. After the call of step s, the last stage has computed
// every micro-batch of step s+1 (its forwards read them at once).
struct StreamCase {
  int stages = 2, run_ahead = 2;
};

class RunAheadStream : public ::testing::TestWithParam<StreamCase> {};

TEST_P(RunAheadStream, StagesStreamAcrossStepsWithoutFillAndEveryRowIsDue) {
  const StreamCase c = GetParam();
  constexpr int64_t kSteps = 7;
  auto p = MpKdPlan(TeacherLayout{"pp", 1, c.stages}, kSteps, c.run_ahead);
  const int teacher = p.section_index("teacher");
  auto& t = p.sections[static_cast<size_t>(teacher)];
  t.config.micro_batch = 2;  // 8 micro-batches of the 16 samples per step: more than P - 1
  const auto costs = runtime::RuntimeCostModel(p);
  const auto batch_of = [&](int64_t step) {
    runtime::StepBatch b;
    b.step = step;
    for (int64_t i = 0; i < p.data.global_batch; ++i) {
      scheduler::Sample x;
      x.id = static_cast<uint64_t>(step * p.data.global_batch + i);
      x.text_tokens = p.data.seq_len;
      b.samples.push_back(x);
      b.ids.push_back(static_cast<int64_t>(x.id));
    }
    return b;
  };
  std::vector<std::unique_ptr<runtime::RunAhead>> stages;
  for (int j = 0; j < c.stages; ++j)
    stages.push_back(std::make_unique<runtime::RunAhead>(p, teacher, 0, costs, j, c.stages));
  // computed[j][seq] = the step (call) in which stage j computed it; held[j]: received, not computed.
  std::vector<std::map<int64_t, int64_t>> computed(static_cast<size_t>(c.stages));
  std::vector<std::set<int64_t>> held(static_cast<size_t>(c.stages));
  std::map<int64_t, int64_t> step_of_seq;
  std::vector<int64_t> per_call(static_cast<size_t>(c.stages));
  std::vector<std::map<int64_t, int64_t>> place_in_call(static_cast<size_t>(c.stages));  // seq -> i-th computed
  int64_t micro_batches_per_step = 0;
  const auto steady = [&](int64_t step) { return c.run_ahead >= 2 && step >= 1 && step + c.run_ahead <= kSteps - 1; };
  const auto run_call = [&](int64_t step, bool flush) {
    std::vector<runtime::StepBatch> ahead;
    for (int64_t s = step + 1; s <= std::min(step + c.run_ahead, kSteps - 1); ++s) ahead.push_back(batch_of(s));
    for (int j = 0; j < c.stages; ++j) {
      const size_t sj = static_cast<size_t>(j);
      per_call[sj] = 0;
      place_in_call[sj].clear();
      const auto compute = [&](const runtime::AheadItem& item, bool received) -> Status {
        EXPECT_FALSE(computed[sj].count(item.seq)) << "stage " << j << " computes seq " << item.seq << " twice";
        EXPECT_EQ(received, held[sj].count(item.seq) == 1) << "stage " << j << " seq " << item.seq;
        if (j > 0 && !received) {
          const auto& prev = computed[sj - 1];
          EXPECT_TRUE(prev.count(item.seq) && prev.at(item.seq) == step)
              << "stage " << j << " receives seq " << item.seq << " that stage " << j - 1
              << " did not send in this call";
          // No fill in the steady state: the i-th micro-batch a stage
          // computes in a call is at most the previous stage's (i-1)-th, so
          // all stages compute at once (with a fill, stage j's first would
          // wait for stage j-1's first of the same call).
          if (steady(step) && !flush) {
            EXPECT_LT(place_in_call[sj - 1].at(item.seq), per_call[sj]) << "stage " << j << " step " << step;
          }
        }
        held[sj].erase(item.seq);
        place_in_call[sj][item.seq] = per_call[sj];
        computed[sj][item.seq] = step;
        step_of_seq[item.seq] = item.step;
        EXPECT_EQ(static_cast<int64_t>(item.positions.size()), static_cast<int64_t>(item.sample_ids.size()));
        ++per_call[sj];
        return Status::Ok();
      };
      const auto receive = [&](const runtime::AheadItem& item) -> Status {
        EXPECT_GT(j, 0);
        const auto& prev = computed[sj - 1];
        EXPECT_TRUE(prev.count(item.seq) && prev.at(item.seq) == step)
            << "stage " << j << " holds seq " << item.seq << " that stage " << j - 1 << " did not send in this call";
        EXPECT_TRUE(held[sj].insert(item.seq).second);
        return Status::Ok();
      };
      const Status st = flush ? stages[sj]->Flush(compute, nullptr)
                              : stages[sj]->ComputeAhead(step, ahead, compute, nullptr, nullptr, receive);
      ASSERT_TRUE(st.ok()) << st.ToString();
      EXPECT_LE(stages[sj]->received_micro_batches(), 1) << "a stage holds at most one input across steps";
    }
    if (flush) return;
    // Every micro-batch of step+1 is computed on the last stage.
    for (const auto& [seq, s] : step_of_seq) {
      if (s == step + 1) {
        EXPECT_TRUE(computed.back().count(seq)) << "step " << s << " seq " << seq << " not due";
      }
    }
    if (step == 0) {
      for (const auto& entry : step_of_seq) micro_batches_per_step += entry.second == 1 ? 1 : 0;
    }
  };
  for (int64_t step = 0; step < kSteps; ++step) {
    ASSERT_NO_FATAL_FAILURE(run_call(step, false));
    // The steady state (every call appends a batch and carries the stream on):
    // each stage computes one step's micro-batches per call.
    for (int j = 0; steady(step) && j < c.stages; ++j) {
      EXPECT_EQ(per_call[static_cast<size_t>(j)], micro_batches_per_step) << "stage " << j << " step " << step;
    }
    if (c.run_ahead == 1) {
      for (int j = 0; j < c.stages; ++j) EXPECT_EQ(stages[static_cast<size_t>(j)]->pending_micro_batches(), 0);
    }
  }
  ASSERT_NO_FATAL_FAILURE(run_call(kSteps - 1, true));
  ASSERT_GT(micro_batches_per_step, c.stages - 1);
  for (int j = 0; j < c.stages; ++j) {
    EXPECT_EQ(static_cast<int64_t>(computed[static_cast<size_t>(j)].size()), (kSteps - 1) * micro_batches_per_step)
        << "stage " << j << " computed every micro-batch of steps 1.." << kSteps - 1 << " once";
  }
}

// A stop in the middle: Flush on every stage computes what the stream
// carries, so the spool holds every row appended.
TEST(RunAheadStreamFlush, FlushComputesWhatTheStagesCarry) {
  auto p = MpKdPlan(TeacherLayout{"pp3", 1, 3}, 6, 2);
  const int teacher = p.section_index("teacher");
  const auto costs = runtime::RuntimeCostModel(p);
  std::vector<runtime::StepBatch> ahead;
  for (int64_t s = 1; s <= 2; ++s) {
    runtime::StepBatch b;
    b.step = s;
    for (int64_t i = 0; i < p.data.global_batch; ++i) {
      scheduler::Sample x;
      x.id = static_cast<uint64_t>(s * 100 + i);
      x.text_tokens = p.data.seq_len;
      b.samples.push_back(x);
      b.ids.push_back(static_cast<int64_t>(x.id));
    }
    ahead.push_back(b);
  }
  runtime::RunAhead last(p, teacher, 0, costs, 2, 3);
  int64_t n = 0;
  const auto compute = [&](const runtime::AheadItem&, bool) {
    ++n;
    return Status::Ok();
  };
  const auto receive = [&](const runtime::AheadItem&) { return Status::Ok(); };
  ASSERT_TRUE(last.ComputeAhead(0, ahead, compute, nullptr, nullptr, receive).ok());
  const int64_t before_flush = n;
  EXPECT_EQ(last.pending_micro_batches(), 2) << "the last of 3 stages lags by 2 micro-batches";
  EXPECT_EQ(last.received_micro_batches(), 1) << "and holds the one stage 1 computed last";
  ASSERT_TRUE(last.Flush(compute, nullptr).ok());
  EXPECT_EQ(last.pending_micro_batches(), 0);
  EXPECT_EQ(n, before_flush + 2) << "the 2 it carried";
}

INSTANTIATE_TEST_SUITE_P(StagesAndRunAhead, RunAheadStream,
                         ::testing::Values(StreamCase{2, 1}, StreamCase{2, 2}, StreamCase{3, 2}, StreamCase{4, 3},
                                           StreamCase{3, 1}),
                         [](const ::testing::TestParamInfo<StreamCase>& c) {
                           return fmt::format("pp{}_ahead{}", c.param.stages, c.param.run_ahead);
                         });

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
