// SPDX-License-Identifier: Apache-2.0
// The KD teacher row forms end to end (plan/teacher_rows.h; labels
// mpi;runtime): the tiny KD under mpirun, its frozen teacher sending top-K,
// sampled or hidden rows through its spool over two epochs of a small corpus
// (epoch 1 reads epoch 0's rows back from the spool, the reference computes
// every row again):
//  (a) top-K rows (bf16 values) and sampled rows: the student's losses equal
//      the one-process reference's within 1e-5 relative at every step, the
//      epoch-1 rows served by the spool;
//  (b) hidden rows kept in a bf16 spool: every step within the bf16
//      tolerance of train_mpi_test (1e-3 relative) of the fp32 reference,
//      and not equal to it (the rounding reaches the student);
//  (c) the spool's committed bytes per sample equal the form's pricing
//      (plan::SpoolBytesPerPosition x seq_len), read from the spool's own
//      commit records;
//  (d) a fused plan's frozen teacher keeps a spool too (issue #41 item 3):
//      top-K rows over two epochs equal the reference within 1e-5, epoch 1
//      read from the spool;
//  (e) any rank reads any row (item 2): a fused plan at DP 2 reads every
//      epoch-1 row from the spool although the samples changed replicas;
//      a sectioned teacher at DP 2 for one epoch, then the run resumed with
//      the teacher at DP 1: every epoch-1 row is read from the DP-2 files;
//  (f) without reuse (the job's every-epoch alternatives: the plan's
//      spool_reuse false, or `--no-spool-reuse`): a sectioned teacher
//      computes every row of every epoch (no spool hit), a fused plan's
//      teacher keeps no spool; the losses still equal the reference's;
//  (g) the offline pass (the job's "offline" alternative: plan.
//      offline_spool_pass): a fused plan at DP 2 runs its teacher alone over
//      the corpus first, each row once; training never runs the teacher
//      (every row of both epochs read back) and equals the reference; a
//      rank killed (SIGKILL) in the pass right after a commit: the job
//      fails, and the run again computes only the rows not committed, then
//      trains to the reference's losses.
// No torch headers here: plans come from the compiler, runs are processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "compiler/compile.h"
#include "datalayer/spool_records.h"
#include "plan/plan.h"
#include "plan/teacher_rows.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using runtime_testing::LoggedNumber;
using runtime_testing::Losses;

// Fresh(name): <test-tmp>/runtime_kd_rows/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_kd_rows"};

// The counting corpus packs into 104 samples of 64 tokens: an epoch is 4
// steps of a global batch of 32 (32, 32, 32, 8).
constexpr int64_t kSamplesPerEpoch = 104, kStepsPerEpoch = 4;

// specs/tiny_kd.toml on this machine over the counting corpus: the teacher
// (from the seed, TP = CP = DP = 1, micro-batches of 8, no run-ahead) sends `tensor` rows
// to the student (DP 1, micro-batches of 4, the KD loss with `loss_keys`
// with `top_k` and `draws`), global batch 32, one epoch and 3 steps of the next.
plan::Plan RowsPlan(const std::string& dir, const std::string& tensor, int top_k, int draws) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_kd.toml", compiler::Grouping::kSectioned);
  plan::SectionPlan* student = runtime_testing::ShapeTinyKd(p, {1, 1, 1, 1, 4}, {1, 1, 1, 1, 8});
  if (student == nullptr) return p;
  runtime_testing::UseKdLoss(*student);
  // No run-ahead: each row is then read or computed exactly where its step
  // needs it, and the counts below are exact.
  for (auto& s : p.sections) s.run_ahead = 0;
  student->loss.top_k = top_k;
  student->loss.draws = draws;
  for (auto& e : p.edges) e.tensor = tensor;
  p.data.corpus = runtime_testing::WriteCountingCorpus(dir, 0);
  p.data.eos_id = 300;
  p.data.global_batch = 32;
  runtime_testing::PlaceOnThisMachine(p, kStepsPerEpoch + 3);
  return p;
}

