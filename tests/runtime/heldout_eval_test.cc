// SPDX-License-Identifier: Apache-2.0
// The held-out evaluation of `[data] test_corpus` (labels mpi;runtime): on the
// example workload of scripts/make_example_workload.py (its Megatron corpora,
// its teacher's and student's Qwen2 configs, weights from the seed), a KD run
//  - under `maestro run` (mpirun, 2 ranks) and as the monolithic reference
//    prints the held-out line and writes eval.json with the same loss;
//  - whose trained student, exported to Hugging Face safetensors here (the
//    runtime's ExportHfTensors + hf::WriteHfCheckpoint, what `maestro export`
//    does), gives that loss again in tests/fixtures/check_exported_loss.py, an
//    independent python3-torch reader and forward (within 1e-5; a wrong
//    expectation fails it);
//  - with --no-eval writes no eval.json, and --eval-samples N evaluates N
//    (with the "split" rule, which the check follows too);
//  - with a held-out corpus holding a token outside the vocabulary stops
//    before training, naming the held-out .bin, with nothing committed.
// And the example itself: its Hugging Face folders (bf16 teacher, LLM and CLIP
// tower, the sharded fp32 student) load into the runtime's models, the
// pretrained teacher's held-out loss by EvaluateHeldOut is the independent
// check's, and its manifest and PNG/JPEG images read back through
// datasets/jsonl_manifest.h and image_decode.h.
// Skips when no python3 has torch and PIL. And a run on the built-in text
// ends on the loss over its held-out chunks (HeldOutEvalDemoText).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/model.h"
#include "datasets/default_text.h"
#include "datasets/image_decode.h"
#include "datasets/jsonl_manifest.h"
#include "datasets/megatron_indexed.h"
#include "hf/checkpoint.h"
#include "plan/plan.h"
#include "runtime/checkpoint_slices.h"
#include "runtime/evaluation.h"
#include "runtime/hf_weights.h"
#include "runtime/models/encoders.h"
#include "tests/fixtures/python3.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/specs.h"
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;
using launcher::testing::RunResult;
using runtime_testing::ReadText;

const std::string kChecker = std::string(MAESTRO_SOURCE_DIR) + "/tests/fixtures/check_exported_loss.py";
constexpr int kSteps = 8;

// A KD of the example's models from their configs (weights from the seed:
// the `weights` key is not needed to measure a held-out loss).
std::string KdSpec(const std::string& test_corpus, const std::string& rule) {
  return fixtures::WithKeys(fixtures::LocalCpuSpecHead("heldout-kd") + R"(
[models.teacher]
hf_config = "teacher/config.json"

[models.student]
hf_config = "student/config.json"
)" + fixtures::KdSectionsToml(),
                            {{"job", "steps", std::to_string(kSteps)},
                             {"cluster.gpu.cpu", "memory_gb", "2"},
                             {"data", "seq_len", "64"},
                             {"data", "seed", "7"},
                             {"data", "corpus", "\"corpus/train_text_document\""},
                             {"data", "test_corpus", "\"" + test_corpus + "\""},
                             {"data", "sample_rule", "\"" + rule + "\""},
                             {"data", "eos_id", "1"},
                             {"section.student", "optimizer", "{ lr = 3e-3, warmup_steps = 2 }"}});
}

class HeldOutEvalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test: ctest runs the tests of this file as processes side by side.
    root_ = fixtures::PerTestDir("heldout_eval");
    workload_ = root_ + "/workload";
    made_ = fixtures::RunPython3WithTorch(std::string(MAESTRO_SOURCE_DIR) + "/scripts/make_example_workload.py",
                                          {workload_, "--teacher-steps", "10"}, root_ + "/make_example.log");
    if (made_.code() == StatusCode::kUnavailable) GTEST_SKIP() << made_.ToString();
    ASSERT_TRUE(made_.ok()) << made_.ToString();
  }
  static std::string WriteSpec(const std::string& name, const std::string& test_corpus,
                               const std::string& rule = "pack") {
    const std::string path = workload_ + "/" + name;
    std::ofstream(path) << KdSpec(test_corpus, rule);
    return path;
  }
  static nlohmann::json EvalJson(const std::string& run_dir) {
    return nlohmann::json::parse(ReadText(run_dir + "/eval.json"), nullptr, false);
  }
  // Runs the independent check; its exit code (0 agree, 1 differ), -1 when it could not run.
  static int Check(const std::string& export_dir, double expect, int64_t samples, std::string* log,
                   const std::string& rule = "pack") {
    std::ostringstream want;
    want.precision(17);
    want << expect;
    const std::string log_path = root_ + "/check.log";
    const Status s = fixtures::RunPython3WithTorch(
        kChecker,
        {export_dir, workload_ + "/corpus/heldout_text_document", "--seq-len", "64", "--sample-rule", rule, "--eos-id",
         "1", "--samples", std::to_string(samples), "--expect", want.str()},
        log_path);
    *log = fixtures::ReadLog(log_path);
    if (s.ok()) return 0;
    return log->find("MISMATCH") != std::string::npos ? 1 : -1;
  }

  static std::string root_, workload_;
  static Status made_;
};
std::string HeldOutEvalTest::root_;
std::string HeldOutEvalTest::workload_;
Status HeldOutEvalTest::made_;

// What `maestro export` does: the section's weights of the run's last
// checkpoint into a fresh model of the plan's desc, out as HF tensors (fp32,
// as the student was stored) beside the student's config.json; small shards,
// so the check reads an index.
void ExportStudent(const plan::Plan& p, const std::string& run_dir, const std::string& config_json,
                   const std::string& out) {
  const auto checkpoint = runtime_testing::LastCheckpoint(run_dir);
  ASSERT_TRUE(checkpoint.sections.count("student"));
  const plan::Plan components = plan::ExpandFusedSections(p);  // the plan may be fused
  const auto& desc = components.sections[static_cast<size_t>(components.section_index("student"))].model;
  auto model = runtime::BuildModel(desc);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const Status loaded = runtime::LoadWholeModel(checkpoint, "student", **model, run_dir);
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  auto tensors = runtime::ExportHfTensors(**model, desc, torch::kFloat32);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  fs::remove_all(out);
  const Status written = hf::WriteHfCheckpoint(out, config_json, runtime::TensorsToWrite(*tensors), 64 << 10);
  ASSERT_TRUE(written.ok()) << written.ToString();
  ASSERT_TRUE(fs::exists(out + "/" + hf::kIndexFileName));
}

TEST_F(HeldOutEvalTest, TheRunsHeldOutLossIsWhatAnIndependentCheckComputesFromTheExportedStudent) {
  const std::string spec = WriteSpec("heldout_kd.toml", "corpus/heldout_text_document");
  const std::string out = root_ + "/kd";
  const RunResult run = runtime_testing::RunMaestro({"run", spec, "-o", out, "--ranks", "2", "--fresh"},
                                                    {{"MAESTRO_COMM_TIMEOUT_S", "60"}});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("held-out loss "), std::string::npos) << run.output;

  auto p = plan::LoadPlan(out + "/plan.json");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->data.test_corpus, workload_ + "/corpus/heldout_text_document");
  auto heldout = datasets::MegatronIndexedDataset::Open(p->data.test_corpus);
  ASSERT_TRUE(heldout.ok()) << heldout.status().ToString();
  datasets::MegatronSampleOptions options;
  options.seq_len = 64;
  options.eos_id = 1;
  options.vocab_size = 320;
  auto cut = datasets::MegatronSamples::Build(std::move(*heldout), options);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();

  const auto eval = EvalJson(out + "/run");
  ASSERT_TRUE(eval.is_object()) << ReadText(out + "/run/eval.json");
  EXPECT_EQ(eval.at("section"), "student");
  EXPECT_EQ(eval.at("step"), kSteps - 1);
  EXPECT_EQ(eval.at("samples"), cut->size());
  EXPECT_EQ(eval.at("test_corpus"), p->data.test_corpus);
  const double loss = eval.at("loss");
  ASSERT_TRUE(std::isfinite(loss));
  EXPECT_NE(run.output.find("over " + std::to_string(cut->size()) + " samples (step " + std::to_string(kSteps - 1)),
            std::string::npos)
      << run.output;
  // metrics.jsonl carries it too.
  EXPECT_NE(ReadText(out + "/run/metrics.jsonl").find("\"heldout_loss\""), std::string::npos);

  // The monolithic reference trains the same student: the same held-out loss.
  const RunResult reference =
      runtime_testing::RunMaestro({"run", spec, "-o", root_ + "/kd_reference", "--reference", "--fresh"}, {});
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto reference_eval = EvalJson(root_ + "/kd_reference/run");
  ASSERT_TRUE(reference_eval.is_object());
  EXPECT_NEAR(reference_eval.at("loss").get<double>(), loss, 1e-5 * std::abs(loss));

  // The exported student, read by the independent check, gives it again; a
  // wrong expectation is refused.
  const std::string exported = root_ + "/student-hf";
  ExportStudent(*p, out + "/run", ReadText(workload_ + "/student/config.json"), exported);
  std::string log;
  EXPECT_EQ(Check(exported, loss, 0, &log), 0) << log;
  EXPECT_EQ(Check(exported, loss + 1e-3, 0, &log), 1) << log;
}

