// SPDX-License-Identifier: Apache-2.0
// Resharding (issue #39 item 5, docs/datalayer.md "Sharded checkpoints"): a
// run checkpointed under one layout continues under another from the same
// run directory, at the exact next step, as if never interrupted. Each test
// is a chain: the run trains two steps under each layout in turn (stopped
// after them with a checkpoint, exit 85, as a preemption does), and then
//   - every start resumed at the step after the last one (no step lost,
//     none run twice), and every sample of the whole run was consumed once;
//   - every step's loss equals the one-process reference's within 1e-5
//     relative (the uninterrupted run: a layout changes only the order of
//     floating-point sums, runtime/README.md);
//   - the final student weights equal the reference's within
//     kReshardWeightBound: its moments came back too.
// Layouts of the tiny KD's student (the teacher frozen on one rank): TP 2 ->
// 1, DP 1 -> 2 (the teacher's fan-out changes), ZeRO-1 DP 4 -> 2, ZeRO-1 off
// -> PP 2, PP 2 -> CP 2, CP 2 -> DP 3 (an edge that splits its rows unevenly);
// a MoE student EP 2 -> 1 -> EP 2 under ZeRO-1; fused -> sectioned -> fused;
// a teacher running ahead keeps its spool while the student goes DP 2 -> TP 2;
// a run directory whose last checkpoint is a format-1 .mckpt resumes.
// Each chain takes 40-70 s on the 2-core CI machine: 5-8 launches of 2-6
// ranks, each starting libtorch (runtime/README.md says why that dominates).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "datalayer/checkpoint_store.h"
#include "datalayer/sample_index.h"
#include "runtime/checkpoint_slices.h"
#include "runtime/section_runner.h"
#include "tests/runtime/checkpoint_weights.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using runtime_testing::SectionDegrees;

constexpr int64_t kStepsPerLayout = 2;

// How far the final weights may sit from the reference's, relative. Measured
// on this 2-core machine (libtorch 1.13 CPU, fp32): the fused chain 1.5e-4
// (blocks.1.mlp.down_proj.weight), and the same 6 steps stopped and resumed
// in one fused DP 2 layout, no resharding, 8.6e-5: AdamW divides by each
// gradient's own magnitude, so reduction orders that differ in the last bit
// move near-zero-gradient weights by up to ~lr x steps (checkpoint_weights.h
// kAdamWWeightRelativeBound is that bound for shorter runs). A load that
// drops the moments (measured by loading none): 3.9e-2 (fused), 5.1e-2
// (MoE), 1.1e-1 (dense), and losses off by up to 2% (the 1e-5 check fails
// too).
constexpr double kReshardWeightBound = 1e-3;

// The tiny KD: the teacher (from the seed) on one rank, the student at
// `student` with ZeRO stage `zero_stage` and, when `ep` > 0, made a MoE of
// 4 experts on EP `ep`; `steps` steps in all.
plan::Plan KdLayout(const SectionDegrees& student, int zero_stage, int64_t steps, int ep = 0) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_kd.toml", compiler::Grouping::kSectioned);
  plan::SectionPlan* s = runtime_testing::ShapeTinyKd(p, student, {1, 1, 1, 1, 8}, zero_stage);
  if (s != nullptr) {
    s->optimizer.weight_decay = 0.1;
    runtime_testing::UseKdLoss(*s);
    if (ep > 0) {
      runtime_testing::UseTinyMoe(s->model, /*qwen2_shape=*/false, 0.05);
      s->config.ep = ep;
    }
  }
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// The tiny KD compiled fused (one section, teacher and student inside it),
// on TP `tp` x DP `dp` ranks.
plan::Plan FusedKd(int tp, int dp, int64_t steps) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_kd.toml", compiler::Grouping::kFused);
  plan::SectionPlan* f = runtime_testing::TheFusedSection(p);
  if (f == nullptr) return p;
  runtime_testing::SetDegrees(*f, {tp, 1, 1, dp, 4});
  for (auto& c : f->components) {
    c.init_from.clear();
    if (c.name == "student") {
      c.optimizer.weight_decay = 0.1;
      runtime_testing::UseKdLoss(c);
    }
  }
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// Fresh(name): <test-tmp>/runtime_reshard/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_reshard"};