// The teacher's spool under `run_dir`: committed bytes / committed rows over
// all its files (one per writer and epoch), from their commit records
// (table spools: committed_values in the spool's elements of `element_bytes`).
double SpooledBytesPerRow(const std::string& run_dir, int64_t element_bytes) {
  int64_t values = 0, rows = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(run_dir + "/spool")) {
    if (entry.path().extension() != ".sqlite") continue;
    auto extent = datalayer::ReadCommittedExtent(entry.path().string());
    EXPECT_TRUE(extent.ok()) << extent.status().ToString();
    if (!extent.ok()) return 0;
    values += extent->values;
    rows += extent->rows;
  }
  EXPECT_GT(rows, 0) << "no spool rows under " << run_dir;
  return rows > 0 ? static_cast<double>(values * element_bytes) / static_cast<double>(rows) : 0;
}

struct Form {
  std::string name, tensor;
  int top_k = 0, draws = 0;
};
void PrintTo(const Form& f, std::ostream* os) {
  *os << f.name;
}

class KdRowsRun : public ::testing::TestWithParam<Form> {};

// (a) and (c) for top-K and sampled rows.
TEST_P(KdRowsRun, SpooledRowsEqualTheReferenceAndCostWhatTheyArePriced) {
  const Form& form = GetParam();
  const std::string dir = Fresh(form.name);
  plan::Plan p = RowsPlan(dir, form.tensor, form.top_k, form.draws);
  p.spool_dtype = "bf16";
  const auto runs = runtime_testing::ExpectRunEqualsReference(form.name, p, dir, "sectioned", {});
  ASSERT_EQ(runs.run.exit_code, 0) << runs.run.output;
  // Epoch 1 (steps 4..6 of 32 samples) reads what epoch 0 spooled.
  EXPECT_EQ(LoggedNumber(runs.run.output, "spool hits "), 3 * p.data.global_batch) << runs.run.output;
  EXPECT_EQ(LoggedNumber(runs.run.output, "computed "), kSamplesPerEpoch) << runs.run.output;
  const auto sent = plan::TeacherRowsOf(p, 0);
  ASSERT_TRUE(sent.has_value());
  const double priced =
      static_cast<double>(p.data.seq_len * plan::SpoolBytesPerPosition(sent->form, 192, sent->loss, p.spool_dtype));
  EXPECT_DOUBLE_EQ(SpooledBytesPerRow(dir + "/sectioned", 1), priced);
}

INSTANTIATE_TEST_SUITE_P(Forms, KdRowsRun,
                         ::testing::Values(Form{"topk", plan::kTeacherTopKTensor, 8, 0},
                                           Form{"sampled", plan::kTeacherSampledTensor, 0, 16}),
                         [](const auto& param_info) { return param_info.param.name; });

// The tiny KD fused (TP = CP = PP = 1) at DP `dp`, micro-batches of 4, over
// the counting corpus in `dir` (global batch 32), one epoch and
// `later_steps` of the next; top-K rows (K = top_k) when top_k > 0, else
// hidden rows.
plan::Plan FusedRowsPlan(const std::string& dir, int dp, int top_k, int64_t later_steps) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_kd.toml", compiler::Grouping::kFused);
  plan::SectionPlan* fused = runtime_testing::TheFusedSection(p);
  if (fused == nullptr) return p;
  runtime_testing::SetDegrees(*fused, {1, 1, 1, dp, 4});
  for (auto& c : fused->components) {
    c.init_from.clear();
    if (c.name == "student") {
      runtime_testing::UseKdLoss(c);
      c.loss.top_k = top_k;
    }
  }
  if (top_k > 0) {
    for (auto& e : fused->component_edges) e.tensor = plan::kTeacherTopKTensor;
  }
  p.data.corpus = runtime_testing::WriteCountingCorpus(dir, 0);
  p.data.eos_id = 300;
  p.data.global_batch = 32;
  runtime_testing::PlaceOnThisMachine(p, kStepsPerEpoch + later_steps);
  return p;
}