// Also the "split" rule: every document on its own, its last window padded.
TEST_F(HeldOutEvalTest, NoEvalWritesNothingAndEvalSamplesEvaluatesThatMany) {
  const std::string spec = WriteSpec("heldout_kd_split.toml", "corpus/heldout_text_document", "split");
  const std::string out = root_ + "/kd_samples";
  const RunResult first =
      runtime_testing::RunMaestro({"run", spec, "-o", out, "--reference", "--fresh", "--steps", "2", "--no-eval"}, {});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_FALSE(fs::exists(out + "/run/eval.json"));
  EXPECT_EQ(first.output.find("held-out loss"), std::string::npos) << first.output;

  // The same run again: nothing left to train, the last checkpoint evaluated.
  const RunResult again =
      runtime_testing::RunMaestro({"run", spec, "-o", out, "--reference", "--steps", "2", "--eval-samples", "7"}, {});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const auto eval = EvalJson(out + "/run");
  ASSERT_TRUE(eval.is_object()) << again.output;
  EXPECT_EQ(eval.at("samples"), 7);
  EXPECT_EQ(eval.at("step"), 1);
  auto p = plan::LoadPlan(out + "/plan.json");
  ASSERT_TRUE(p.ok());
  const std::string exported = root_ + "/student-hf-7";
  ExportStudent(*p, out + "/run", ReadText(workload_ + "/student/config.json"), exported);
  std::string log;
  EXPECT_EQ(Check(exported, eval.at("loss").get<double>(), 7, &log, "split"), 0) << log;
  EXPECT_EQ(Check(exported, eval.at("loss").get<double>(), 7, &log, "pack"), 1) << log;
}