// The chain the header describes, over `layouts` (each a plan of the whole
// run's steps), in `dir`; `component` is the trained model compared.
// `outputs` (when given) gets each start's output.
void ExpectChainEqualsTheReference(const std::string& what, const std::vector<plan::Plan>& layouts,
                                   const std::string& component, std::vector<std::string>* outputs = nullptr) {
  const std::string dir = Fresh(what);
  const std::string run = dir + "/run";
  const int64_t steps = layouts.front().data.steps;
  ASSERT_EQ(steps, kStepsPerLayout * static_cast<int64_t>(layouts.size()));
  for (size_t i = 0; i < layouts.size(); ++i) {
    const std::string plan_path = runtime_testing::WritePlan(layouts[i], dir + "/layout" + std::to_string(i));
    const bool last = i + 1 == layouts.size();
    const auto result = runtime_testing::RunWorkers(
        layouts[i], plan_path, run,
        last ? std::vector<std::string>{}
             : std::vector<std::string>{"--stop-after-steps", std::to_string(kStepsPerLayout)});
    ASSERT_EQ(result.exit_code, last ? 0 : 85) << what << ": layout " << i << "\n" << result.output;
    if (outputs != nullptr) outputs->push_back(result.output);
    const auto losses = runtime_testing::Losses(run);
    ASSERT_EQ(static_cast<int64_t>(losses.size()), kStepsPerLayout * static_cast<int64_t>(i + 1))
        << what << ": layout " << i << " resumed at the step after the last checkpoint\n"
        << result.output;
    ASSERT_EQ(losses.rbegin()->first, kStepsPerLayout * static_cast<int64_t>(i + 1) - 1) << what;
  }
  const std::string reference_plan = runtime_testing::WritePlan(layouts.front(), dir + "/reference_plan");
  const auto reference = runtime_testing::RunReference(reference_plan, dir + "/reference");
  ASSERT_EQ(reference.exit_code, 0) << what << " (the reference)\n" << reference.output;
  runtime_testing::ExpectLossesNear(what, runtime_testing::Losses(run), runtime_testing::Losses(dir + "/reference"),
                                    1e-5);
  EXPECT_EQ(runtime_testing::ConsumedSamples(run, 1), steps * layouts.front().data.global_batch)
      << what << ": every sample consumed once over all starts";
  const auto trained = runtime_testing::WeightsOf(layouts.back(), component, run);
  const auto want = runtime_testing::WeightsOf(layouts.back(), component, dir + "/reference");
  ASSERT_FALSE(trained.empty());
  std::string where;
  EXPECT_LT(runtime_testing::LargestRelativeDifference(trained, want, &where), kReshardWeightBound)
      << what << ": " << where;
}

TEST(Reshard, DenseStudentAcrossTpDpZero1PpAndCpEqualsTheReference) {
  const int64_t steps = 7 * kStepsPerLayout;
  ExpectChainEqualsTheReference("dense",
                                {
                                    KdLayout({2, 1, 1, 1, 4}, 0, steps),  // TP 2
                                    KdLayout({1, 1, 1, 2, 4}, 0, steps),  // DP 2
                                    KdLayout({1, 1, 1, 4, 4}, 1, steps),  // ZeRO-1 DP 4
                                    KdLayout({1, 1, 1, 2, 4}, 1, steps),  // ZeRO-1 DP 2
                                    KdLayout({1, 2, 1, 1, 4}, 0, steps),  // PP 2
                                    KdLayout({1, 1, 2, 1, 4}, 0, steps),  // CP 2
                                    KdLayout({1, 1, 1, 3, 4}, 0, steps),  // DP 3
                                },
                                "student");
}

TEST(Reshard, MoeStudentAcrossExpertParallelismEqualsTheReference) {
  const int64_t steps = 3 * kStepsPerLayout;
  ExpectChainEqualsTheReference("moe",
                                {
                                    KdLayout({1, 1, 1, 2, 2}, 0, steps, 2),  // EP 2
                                    KdLayout({1, 1, 1, 1, 2}, 0, steps, 1),  // EP 1
                                    KdLayout({1, 1, 1, 2, 2}, 1, steps, 2),  // EP 2, ZeRO-1
                                },
                                "student");
}

TEST(Reshard, FusedToSectionedAndBackEqualsTheReference) {
  const int64_t steps = 3 * kStepsPerLayout;
  ExpectChainEqualsTheReference(
      "fused", {FusedKd(2, 1, steps), KdLayout({1, 1, 1, 2, 4}, 0, steps), FusedKd(1, 2, steps)}, "student");
}

// The teacher's spool survives the student's change of layout (issue #39
// item 5: "spooled teacher rows stay valid"). The teacher runs 2 batches
// ahead, so when the run stops under student DP 2 it has computed and
// spooled rows of the steps after the stop; resumed under student TP 2
// (the teacher where it was), it reads those rows back instead of computing
// them, and the run still equals the reference.
TEST(Reshard, KdTeacherKeepsItsSpoolAcrossTheStudentsChangeOfLayout) {
  const int64_t steps = 2 * kStepsPerLayout;
  std::vector<plan::Plan> layouts{KdLayout({1, 1, 1, 2, 4}, 0, steps), KdLayout({2, 1, 1, 1, 4}, 0, steps)};
  for (plan::Plan& p : layouts) p.sections[static_cast<size_t>(p.section_index("teacher"))].run_ahead = 2;
  std::vector<std::string> outputs;
  ExpectChainEqualsTheReference("kd_spool", layouts, "student", &outputs);
  ASSERT_EQ(outputs.size(), 2u);
  const int64_t hits = runtime_testing::LoggedNumber(outputs[1], "spool hits ");
  EXPECT_GE(hits, layouts[1].data.global_batch) << "the rows spooled ahead before the change are read back\n"
                                                << outputs[1];
}