// FusedRowsPlan's hidden rows at TP 2 (one replica) in fp32.
plan::Plan FusedTp2RowsPlan(const std::string& dir) {
  plan::Plan p = FusedRowsPlan(dir, 1, 0, 3);
  plan::SectionPlan* fused = runtime_testing::TheFusedSection(p);
  if (fused == nullptr) return p;
  runtime_testing::SetDegrees(*fused, {2, 1, 1, 1, 4});
  runtime_testing::PlaceOnThisMachine(p, kStepsPerEpoch + 3);
  p.spool_dtype = "f32";
  return p;
}

// The fused teacher's spool line of a TP rank ("dp 0: ", "dp 0 tp 1: ") in
// `output`: {hits, computed}; {-1, -1} when absent.
std::pair<int64_t, int64_t> TeacherSpoolCounts(const std::string& output, const std::string& rank) {
  const std::string label = rank + "component 'teacher': spool hits ";
  const auto at = output.find(label);
  if (at == std::string::npos) return {-1, -1};
  return {std::strtoll(output.c_str() + at + label.size(), nullptr, 10),
          std::strtoll(output.c_str() + output.find("computed ", at) + 9, nullptr, 10)};
}

// (d) The tiny KD fused (TP = CP = PP = 1, one replica): the teacher
// component reads its epoch-1 rows from its spool.
TEST(KdRowsRun, AFusedTeacherSpoolsItsRowsAndReadsThemInTheNextEpoch) {
  const std::string dir = Fresh("fused_topk");
  plan::Plan p = FusedRowsPlan(dir, 1, 8, 3);
  ASSERT_NE(runtime_testing::TheFusedSection(p), nullptr);
  p.spool_dtype = "bf16";
  const auto runs = runtime_testing::ExpectRunEqualsReference("fused_topk", p, dir, "fused", {});
  ASSERT_EQ(runs.run.exit_code, 0) << runs.run.output;
  int lines = 0;
  const int64_t hits = LoggedNumber(runs.run.output, "component 'teacher': spool hits ", &lines);
  EXPECT_EQ(lines, 1) << runs.run.output;
  EXPECT_EQ(hits, 3 * p.data.global_batch) << runs.run.output;
  EXPECT_GT(SpooledBytesPerRow(dir + "/fused", 1), 0.0);
}

// (d) at TP 2: the fused teacher is a TP shard on both ranks; TP rank 0
// writes the spool, its peer reads the same files, and both compute the
// rows either lacks together. Epoch 0 computes every row once (one log line:
// the replica's), epoch 1 reads all of them on both ranks, and the run
// equals the one-process reference (fp32 rows: the spool changes nothing).
TEST(KdRowsRun, AFusedTeacherAtTp2SpoolsOnceAndBothTpRanksReadItsRows) {
  const std::string dir = Fresh("fused_tp2");
  const plan::Plan p = FusedTp2RowsPlan(dir);
  ASSERT_TRUE(plan::KeepsSpool(plan::ExpandFusedSections(p), 0)) << "the teacher component keeps a spool at TP 2";
  const auto runs = runtime_testing::ExpectRunEqualsReference("fused_tp2", p, dir, "fused", {});
  ASSERT_EQ(runs.run.exit_code, 0) << runs.run.output;
  // Each TP rank's line: epoch 1 read back on both, every row computed
  // once in epoch 0 (on both: they forward together).
  for (const std::string rank : {"dp 0: ", "dp 0 tp 1: "}) {
    const auto [hits, computed] = TeacherSpoolCounts(runs.run.output, rank);
    EXPECT_EQ(hits, 3 * p.data.global_batch) << rank << "\n" << runs.run.output;
    EXPECT_EQ(computed, kSamplesPerEpoch) << rank << "\n" << runs.run.output;
  }
  // Only TP rank 0 wrote: one file (epoch 0's; epoch 1 computed nothing).
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir + "/fused/spool")) {
    files += entry.path().extension() == ".h5" ? 1 : 0;
  }
  EXPECT_EQ(files, 1);
  EXPECT_EQ(SpooledBytesPerRow(dir + "/fused", 4), static_cast<double>(p.data.seq_len * 192 * 4));
}

