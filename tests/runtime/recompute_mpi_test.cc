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
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using plan::RecomputeGranularity;
using runtime_testing::Losses;

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
    runtime_testing::SetDegrees(s, {c.tp, 1, 1, c.dp, c.micro_batch});
    s.config.set_recompute_granularity(c.recompute);
  }
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// Every component in one fused section at TP `tp` x DP `dp`.
plan::Plan Fused(const std::string& spec, int tp, int dp, RecomputeGranularity g, int64_t steps) {
  plan::Plan p = runtime_testing::CompiledExamplePlan(spec, compiler::Grouping::kFused);
  plan::SectionPlan* f = runtime_testing::TheFusedSection(p);
  if (f == nullptr) return p;
  runtime_testing::SetDegrees(*f, {tp, 1, 1, dp, 4});
  f->config.set_recompute_granularity(g);
  for (auto& c : f->components) c.init_from.clear();
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

// Fresh(name): <test-tmp>/runtime_recompute/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_recompute"};

// Runs each plan of `runs` under mpirun and the reference on the first plan
// without recomputation; every run's losses equal the reference's.
void ExpectRecomputedRunsEqualReference(const std::string& what, const std::vector<plan::Plan>& runs) {
  const std::string dir = Fresh(what);
  const std::string reference_plan = WritePlan(WithoutRecompute(runs.front()), dir + "/reference_plan");
  const auto reference = runtime_testing::RunReference(reference_plan, dir + "/reference");
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto want = Losses(dir + "/reference");
  ASSERT_EQ(static_cast<int64_t>(want.size()), runs.front().data.steps) << reference.output;
  for (size_t i = 0; i < runs.size(); ++i) {
    const std::string run_dir = dir + "/run" + std::to_string(i);
    const std::string path = WritePlan(runs[i], run_dir);
    const auto run = runtime_testing::RunWorkers(runs[i], path, run_dir + "/out");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto got = Losses(run_dir + "/out");
    ASSERT_EQ(got.size(), want.size()) << run.output;
    const std::string which = what + " run " + std::to_string(i);
    ASSERT_NO_FATAL_FAILURE(runtime_testing::ExpectLossesNear(which, got, want));
    runtime_testing::ExpectLossFalls(which, got);
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