TEST_F(HeldOutEvalTest, TheExampleModelsLoadAndThePretrainedTeachersLossIsTheChecks) {
  std::map<std::string, std::string> model_bytes;
  for (const std::string name : {"teacher", "student", "llm", "vit"}) {
    const std::string dir = workload_ + "/" + name;
    auto desc = compiler::ModelFromHfConfigFile(dir + "/config.json");
    ASSERT_TRUE(desc.ok()) << desc.status().ToString();
    auto ckpt = hf::HfCheckpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
    auto model = runtime::BuildModel(*desc);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    const Status loaded = runtime::LoadHfWeights(**model, *desc, **ckpt, 0, 1, torch::kFloat32);
    ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.ToString();
    torch::serialize::OutputArchive archive;
    (*model)->save(archive);
    std::ostringstream bytes;
    archive.save_to(bytes);
    model_bytes[name] = bytes.str();
  }
  // The KD plan, its sink given the teacher's desc and weights.
  const std::string compiled = root_ + "/kd_teacher_plan";
  const RunResult compile = runtime_testing::RunBuiltTool(
      "maestro-compile",
      {WriteSpec("heldout_kd_teacher.toml", "corpus/heldout_text_document"), "-o", compiled, "--local", "2"});
  ASSERT_EQ(compile.exit_code, 0) << compile.output;
  auto loaded_plan = plan::LoadPlan(compiled + "/plan.json");
  ASSERT_TRUE(loaded_plan.ok()) << loaded_plan.status().ToString();
  const plan::Plan compiled_components = plan::ExpandFusedSections(*loaded_plan);  // the plan may be fused
  plan::Plan p = compiled_components;
  auto& student = p.sections[static_cast<size_t>(p.section_index("student"))];
  student.model = p.sections[static_cast<size_t>(p.section_index("teacher"))].model;
  auto teacher = runtime::EvaluateHeldOut(p, model_bytes.at("teacher"));
  ASSERT_TRUE(teacher.ok()) << teacher.status().ToString();
  EXPECT_EQ(teacher->section, "student");
  EXPECT_EQ(teacher->step, -1);
  std::string log;
  EXPECT_EQ(Check(workload_ + "/teacher", teacher->loss, 0, &log), 0) << log;
  // Pretrained (10 steps here) vs seeded: the teacher predicts the held-out text better.
  student.model = compiled_components.sections[static_cast<size_t>(p.section_index("student"))].model;
  auto seeded = runtime::EvaluateHeldOut(p, model_bytes.at("student"));
  ASSERT_TRUE(seeded.ok()) << seeded.status().ToString();
  EXPECT_EQ(Check(workload_ + "/student", seeded->loss, 0, &log), 0) << log;
  EXPECT_LT(teacher->loss, seeded->loss);
}

TEST_F(HeldOutEvalTest, TheExampleManifestAndItsImagesReadBack) {
  const auto vit = nlohmann::json::parse(ReadText(workload_ + "/vit/config.json"));
  const int64_t side = vit.at("image_size").get<int64_t>() / vit.at("patch_size").get<int64_t>();
  datasets::JsonlManifestOptions o;
  o.seq_len = 48;  // specs/examples/hf_vlm.toml
  o.vocab_size = 320;
  o.image_token_id = 4;
  o.tokens_per_image = side * side + 1;  // CLIP's patches + its class token
  auto manifest = datasets::JsonlManifest::Open(workload_ + "/manifest.jsonl", o);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  // Every line a sample, with the images its line lists (read here as plain JSON).
  std::ifstream lines(workload_ + "/manifest.jsonl");
  std::string line;
  std::map<int64_t, int> per_count;
  int64_t i = 0;
  datasets::ImageSpec spec;
  spec.height = spec.width = static_cast<int>(vit.at("image_size").get<int64_t>());
  spec.mean = datasets::kOpenAiClipMean;
  spec.std = datasets::kOpenAiClipStd;
  spec.fit = datasets::ImageFit::kShortestEdgeThenCenterCrop;
  while (std::getline(lines, line)) {
    const auto j = nlohmann::json::parse(line);
    const size_t images = j.contains("images") ? j.at("images").size() : 0;
    ++per_count[static_cast<int64_t>(images)];
    ASSERT_LT(i, manifest->size());
    auto sample = manifest->Sample(i);
    ASSERT_TRUE(sample.ok()) << sample.status().ToString();
    ASSERT_EQ(sample->image_paths.size(), images) << line;
    EXPECT_EQ(sample->counts.image, static_cast<int64_t>(images) * o.tokens_per_image) << line;
    EXPECT_GT(sample->counts.loss, 0) << line;
    for (const auto& path : sample->image_paths) {
      auto chw = datasets::LoadImageForModel(path, spec);
      ASSERT_TRUE(chw.ok()) << chw.status().ToString();
      // The shape's colour at the centre: red, green or blue dominate where the name says so.
      const size_t plane = static_cast<size_t>(spec.height * spec.width);
      const size_t centre = static_cast<size_t>((spec.height / 2) * spec.width + spec.width / 2);
      float rgb[3];
      for (size_t c = 0; c < 3; ++c) rgb[c] = (*chw)[c * plane + centre] * spec.std[c] + spec.mean[c];
      const std::string name = fs::path(path).filename().string();
      for (const auto& [colour, channel] : {std::pair<std::string, int>{"red_", 0}, {"green_", 1}, {"blue_", 2}}) {
        if (name.rfind(colour, 0) != 0) continue;
        for (int c = 0; c < 3; ++c) {
          if (c == channel) continue;
          EXPECT_GT(rgb[channel], rgb[c] + 0.3f) << name;
        }
      }
    }
    ++i;
  }
  EXPECT_EQ(i, manifest->size());
  // Samples with 0, 1 and 2 images, the variable load the wavefront is for.
  EXPECT_EQ(per_count.size(), 3u);
  for (const auto& [count, samples] : per_count) EXPECT_GE(samples, 10) << count << " images";
}