// (d) sectioned, the teacher at TP 2 without run-ahead: its owner (TP rank
// 0) spools, the replica agrees on the rows to compute before each step
// (every row of epoch 0 once), and epoch 1 reads every row back.
TEST(KdRowsRun, ATensorParallelTeacherWithoutRunAheadSpoolsAndReadsItsRows) {
  const std::string dir = Fresh("sectioned_tp2");
  plan::Plan p = RowsPlan(dir, plan::kTeacherHiddenTensor, 0, 0);
  runtime_testing::ShapeTinyKd(p, {1, 1, 1, 1, 4}, {2, 1, 1, 1, 8});
  runtime_testing::UseKdLoss(p.sections[1]);
  for (auto& s : p.sections) s.run_ahead = 0;
  runtime_testing::PlaceOnThisMachine(p, kStepsPerEpoch + 3);
  p.spool_dtype = "f32";
  ASSERT_EQ(p.sections[0].config.tp, 2);
  ASSERT_TRUE(plan::KeepsSpool(p, 0));
  const auto runs = runtime_testing::ExpectRunEqualsReference("sectioned_tp2", p, dir, "sectioned", {});
  ASSERT_EQ(runs.run.exit_code, 0) << runs.run.output;
  int lines = 0;
  EXPECT_EQ(LoggedNumber(runs.run.output, "spool hits ", &lines), 3 * p.data.global_batch) << runs.run.output;
  EXPECT_EQ(lines, 1) << "the owner's spool only\n" << runs.run.output;
  EXPECT_EQ(LoggedNumber(runs.run.output, "computed "), kSamplesPerEpoch) << runs.run.output;
}

// (e) A fused plan at DP 2: the samples of epoch 1 land on other replicas
// than in epoch 0, and each replica reads the rows the other wrote.
TEST(KdRowsRun, EveryReplicaReadsEveryRowWhoeverWroteIt) {
  const std::string dir = Fresh("fused_dp2");
  const plan::Plan p = FusedRowsPlan(dir, 2, 0, 2);
  ASSERT_NE(p.sections.size(), 0u);
  const auto runs = runtime_testing::ExpectRunEqualsReference("fused_dp2", p, dir, "fused", {});
  ASSERT_EQ(runs.run.exit_code, 0) << runs.run.output;
  int64_t hits = 0, computed = 0;
  for (const std::string replica : {"dp 0", "dp 1"}) {
    const std::string label = replica + ": component 'teacher': spool hits ";
    const auto at = runs.run.output.find(label);
    ASSERT_NE(at, std::string::npos) << runs.run.output;
    hits += std::strtoll(runs.run.output.c_str() + at + label.size(), nullptr, 10);
    const auto c = runs.run.output.find("computed ", at);
    computed += std::strtoll(runs.run.output.c_str() + c + 9, nullptr, 10);
  }
  EXPECT_EQ(hits, 2 * p.data.global_batch) << "every epoch-1 row read back\n" << runs.run.output;
  EXPECT_EQ(computed, kSamplesPerEpoch) << "each row computed once\n" << runs.run.output;
}

