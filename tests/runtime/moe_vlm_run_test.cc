// SPDX-License-Identifier: Apache-2.0
// Issue #17's composition test: specs/tiny_moe_vlm.toml, a ViT at CP 2 and a
// Mixtral-shape MoE LLM at EP 2 x PP 2 (x DP 2), compiled and trained by
// `maestro run` on 6 CPU ranks under mpirun, equals the same spec trained in
// one process (`maestro run --reference`) at every step within 1e-5
// relative; the compiled plan really has the three features.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;
using launcher::testing::RunResult;

const std::string kSpec = std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_moe_vlm.toml";

TEST(TinyMoeVlm, VitCp2AndMoeLlmEp2xPp2TrainUnderMaestroRunAndEqualTheReference) {
  const fs::path root = fs::path(MAESTRO_TEST_TMP) / "tiny_moe_vlm";
  fs::remove_all(root);
  fs::create_directories(root);
  const std::string steps = "3";

  const RunResult run = runtime_testing::RunMaestro(
      {"run", kSpec, "-o", (root / "sectioned").string(), "--ranks", "6", "--steps", steps, "--no-eval", "--fresh"}, {},
      600);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const RunResult reference = runtime_testing::RunMaestro(
      {"run", kSpec, "-o", (root / "reference").string(), "--reference", "--steps", steps, "--no-eval", "--fresh"}, {},
      600);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;

  auto plan = plan::LoadPlan((root / "sectioned" / "plan.json").string());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto& vit = plan->sections.at(static_cast<size_t>(plan->section_index("vit")));
  const auto& llm = plan->sections.at(static_cast<size_t>(plan->section_index("llm")));
  EXPECT_EQ(vit.config.cp, 2);
  EXPECT_EQ(llm.config.ep, 2);
  EXPECT_EQ(llm.config.pp, 2);
  EXPECT_EQ(llm.config.dp, 2);
  EXPECT_GT(llm.model.experts, 0);

  const auto got = runtime_testing::Losses((root / "sectioned" / "run").string());
  const auto want = runtime_testing::Losses((root / "reference" / "run").string());
  ASSERT_EQ(got.size(), 3u) << run.output;
  ASSERT_EQ(want.size(), got.size()) << reference.output;
  for (const auto& [step, loss] : got) {
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_NEAR(loss, want.at(step), 1e-5 * std::abs(want.at(step))) << "step " << step;
  }
  EXPECT_LT(got.rbegin()->second, got.begin()->second) << "the loss moves";
}

}  // namespace
}  // namespace maestro