TEST_F(HeldOutEvalTest, AHeldOutTokenOutsideTheVocabularyStopsTheRunBeforeTraining) {
  // The example's vocabulary is 320 tokens; the second document holds 400.
  std::vector<std::vector<int64_t>> documents(2);
  for (int64_t t = 0; t < 100; ++t) {
    documents[0].push_back(40 + t);
    documents[1].push_back(t == 50 ? 400 : 40 + t);
  }
  const std::string bad = workload_ + "/corpus/bad_heldout_text_document";
  ASSERT_TRUE(datasets::WriteMegatronIndexedDataset(bad, documents, datasets::MegatronDType::kUint16).ok());
  const std::string spec = WriteSpec("heldout_kd_bad.toml", "corpus/bad_heldout_text_document");
  const std::string out = root_ + "/kd_bad";
  const RunResult run =
      runtime_testing::RunMaestro({"run", spec, "-o", out, "--reference", "--fresh", "--steps", "2"}, {});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_NE(run.output.find(bad + ".bin"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("400"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(out + "/run/eval.json"));
  const bool any_checkpoint = fs::exists(out + "/run/checkpoints") && !fs::is_empty(out + "/run/checkpoints");
  EXPECT_FALSE(any_checkpoint);
}

// The built-in text holds out its last chunks (datasets/demo_data.h): a run
// on it (specs/tiny_student.toml, the KD demo's student alone) ends on the
// student's loss over them, N = a twentieth of the text's 63-byte chunks
// (counted here from the text), in the printed line and eval.json alike;
// and the same run trained on (resumed to 40 steps) ends lower.
TEST(HeldOutEvalDemoText, ARunOnTheBuiltInTextEndsOnItsHeldOutChunks) {
  const auto text = datasets::ReadDefaultText();
  if (!text.ok()) GTEST_SKIP() << "no demo text: " << text.status().message();
  const int64_t chunks = static_cast<int64_t>(text->text.size()) / 63;
  const int64_t held_out = std::max<int64_t>(1, chunks / 20);
  const std::string spec = std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_student.toml";
  const std::string out = fixtures::PerTestDir("heldout_demo_text");
  double losses[2] = {0, 0};
  int at = 0;
  for (const char* steps : {"4", "40"}) {
    const RunResult run = runtime_testing::RunMaestro({"run", spec, "-o", out, "--reference", "--steps", steps}, {});
    ASSERT_EQ(run.exit_code, 0) << run.output;
    const auto line = run.output.find("held-out loss ");
    ASSERT_NE(line, std::string::npos) << run.output;
    const auto eval = nlohmann::json::parse(ReadText(out + "/run/eval.json"), nullptr, false);
    ASSERT_TRUE(eval.is_object()) << run.output;
    EXPECT_EQ(eval.at("section"), "student");
    EXPECT_EQ(eval.at("samples"), held_out);
    EXPECT_EQ(eval.at("step"), std::stoi(steps) - 1);
    losses[at] = eval.at("loss").get<double>();
    EXPECT_NEAR(std::stod(run.output.substr(line + 14)), losses[at], 1e-6 * losses[at]) << run.output;
    ++at;
  }
  EXPECT_LT(losses[1], losses[0]) << "40 steps of training lower the held-out loss of 4";
}

}  // namespace
}  // namespace maestro