// (e) A resume under another layout: the teacher at DP 2 for epoch 0, then
// at DP 1; every row of epoch 1 comes from the DP-2 writers' files (left
// unsealed by the first run's end, recovered at the second's start).
TEST(KdRowsRun, AResumeUnderAnotherLayoutReadsEveryCommittedRow) {
  const std::string dir = Fresh("relayout");
  plan::Plan two = RowsPlan(dir, plan::kTeacherHiddenTensor, 0, 0);
  runtime_testing::ShapeTinyKd(two, {1, 1, 1, 1, 4}, {1, 1, 1, 2, 8});
  runtime_testing::UseKdLoss(two.sections[1]);
  runtime_testing::PlaceOnThisMachine(two, kStepsPerEpoch + 3);  // the same schedule as the second start's
  const std::string run_dir = dir + "/run";
  const auto first = runtime_testing::RunWorkers(two, runtime_testing::WritePlan(two, dir + "/dp2"), run_dir,
                                                 {"--stop-after-steps", std::to_string(kStepsPerEpoch)});
  EXPECT_EQ(first.exit_code, 85) << "stopped after epoch 0 (requeue)\n" << first.output;
  ASSERT_EQ(Losses(run_dir).size(), static_cast<size_t>(kStepsPerEpoch)) << first.output;
  plan::Plan one = RowsPlan(dir, plan::kTeacherHiddenTensor, 0, 0);  // teacher DP 1
  one.data.steps = kStepsPerEpoch + 3;
  const std::string one_path = runtime_testing::WritePlan(one, dir + "/dp1");
  const auto second = runtime_testing::RunWorkers(one, one_path, run_dir);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(LoggedNumber(second.output, "spool hits "), 3 * one.data.global_batch) << second.output;
  EXPECT_EQ(LoggedNumber(second.output, "computed "), 0) << "no row computed again\n" << second.output;
  const auto reference = runtime_testing::RunReference(one_path, dir + "/reference");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto a = Losses(run_dir), b = Losses(dir + "/reference");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [step, loss] : a) EXPECT_NEAR(loss, b.at(step), 1e-5 * std::abs(loss)) << "step " << step;
}

// Runs `p` under mpirun with `flags` in `dir`/`name` and the reference in
// `dir`/reference; both exit 0 and every step's loss agrees within 1e-5.
// Returns the run's output.
std::string RunAgainstReference(const plan::Plan& p, const std::string& dir, const std::string& name,
                                const std::vector<std::string>& flags) {
  const std::string plan_path = runtime_testing::WritePlan(p, dir + "/" + name + "-plan");
  const auto run = runtime_testing::RunWorkers(p, plan_path, dir + "/" + name, flags);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const auto reference = runtime_testing::RunReference(plan_path, dir + "/" + name + "-reference");
  EXPECT_EQ(reference.exit_code, 0) << reference.output;
  const auto a = Losses(dir + "/" + name), b = Losses(dir + "/" + name + "-reference");
  EXPECT_EQ(static_cast<int64_t>(a.size()), p.data.steps) << run.output;
  EXPECT_EQ(a.size(), b.size());
  for (const auto& [step, loss] : a) {
    if (b.count(step) > 0) {
      EXPECT_NEAR(loss, b.at(step), 1e-5 * std::abs(loss)) << name << " step " << step;
    }
  }
  return run.output;
}

// (f) Both switches, on a sectioned and on a fused plan.
TEST(KdRowsRun, WithoutReuseEveryEpochComputesItsRowsAgain) {
  const std::string dir = Fresh("no_reuse");
  plan::Plan sectioned = RowsPlan(dir, plan::kTeacherTopKTensor, 8, 0);
  const int64_t rows = kSamplesPerEpoch + 3 * sectioned.data.global_batch;  // every row of both epochs
  const std::string flagged = RunAgainstReference(sectioned, dir, "sectioned-flag", {"--no-spool-reuse"});
  EXPECT_EQ(LoggedNumber(flagged, "spool hits "), 0) << flagged;
  EXPECT_EQ(LoggedNumber(flagged, "computed "), rows) << flagged;
  plan::Plan unpriced = sectioned;
  unpriced.spool_reuse = false;  // the compiler chose an every-epoch alternative
  const std::string planned = RunAgainstReference(unpriced, dir, "sectioned-plan", {});
  EXPECT_EQ(LoggedNumber(planned, "spool hits "), 0) << planned;
  EXPECT_EQ(LoggedNumber(planned, "computed "), rows) << planned;

  const plan::Plan fused = FusedRowsPlan(dir, 1, 0, 3);
  ASSERT_NE(fused.sections.size(), 0u);
  const std::string output = RunAgainstReference(fused, dir, "fused-flag", {"--no-spool-reuse"});
  EXPECT_EQ(output.find("component 'teacher': spool"), std::string::npos) << "no spool\n" << output;
  int spool_files = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir + "/fused-flag/spool", ec)) {
    spool_files += entry.path().extension() == ".h5" ? 1 : 0;
  }
  EXPECT_EQ(spool_files, 0) << output;
}

