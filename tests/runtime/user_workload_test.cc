// SPDX-License-Identifier: Apache-2.0
// Issue #15's end-to-end example, as a new user runs it (labels e2e;mpi;runtime):
//   scripts/make_example_workload.py OUT          Hugging Face models, corpora, images, manifest, specs
//   maestro run OUT/kd.toml -o kd                 teacher and student loaded from HF weights, KD on the corpus
//   maestro export kd --section student -o hf     the trained student in HF layout
//   check_exported_loss.py hf ...                 an independent python3-torch reader reproduces
//                                                 eval.json's held-out loss within 1e-5
//   maestro run OUT/vlm.toml -o vlm               CLIP tower + Qwen2 from HF weights on images: the loss falls
// No torch headers: everything is a process. Skips when no python3 has torch
// and PIL (the fixture script and the check need them).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "hf/checkpoint.h"
#include "tests/fixtures/python3.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;
using launcher::testing::RunResult;
using runtime_testing::Losses;
using runtime_testing::ReadText;

double Mean(const std::map<int64_t, double>& losses, bool first, size_t n) {
  std::vector<double> v;
  for (const auto& [step, loss] : losses) v.push_back(loss);
  n = std::min(n, v.size());
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += first ? v[i] : v[v.size() - 1 - i];
  return n > 0 ? sum / static_cast<double>(n) : NAN;
}

class UserWorkloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test: ctest runs the tests of this file as processes side by side.
    root_ = fixtures::PerTestDir("user_workload");
    workload_ = root_ + "/example";
    const Status made =
        fixtures::RunPython3WithTorch(std::string(MAESTRO_SOURCE_DIR) + "/scripts/make_example_workload.py",
                                      {workload_, "--teacher-steps", "60"}, root_ + "/make_example.log");
    if (made.code() == StatusCode::kUnavailable) GTEST_SKIP() << made.ToString();
    ASSERT_TRUE(made.ok()) << made.ToString();
  }
  // `maestro run` of the example's `spec` into `out` on `ranks` ranks:
  // fatal unless it exits 0 having logged at least 10 steps; its output in
  // *run, its losses in *losses.
  void Train(const std::string& spec, const std::string& out, const std::string& ranks, RunResult* run,
             std::map<int64_t, double>* losses) {
    *run = runtime_testing::RunMaestro({"run", workload_ + "/" + spec, "-o", out, "--ranks", ranks, "--fresh"},
                                       {{"MAESTRO_COMM_TIMEOUT_S", "60"}});
    ASSERT_EQ(run->exit_code, 0) << run->output;
    *losses = Losses(out + "/run");
    ASSERT_GE(losses->size(), 10u) << run->output;
  }
  std::string root_, workload_;
};

TEST_F(UserWorkloadTest, DistilFromHfWeightsExportTheStudentAndReproduceItsHeldOutLoss) {
  const std::string kd = root_ + "/kd";
  RunResult run;
  std::map<int64_t, double> losses;
  ASSERT_NO_FATAL_FAILURE(Train("kd.toml", kd, "2", &run, &losses));
  EXPECT_LT(Mean(losses, false, 5), Mean(losses, true, 5)) << run.output;
  const auto eval = nlohmann::json::parse(ReadText(kd + "/run/eval.json"), nullptr, false);
  ASSERT_TRUE(eval.is_object()) << run.output;
  EXPECT_EQ(eval.at("section"), "student");
  ASSERT_GT(eval.at("samples").get<int64_t>(), 0);

  const std::string exported = root_ + "/student-hf";
  const RunResult export_run = runtime_testing::RunMaestro({"export", kd, "--section", "student", "-o", exported}, {});
  ASSERT_EQ(export_run.exit_code, 0) << export_run.output;
  // The same tensors under the same names as the student we started from
  // (tied embeddings stay tied: no lm_head.weight).
  auto original = hf::HfCheckpoint::Open(workload_ + "/student");
  auto trained = hf::HfCheckpoint::Open(exported);
  ASSERT_TRUE(original.ok()) << original.status().ToString();
  ASSERT_TRUE(trained.ok()) << trained.status().ToString();
  EXPECT_EQ((*trained)->TensorNames(), (*original)->TensorNames());
  const auto config = nlohmann::json::parse((*trained)->config_json(), nullptr, false);
  ASSERT_TRUE(config.is_object() && config.contains("model_type") && config.contains("tie_word_embeddings"))
      << (*trained)->config_json();
  EXPECT_EQ(config.at("model_type"), "qwen2");
  EXPECT_EQ(config.at("tie_word_embeddings"), true);

  std::ostringstream expect;
  expect.precision(17);
  expect << eval.at("loss").get<double>();
  const std::string log = root_ + "/check.log";
  const Status checked = fixtures::RunPython3WithTorch(
      std::string(MAESTRO_SOURCE_DIR) + "/tests/fixtures/check_exported_loss.py",
      {exported, workload_ + "/corpus/heldout_text_document", "--seq-len", "64", "--sample-rule", "pack", "--eos-id",
       "1", "--samples", std::to_string(eval.at("samples").get<int64_t>()), "--expect", expect.str()},
      log);
  EXPECT_TRUE(checked.ok()) << checked.ToString();
  EXPECT_NE(fixtures::ReadLog(log).find("OK"), std::string::npos) << fixtures::ReadLog(log);
}

TEST_F(UserWorkloadTest, AVlmFromHfWeightsLearnsTheCaptionsOfImageFiles) {
  const std::string vlm = root_ + "/vlm";
  RunResult run;
  std::map<int64_t, double> losses;
  ASSERT_NO_FATAL_FAILURE(Train("vlm.toml", vlm, "3", &run, &losses));
  for (const auto& [step, loss] : losses) ASSERT_TRUE(std::isfinite(loss)) << "step " << step;
  EXPECT_LT(Mean(losses, false, 5), Mean(losses, true, 5)) << run.output;
  // The index holds the manifest's samples with their image tokens.
  const std::string index_manifest = ReadText(vlm + "/run/manifest.jsonl");
  EXPECT_NE(index_manifest.find("\"image\""), std::string::npos) << index_manifest.substr(0, 400);
}

}  // namespace
}  // namespace maestro
