// SPDX-License-Identifier: Apache-2.0
// Activation recomputation in maestro-worker under mpirun (labels
// mpi;runtime): the tiny specs compiled with --grouping sectioned (and
// fused), pinned on this machine, train with recomputation and every step's
// loss equals the one-process reference's trained WITHOUT it within 1e-5
// relative (runtime/reference.h; the reference runs the same plan with
// recompute cleared):
//  - the KD student at TP 2 x DP 2 with ZeRO-1, full and selective (the TP
//    all-reduces of each block run again in backward, in the same order on
//    both TP ranks);
//  - the fused KD section (teacher + student in one process) at TP 2 x DP 2,
//    full;
//  - the VLM with the ViT at full and the LLM at selective (needs the
//    Fashion-MNIST demo images; skips without them).
// No torch here.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "plan/plan.h"
#include "tests/fixtures/demo_images.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;
using launcher::testing::MpirunArgs;
using launcher::testing::RunCaptured;
using plan::RecomputeGranularity;
using runtime_testing::Losses;

const std::string kWorker = std::string(MAESTRO_BIN_DIR) + "/maestro-worker";

// Section name -> (tp, dp, micro-batch, recompute).
struct Choice {
  int tp = 1, dp = 1, micro_batch = 4;
  RecomputeGranularity recompute = RecomputeGranularity::kNone;
};

plan::Plan Sectioned(const std::string& spec, const std::map<std::string, Choice>& choice, int64_t steps) {
  plan::Plan p = runtime_testing::CompiledExamplePlan(spec, compiler::Grouping::kSectioned);
  for (auto& s : p.sections) {
    const Choice& c = choice.at(s.name);
    s.init_from.clear();  // the spec's KD teacher comes from a trained run; here from the seed
    s.config.pp = s.config.cp = 1;
    s.config.tp = c.tp;
    s.config.dp = c.dp;
    s.config.micro_batch = c.micro_batch;
    s.config.set_recompute_granularity(c.recompute);
  }
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// Every component in one fused section at TP `tp` x DP `dp`.
plan::Plan Fused(const std::string& spec, int tp, int dp, RecomputeGranularity g, int64_t steps) {
  plan::Plan p = runtime_testing::CompiledExamplePlan(spec, compiler::Grouping::kFused);
  EXPECT_EQ(p.sections.size(), 1u);
  if (p.sections.empty()) return p;
  auto& f = p.sections[0];
  f.config.pp = f.config.cp = 1;
  f.config.tp = tp;
  f.config.dp = dp;
  f.config.micro_batch = 4;
  f.config.set_recompute_granularity(g);
  for (auto& c : f.components) c.init_from.clear();
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// The same plan with no recomputation anywhere.
plan::Plan WithoutRecompute(plan::Plan p) {
  for (auto& s : p.sections) {
    s.config.set_recompute_granularity(RecomputeGranularity::kNone);
    for (auto& c : s.components) c.config.set_recompute_granularity(RecomputeGranularity::kNone);
  }
  return p;
}

using runtime_testing::WritePlan;

std::string Fresh(const std::string& name) {
  return runtime_testing::FreshDir(std::string(MAESTRO_TEST_TMP) + "/runtime_recompute", name);
}

// Runs each plan of `runs` under mpirun and the reference on the first plan
// without recomputation; every run's losses equal the reference's.
void ExpectRecomputedRunsEqualReference(const std::string& what, const std::vector<plan::Plan>& runs) {
  const std::string dir = Fresh(what);
  const std::string reference_plan = WritePlan(WithoutRecompute(runs.front()), dir + "/reference_plan");
  const auto reference =
      RunCaptured({kWorker, "--reference", "--no-eval", "--run-dir", dir + "/reference", reference_plan});
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto want = Losses(dir + "/reference");
  ASSERT_EQ(static_cast<int64_t>(want.size()), runs.front().data.steps) << reference.output;
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string run_dir = dir + "/run" + std::to_string(i);
    const std::string path = WritePlan(runs[i], run_dir);
    auto argv = MpirunArgs(runs[i].world_size());
    argv.insert(argv.end(), {kWorker, "--no-eval", "--no-progress", "--run-dir", run_dir + "/out", path});
    const auto run = RunCaptured(argv, {{"MAESTRO_COMM_TIMEOUT_S", "60"}});
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto got = Losses(run_dir + "/out");
    ASSERT_EQ(got.size(), want.size()) << run.output;
    for (const auto& [step, loss] : got) {
      ASSERT_TRUE(want.count(step)) << what << " step " << step;
      EXPECT_TRUE(std::isfinite(loss));
      EXPECT_NEAR(loss, want.at(step), 1e-5 * std::abs(want.at(step))) << what << " run " << i << " step " << step;
    }
    EXPECT_LT(got.rbegin()->second, got.begin()->second) << what << ": the loss moves";
  }
}

TEST(RecomputeTrain, KdStudentTp2Dp2Zero1FullAndSelectiveEqualReference) {
  std::vector<plan::Plan> runs;
  for (auto g : {RecomputeGranularity::kFull, RecomputeGranularity::kSelective}) {
    runs.push_back(Sectioned("tiny_kd.toml", {{"teacher", {1, 1, 8}}, {"student", {2, 2, 4, g}}}, 4));
    auto& student = runs.back().sections[static_cast<size_t>(runs.back().section_index("student"))];
    EXPECT_EQ(student.config.zero_stage, 1) << "the compiled plan shards AdamW (ZeRO-1)";
    EXPECT_EQ(student.config.recompute_granularity(), g);
  }
  ExpectRecomputedRunsEqualReference("kd_tp2_dp2", runs);
}

TEST(RecomputeTrain, FusedKdTp2Dp2FullEqualsReference) {
  ExpectRecomputedRunsEqualReference("fused_kd_tp2_dp2", {Fused("tiny_kd.toml", 2, 2, RecomputeGranularity::kFull, 4)});
}

TEST(RecomputeTrain, VlmVitFullLlmSelectiveEqualsReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  ExpectRecomputedRunsEqualReference("vlm", {Sectioned("tiny_vlm.toml",
                                                       {{"vit", {1, 1, 8, RecomputeGranularity::kFull}},
                                                        {"llm", {1, 2, 4, RecomputeGranularity::kSelective}}},
                                                       4)});
}

}  // namespace
}  // namespace maestro