// (f) A teacher at DP 2 running one batch ahead, over two epochs: at the
// last step of epoch 0 the next batch is epoch 1's, whose rows are either
// in other replicas' files not sealed yet (reuse) or never read back (no
// reuse). Run-ahead stops at the epoch's end, so each row is computed once
// with reuse and once an epoch without; both runs equal the reference.
TEST(KdRowsRun, RunAheadStopsAtTheEpochsEndSoNoRowIsComputedTwice) {
  const std::string dir = Fresh("run_ahead_epochs");
  plan::Plan p = RowsPlan(dir, plan::kTeacherHiddenTensor, 0, 0);
  runtime_testing::ShapeTinyKd(p, {1, 1, 1, 1, 4}, {1, 1, 1, 2, 8});
  runtime_testing::UseKdLoss(p.sections[1]);
  p.sections[0].run_ahead = 1;
  runtime_testing::PlaceOnThisMachine(p, kStepsPerEpoch + 3);
  ASSERT_EQ(p.sections[0].run_ahead, 1);
  const int64_t later_rows = 3 * p.data.global_batch;
  for (const bool reuse : {true, false}) {
    const std::string name = reuse ? "reuse" : "no-reuse";
    const std::string output = RunAgainstReference(
        p, dir, name, reuse ? std::vector<std::string>{} : std::vector<std::string>{"--no-spool-reuse"});
    int64_t computed = 0;
    for (const std::string replica : {"dp 0", "dp 1"}) {
      const std::string label = "section 'teacher' " + replica + ": spool hits ";
      const auto at = output.find(label);
      ASSERT_NE(at, std::string::npos) << label << "\n" << output;
      computed += std::strtoll(output.c_str() + output.find("computed ", at) + 9, nullptr, 10);
    }
    EXPECT_EQ(computed, reuse ? kSamplesPerEpoch : kSamplesPerEpoch + later_rows) << name << "\n" << output;
  }
}

// The tiny KD fused at DP 2 (top-K rows, micro-batches of 4), two epochs
// (4 + 3 steps), its teacher's rows filled by the offline pass.
plan::Plan OfflinePlan(const std::string& dir) {
  plan::Plan p = FusedRowsPlan(dir, 2, 8, 3);
  p.offline_spool_pass = true;
  return p;
}

// Sums over the replicas' "offline spool pass: R rows (C computed, S
// already spooled)" lines of `output`: {R, C, S}, and how many lines.
struct PassCounts {
  int64_t rows = 0, computed = 0, spooled = 0;
  int lines = 0;
};
PassCounts OfflinePassCounts(const std::string& output) {
  PassCounts c;
  const std::string label = "offline spool pass: ";
  for (size_t at = output.find(label); at != std::string::npos; at = output.find(label, at + 1)) {
    long long rows = 0, computed = 0, spooled = 0;
    if (std::sscanf(output.c_str() + at + label.size(), "%lld rows (%lld computed, %lld already spooled)", &rows,
                    &computed, &spooled) == 3) {
      c.rows += rows;
      c.computed += computed;
      c.spooled += spooled;
      ++c.lines;
    }
  }
  return c;
}

// (g) The pass, whole.
TEST(KdRowsRun, TheOfflinePassSpoolsEveryRowOnceAndTrainingNeverRunsTheTeacher) {
  const std::string dir = Fresh("offline");
  const plan::Plan p = OfflinePlan(dir);
  ASSERT_TRUE(p.offline_spool_pass);
  const std::string output = RunAgainstReference(p, dir, "fused", {});
  const PassCounts pass = OfflinePassCounts(output);
  EXPECT_EQ(pass.lines, 2) << output;
  EXPECT_EQ(pass.rows, kSamplesPerEpoch) << output;
  EXPECT_EQ(pass.computed, kSamplesPerEpoch) << output;
  // After the pass, every row of both epochs from the spool: the spools'
  // counts over the run are the pass's rows computed and every row read.
  int64_t hits = 0, computed = 0;
  for (const std::string replica : {"dp 0", "dp 1"}) {
    const std::string label = replica + ": component 'teacher': spool hits ";
    const auto at = output.find(label);
    ASSERT_NE(at, std::string::npos) << output;
    hits += std::strtoll(output.c_str() + at + label.size(), nullptr, 10);
    computed += std::strtoll(output.c_str() + output.find("computed ", at) + 9, nullptr, 10);
  }
  EXPECT_EQ(computed, kSamplesPerEpoch) << "each row computed once, in the pass\n" << output;
  EXPECT_EQ(hits, kSamplesPerEpoch + 3 * p.data.global_batch) << "training read every row\n" << output;
  EXPECT_NE(runtime_testing::ReadText(dir + "/fused/metrics.jsonl").find("\"offline_pass_s\""), std::string::npos);
}

