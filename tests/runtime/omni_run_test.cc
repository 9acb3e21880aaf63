// SPDX-License-Identifier: Apache-2.0
// Issue #42's omni workload as a user runs it: scripts/make_example_workload.py
// writes a CLIP tower and a Qwen2 LLM (HF folders), a manifest whose samples
// carry images and audio clips (16 kHz and 44.1 kHz WAV, 8 kHz FLAC) and
// omni.toml (the tower, a Whisper-style audio encoder, a projector each and
// the LLM). `maestro run` trains it sectioned (every section on its own
// ranks) and fused (one section on every rank), and each equals `maestro run
// --reference` (one process) at every step within 1e-5 relative: the clips
// are decoded, resampled, featurised, encoded and spliced at the audio
// placeholders the same way on every path. A rank killed like kill -9 in the
// middle of the sectioned run (MAESTRO_CRASH_AT, at a step commit) resumes
// to the uninterrupted run's losses with every sample consumed once.
//
// Each test makes the workload (python3-torch, python3-pil,
// python3-soundfile; skips without them) and runs three jobs of 6 steps on
// 5 CPU ranks: 10 s and 17 s on two cores.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "datalayer/crash_env.h"
#include "plan/plan.h"
#include "tests/fixtures/python3.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using launcher::testing::RunResult;
using runtime_testing::Losses;
using runtime_testing::ReadText;

constexpr int kSteps = 6;

class OmniRun : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fixtures::PerTestDir("omni_run");
    workload_ = root_ + "/example";
    const Status made =
        fixtures::RunPython3WithTorch(std::string(MAESTRO_SOURCE_DIR) + "/scripts/make_example_workload.py",
                                      {workload_, "--teacher-steps", "4"}, root_ + "/make_example.log");
    if (made.code() == StatusCode::kUnavailable) GTEST_SKIP() << made.ToString();
    ASSERT_TRUE(made.ok()) << made.ToString();
  }
  // `maestro run` of omni.toml (`spec`, in the workload's folder) into
  // `out` with `extra` flags, for kSteps steps from scratch; `env` for the
  // job. Its result (exit code and output).
  RunResult Run(const std::string& spec, const std::string& out, const std::vector<std::string>& extra,
                const std::vector<std::pair<std::string, std::string>>& env = {}, bool fresh = true) {
    std::vector<std::string> args{"run",     workload_ + "/" + spec, "-o",       out,
                                  "--steps", std::to_string(kSteps), "--no-eval"};
    if (fresh) args.push_back("--fresh");
    args.insert(args.end(), extra.begin(), extra.end());
    auto with_timeout = env;
    with_timeout.emplace_back("MAESTRO_COMM_TIMEOUT_S", "60");
    return runtime_testing::RunMaestro(args, with_timeout, 600);
  }
  // Every step of `got` equals `want`'s within 1e-5 relative.
  static void ExpectSameLosses(const std::map<int64_t, double>& got, const std::map<int64_t, double>& want,
                               const std::string& what) {
    ASSERT_EQ(got.size(), static_cast<size_t>(kSteps)) << what;
    ASSERT_EQ(want.size(), got.size()) << what;
    for (const auto& [step, loss] : got) {
      EXPECT_TRUE(std::isfinite(loss)) << what << " step " << step;
      EXPECT_NEAR(loss, want.at(step), 1e-5 * std::abs(want.at(step))) << what << " step " << step;
    }
  }
  std::string root_, workload_;
};

TEST_F(OmniRun, SectionedAndFusedEqualTheReference) {
  const RunResult reference = Run("omni.toml", root_ + "/reference", {"--reference"});
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto want = Losses(root_ + "/reference/run");

  const RunResult sectioned = Run("omni.toml", root_ + "/sectioned", {"--ranks", "5", "--grouping", "sectioned"});
  ASSERT_EQ(sectioned.exit_code, 0) << sectioned.output;
  auto plan = plan::LoadPlan(root_ + "/sectioned/plan.json");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->sections.size(), 5u) << "every section on ranks of its own";
  const auto& audio = plan->sections.at(static_cast<size_t>(plan->section_index("audio")));
  EXPECT_EQ(audio.model.kind, plan::ModelKind::kAudioEncoder);
  EXPECT_EQ(audio.activation, "audio");
  ExpectSameLosses(Losses(root_ + "/sectioned/run"), want, "sectioned");

  const RunResult fused = Run("omni.toml", root_ + "/fused", {"--ranks", "5", "--grouping", "fused"});
  ASSERT_EQ(fused.exit_code, 0) << fused.output;
  auto fused_plan = plan::LoadPlan(root_ + "/fused/plan.json");
  ASSERT_TRUE(fused_plan.ok()) << fused_plan.status().ToString();
  ASSERT_EQ(fused_plan->sections.size(), 1u);
  EXPECT_EQ(fused_plan->sections[0].components.size(), 5u);
  ExpectSameLosses(Losses(root_ + "/fused/run"), want, "fused");

  // The index holds each sample's audio placeholders beside its image ones.
  const std::string index_manifest = ReadText(root_ + "/sectioned/run/manifest.jsonl");
  EXPECT_NE(index_manifest.find("\"audio\": 50"), std::string::npos) << index_manifest.substr(0, 600);
  EXPECT_NE(index_manifest.find("\"image\": 17"), std::string::npos) << index_manifest.substr(0, 600);
}

TEST_F(OmniRun, ARankKilledAtAStepCommitResumesExactlyOnce) {
  // omni.toml with a checkpoint every 2 steps.
  std::string spec = ReadText(workload_ + "/omni.toml");
  const size_t job = spec.find("[job]\n");
  ASSERT_NE(job, std::string::npos);
  spec.insert(job + 6, "checkpoint_every = 2\n");
  std::ofstream(workload_ + "/omni_ckpt.toml") << spec;

  const std::vector<std::string> flags{"--ranks", "5", "--grouping", "sectioned"};
  const RunResult whole = Run("omni_ckpt.toml", root_ + "/whole", flags);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  // Rank 0 (the index's writer, which commits the steps in groups, one per
  // checkpoint here) dies at its 2nd step commit, in the middle of the run.
  const RunResult crashed =
      Run("omni_ckpt.toml", root_ + "/crashed", flags, {{datalayer::kCrashAtVariable, "0:2:step.commit"}});
  ASSERT_NE(crashed.exit_code, 0) << "the crash point was not reached:\n" << crashed.output;
  const RunResult resumed = Run("omni_ckpt.toml", root_ + "/crashed", flags, {}, /*fresh=*/false);
  ASSERT_EQ(resumed.exit_code, 0) << "crashed:\n" << crashed.output << "\nresumed:\n" << resumed.output;
  ExpectSameLosses(Losses(root_ + "/crashed/run"), Losses(root_ + "/whole/run"), "resumed");
  auto plan = plan::LoadPlan(root_ + "/whole/plan.json");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(runtime_testing::ConsumedSamples(root_ + "/crashed/run", 1), kSteps * plan->data.global_batch)
      << "every sample consumed exactly once";
}

}  // namespace
}  // namespace maestro