// A resume under a spec whose model changed (the student's MLP narrower) is
// refused before training, naming the tensor and both shapes; the run's
// checkpoint is left as it was (a resume with the old spec still works).
TEST(Reshard, AChangedModelIsRefusedNamingTheTensorAndBothShapes) {
  const std::string dir = Fresh("changed");
  const std::string run = dir + "/run";
  plan::Plan before = KdLayout({1, 1, 1, 1, 4}, 0, 4);
  const auto first = runtime_testing::RunWorkers(before, runtime_testing::WritePlan(before, dir + "/before"), run,
                                                 {"--stop-after-steps", "2"});
  ASSERT_EQ(first.exit_code, 85) << first.output;
  plan::Plan after = before;
  after.sections[static_cast<size_t>(after.section_index("student"))].model.ffn_hidden /= 2;
  const auto refused = runtime_testing::RunWorkers(after, runtime_testing::WritePlan(after, dir + "/after"), run);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("the spec changed"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("student/blocks.0.mlp"), std::string::npos) << refused.output;
  EXPECT_EQ(runtime_testing::Losses(run).size(), 2u) << "nothing trained under the changed spec";
  const auto resumed = runtime_testing::RunWorkers(before, dir + "/before/plan.json", run);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(runtime_testing::Losses(run).size(), 4u);
}

// A run directory of an older Maestro (issue #39 item 6): its last
// committed checkpoint a format-1 `ckpt-<step>.mckpt` (each training
// section's whole model and its AdamW as torch archives, sent to every
// rank by rank 0). Made here from a format-2 run stopped after 2 steps: the
// student's state loaded into a runner of the same plan, saved whole
// (SaveModel, SaveOptimizer, what the format-1 writer stored), written as a
// .mckpt, the index pointed at it and the sharded directory removed. The
// resume continues from it at step 2 with every loss equal, bit for bit, to
// the uninterrupted run's (weights and moments back: a resume without the
// moments moves the losses, see kReshardWeightBound), and its next
// checkpoint is sharded.
TEST(Reshard, ARunDirectoryOfAnOlderMaestroResumesFromItsMckpt) {
  namespace fs = std::filesystem;
  const std::string dir = Fresh("format1");
  const std::string run = dir + "/run";
  const plan::Plan p = KdLayout({1, 1, 1, 1, 4}, 0, 4);
  const std::string plan_path = runtime_testing::WritePlan(p, dir + "/plan");
  const auto whole = runtime_testing::RunWorkers(p, plan_path, dir + "/whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto first = runtime_testing::RunWorkers(p, plan_path, run, {"--stop-after-steps", "2"});
  ASSERT_EQ(first.exit_code, 85) << first.output;
  {
    auto index = datalayer::SampleIndex::Open(run + "/index.sqlite");
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    auto commit = (*index)->LastCommit();
    ASSERT_TRUE(commit.ok() && commit->checkpoint_step == 1);
    auto sharded =
        datalayer::CheckpointStore::Open(run + "/checkpoints", 2).ValueOrDie()->Read(commit->checkpoint_file);
    ASSERT_TRUE(sharded.ok() && sharded->sharded()) << sharded.status().ToString();
    auto runner = runtime::SectionRunner::Create(p, p.section_index("student"), runtime::RunnerOptions{});
    ASSERT_TRUE(runner.ok()) << runner.status().ToString();
    runtime::CheckpointTensors source(*sharded);
    ASSERT_TRUE(runtime::LoadRankPieces(source, (*runner)->CheckpointedRunners(), {}).ok());
    datalayer::CheckpointData old;
    old.step = sharded->step;
    old.epoch = sharded->epoch;
    old.next_step = sharded->next_step;
    old.rng_states = sharded->rng_states;
    old.sections["student"] = {(*runner)->SaveModel().ValueOrDie(), (*runner)->SaveOptimizer().ValueOrDie()};
    fs::remove_all(run + "/checkpoints");
    auto file = datalayer::CheckpointStore::Open(run + "/checkpoints", 2).ValueOrDie()->Write(old);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    ASSERT_EQ(*file, datalayer::CheckpointStore::FileName(1));
    ASSERT_TRUE(
        (*index)->db().Exec(fmt::format("UPDATE checkpoints SET file = '{}' WHERE checkpoint_step = 1", *file)).ok());
  }
  const auto resumed = runtime_testing::RunWorkers(p, plan_path, run);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto want = runtime_testing::Losses(dir + "/whole");
  const auto got = runtime_testing::Losses(run);
  ASSERT_EQ(got.size(), 4u) << resumed.output;
  for (const auto& [step, loss] : want) EXPECT_EQ(loss, got.at(step)) << "step " << step;
  EXPECT_EQ(runtime_testing::ConsumedSamples(run, 1), 4 * p.data.global_batch) << "every sample consumed once";
  auto last = datalayer::SampleIndex::Open(run + "/index.sqlite").ValueOrDie()->LastCommit().ValueOrDie();
  EXPECT_EQ(last.checkpoint_step, 3);
  EXPECT_TRUE(fs::is_directory(run + "/checkpoints/" + last.checkpoint_file)) << "the next checkpoint is sharded";
}

}  // namespace
}  // namespace maestro