// (g) The pass at TP 2: the TP peers fill the spool together (TP rank 0
// writes it), and training on both ranks reads every row from it.
TEST(KdRowsRun, TheOfflinePassAtTp2FillsTheSpoolOnceForBothTpRanks) {
  const std::string dir = Fresh("offline_tp2");
  plan::Plan p = FusedTp2RowsPlan(dir);
  p.offline_spool_pass = true;
  const std::string output = RunAgainstReference(p, dir, "fused", {});
  const PassCounts pass = OfflinePassCounts(output);
  EXPECT_EQ(pass.lines, 1) << "the replica's line\n" << output;
  EXPECT_EQ(pass.rows, kSamplesPerEpoch) << output;
  EXPECT_EQ(pass.computed, kSamplesPerEpoch) << output;
  for (const std::string rank : {"dp 0: ", "dp 0 tp 1: "}) {
    EXPECT_EQ(TeacherSpoolCounts(output, rank).first, kSamplesPerEpoch + 3 * p.data.global_batch)
        << "training read every row on " << rank << "\n"
        << output;
  }
}

// The reference of `plan_path` run in `reference_dir`; every one of `p`'s
// steps in `run_dir` has its loss within 1e-5 (after a stop and a run again).
void ExpectEveryStepEqualsTheReference(const plan::Plan& p, const std::string& plan_path, const std::string& run_dir,
                                       const std::string& reference_dir) {
  const auto reference = runtime_testing::RunReference(plan_path, reference_dir);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto a = Losses(run_dir), b = Losses(reference_dir);
  ASSERT_EQ(static_cast<int64_t>(a.size()), p.data.steps);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [step, loss] : a) EXPECT_NEAR(loss, b.at(step), 1e-5 * std::abs(loss)) << "step " << step;
}

// (g) A kill -9 in the pass, then the run again.
TEST(KdRowsRun, AKillInTheOfflinePassLosesOnlyRowsNotCommitted) {
  const std::string dir = Fresh("offline_kill");
  const plan::Plan p = OfflinePlan(dir);
  const std::string plan_path = runtime_testing::WritePlan(p, dir);
  const std::string run_dir = dir + "/run";
  runtime_testing::WorkerOptions killed;
  constexpr int kCommittedMicroBatches = 5;  // of rank 1's 13 (52 samples in micro-batches of 4)
  killed.extra_env = {{"MAESTRO_TEST_KILL_IN_OFFLINE_PASS", "1:" + std::to_string(kCommittedMicroBatches)}};
  const auto first = runtime_testing::RunWorkers(p, plan_path, run_dir, {}, killed);
  EXPECT_NE(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("killed after 5 micro-batches"), std::string::npos) << first.output;
  EXPECT_TRUE(Losses(run_dir).empty()) << "no step ran";
  const auto second = runtime_testing::RunWorkers(p, plan_path, run_dir);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const PassCounts pass = OfflinePassCounts(second.output);
  EXPECT_EQ(pass.rows, kSamplesPerEpoch) << second.output;
  EXPECT_GE(pass.spooled, kCommittedMicroBatches * 4) << "the killed rank's committed rows are kept\n" << second.output;
  EXPECT_EQ(pass.computed + pass.spooled, kSamplesPerEpoch) << second.output;
  ExpectEveryStepEqualsTheReference(p, plan_path, run_dir, dir + "/reference");
}

// (g) A preemption signal in the pass (SIGUSR1 through the real handler,
// sent by rank 1 to itself after its n-th micro-batch), then the run again:
// the start stops after the micro-batch in progress with every replica's
// rows committed and exits 85 (requeue) before any step; the second start's
// pass computes only the rest, and training equals the reference. n = 13 is
// rank 1's last micro-batch: the stop comes at the switch to training, and
// the second start computes no row.
void PreemptedInThePassAfter(int micro_batches) {
  const std::string dir = Fresh("offline_signal_" + std::to_string(micro_batches));
  const plan::Plan p = OfflinePlan(dir);
  const std::string plan_path = runtime_testing::WritePlan(p, dir);
  const std::string run_dir = dir + "/run";
  runtime_testing::WorkerOptions signalled;
  signalled.extra_env = {{"MAESTRO_TEST_SIGNAL_IN_OFFLINE_PASS", "1:" + std::to_string(micro_batches)}};
  const auto first = runtime_testing::RunWorkers(p, plan_path, run_dir, {}, signalled);
  EXPECT_EQ(first.exit_code, 85) << "stopped for a requeue\n" << first.output;
  EXPECT_NE(first.output.find("stopped during the offline spool pass"), std::string::npos) << first.output;
  EXPECT_EQ(OfflinePassCounts(first.output).lines, 0) << "the pass did not finish\n" << first.output;
  EXPECT_TRUE(Losses(run_dir).empty()) << "no step ran";
  const auto second = runtime_testing::RunWorkers(p, plan_path, run_dir);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const PassCounts pass = OfflinePassCounts(second.output);
  EXPECT_EQ(pass.rows, kSamplesPerEpoch) << second.output;
  // Both replicas stopped after the same micro-batch: its rows (4 a
  // micro-batch) kept on each, every other one computed once.
  EXPECT_EQ(pass.spooled, 2 * 4 * micro_batches) << second.output;
  EXPECT_EQ(pass.computed, kSamplesPerEpoch - pass.spooled) << second.output;
  ExpectEveryStepEqualsTheReference(p, plan_path, run_dir, dir + "/reference");
}

TEST(KdRowsRun, APreemptionInTheOfflinePassStopsAfterTheMicroBatchAndKeepsItsRows) {
  PreemptedInThePassAfter(5);
}

TEST(KdRowsRun, APreemptionAtTheEndOfTheOfflinePassLeavesNoRowToCompute) {
  PreemptedInThePassAfter(13);
}

// (b) and (c): hidden rows through a bf16 spool against the fp32 reference.
TEST(KdRowsRun, Bf16HiddenRowsTrackTheFp32ReferenceWithinTheBf16Tolerance) {
  const std::string dir = Fresh("hidden_bf16");
  plan::Plan p = RowsPlan(dir, plan::kTeacherHiddenTensor, 0, 0);
  p.spool_dtype = "bf16";
  const std::string plan_path = runtime_testing::WritePlan(p, dir);
  const auto run = runtime_testing::RunWorkers(p, plan_path, dir + "/sectioned");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  plan::Plan fp32 = p;
  fp32.spool_dtype = "f32";
  const std::string fp32_path = runtime_testing::WritePlan(fp32, dir + "/fp32");
  const auto reference = runtime_testing::RunReference(fp32_path, dir + "/reference");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto a = Losses(dir + "/sectioned");
  const auto b = Losses(dir + "/reference");
  ASSERT_EQ(static_cast<int64_t>(a.size()), p.data.steps);
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (const auto& [step, loss] : a) {
    const double rel = std::abs(loss - b.at(step)) / std::abs(b.at(step));
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-3) << "step " << step << ": bf16 rows " << loss << ", fp32 " << b.at(step);
  }
  EXPECT_GT(worst, 0.0) << "the bf16 spool rounds the rows the student reads";
  std::printf("bf16 hidden rows vs the fp32 reference: worst relative %.3g\n", worst);
  EXPECT_DOUBLE_EQ(SpooledBytesPerRow(dir + "/sectioned", 2), static_cast<double>(p.data.seq_len * 192 * 2));
}

}  // namespace
}  // namespace maestro
