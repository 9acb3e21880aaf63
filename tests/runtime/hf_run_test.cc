// SPDX-License-Identifier: Apache-2.0
// Hugging Face weights through whole runs (labels mpi;runtime): a KD spec
// whose teacher and student are HF folders (`weights = "..."`),
//  - run for zero steps (`maestro run --steps 0`, which writes the initial
//    weights) and exported (`maestro export`) gives back every tensor of the
//    student bit for bit, under the same names and dtypes, tied embeddings
//    still tied: in the one-process reference, under mpirun, and with the
//    student split over two TP ranks (each loads its slice; the checkpoint
//    gathers them);
//  - trained a few steps, exported from the last committed checkpoint or a
//    chosen step; a step that was never committed is an error naming the
//    ones that were;
//  - resumed without its training section's weights folder (a resumed
//    training section takes its state from the checkpoint, not the folder);
//  - the two families of the cross-family KD examples (specs/kd_llama31_*,
//    specs/kd_qwen3_*) as tiny HF folders: Llama 3.x with `llama3` RoPE
//    scaling trained past its original context, Qwen3 dense with q/k norms
//    and a head_dim that is not hidden / heads; `maestro run` trains each
//    pair on 2 ranks, every step's loss equal to the one-process
//    reference's, the exported student keeps its family's config, and that
//    folder (fp32) reloads to the trained run's held-out loss; Qwen3-MoE
//    with dense layers between its MoE ones, also over 2 stages; Qwen2.5
//    with YaRN and Mistral past its window (32 tokens each); Gemma 3
//    text, its local and global layers apart (32 tokens through a window
//    of 8).
// No torch headers: checkpoints are written by tests/fixtures/hf_checkpoints.h
// and runs are processes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/megatron_indexed.h"
#include "hf/checkpoint.h"
#include "plan/model_desc.h"
#include "plan/plan.h"
#include "tests/fixtures/hf_checkpoints.h"
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

// teacher: 2 layers, 64 wide, untied (its head is lm_head); student: 2
// layers, 32 wide, tied, sharded into several files. Both bf16, vocab 512
// (the built-in text data's).
std::string KdSpec(const std::string& teacher_dir, const std::string& student_dir) {
  return fixtures::WithKeys(fixtures::LocalCpuSpecHead("hf-kd") + "\n[models.teacher]\nweights = \"" + teacher_dir +
                                "\"\n\n[models.student]\nweights = \"" + student_dir + "\"\n" +
                                fixtures::KdSectionsToml(),
                            // fp32 spools: the teacher's rows reach the student as the
                            // reference computes them (a bf16 spool rounds them).
                            {{"job", "steps", "3"},
                             {"job", "spool_dtype", "\"f32\""},
                             {"cluster", "gpus_per_node", "4"},
                             {"cluster.gpu.cpu", "memory_gb", "2"},
                             {"data", "global_batch", "4"},
                             {"data", "seq_len", "32"},
                             {"data", "seed", "11"}});
}

class HfRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test: ctest runs the tests of this file as processes side by side.
    delete root_;
    root_ = new fs::path(fixtures::PerTestDir("hf_run"));
    auto teacher = fixtures::WriteRandomHfCheckpoint((*root_ / "teacher").string(),
                                                     fixtures::TinyQwen2Config(64, 2, 4, 2, 128, 512, false),
                                                     hf::TensorDType::kBF16, 1);
    ASSERT_TRUE(teacher.ok()) << teacher.status().ToString();
    auto student = fixtures::WriteRandomHfCheckpoint((*root_ / "student").string(),
                                                     fixtures::TinyQwen2Config(32, 2, 4, 2, 64, 512, true),
                                                     hf::TensorDType::kBF16, 2, /*max_shard_bytes=*/24000);
    ASSERT_TRUE(student.ok()) << student.status().ToString();
    std::ofstream(*root_ / "kd.toml") << KdSpec("teacher", "student");
  }
  static void TearDownTestSuite() { delete root_; }

  static RunResult Maestro(const std::vector<std::string>& args) { return runtime_testing::RunMaestro(args, {}, 300); }

  // Every tensor of `exported` equals the student's: names, dtypes, shapes, bytes.
  static void ExpectSameTensors(const fs::path& exported, const fs::path& source) {
    auto a = hf::HfCheckpoint::Open(exported.string());
    auto b = hf::HfCheckpoint::Open(source.string());
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_EQ((*a)->TensorNames(), (*b)->TensorNames());
    for (const auto& name : (*b)->TensorNames()) {
      auto x = (*a)->Find(name);
      auto y = (*b)->Find(name);
      ASSERT_TRUE(x.ok() && y.ok()) << name;
      EXPECT_EQ(x->info->dtype, y->info->dtype) << name;
      EXPECT_EQ(x->info->shape, y->info->shape) << name;
      const auto vx = (*a)->View(*x);
      const auto vy = (*b)->View(*y);
      ASSERT_EQ(vx.bytes, vy.bytes) << name;
      EXPECT_EQ(std::memcmp(vx.data, vy.data, vx.bytes), 0) << name << " differs";
    }
    EXPECT_EQ(ReadText(exported / "config.json"), ReadText(source / "config.json"));
  }

  static fs::path* root_;
};

fs::path* HfRunTest::root_ = nullptr;

// --steps 0 then export, in three layouts.
void ZeroStepsRoundTrip(const fs::path& root, const std::string& name, const std::vector<std::string>& layout) {
  const fs::path out = root / name;
  fs::remove_all(out);
  std::vector<std::string> run{"run", (root / "kd.toml").string(), "-o", out.string(), "--steps", "0", "--no-eval"};
  run.insert(run.end(), layout.begin(), layout.end());
  auto r = runtime_testing::RunMaestro(run, {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Sharded, as every checkpoint (each rank wrote its own pieces; nothing
  // was gathered on rank 0).
  EXPECT_TRUE(fs::exists(out / "run" / "initial" / "ckpt-0000000000" / "metadata.json")) << r.output;
  int rank_files = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(out / "run" / "initial" / "ckpt-0000000000", ec)) {
    rank_files += e.path().extension() == ".safetensors" ? 1 : 0;
  }
  EXPECT_GE(rank_files, 1) << "the training ranks' files (a frozen section's rank writes none)\n" << r.output;
  EXPECT_TRUE(runtime_testing::Losses((out / "run").string()).empty());  // nothing trained
  auto e = runtime_testing::RunMaestro(
      {"export", out.string(), "--section", "student", "-o", (out / "student-hf").string()});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("initial weights"), std::string::npos) << e.output;
}

TEST_F(HfRunTest, ZeroStepsThenExportGivesEveryTensorBackBitForBitInTheReference) {
  ZeroStepsRoundTrip(*root_, "zero-reference", {"--reference"});
  ExpectSameTensors(*root_ / "zero-reference" / "student-hf", *root_ / "student");
}

TEST_F(HfRunTest, ZeroStepsThenExportGivesEveryTensorBackBitForBitUnderMpirun) {
  ZeroStepsRoundTrip(*root_, "zero-mpi", {"--ranks", "2"});
  ExpectSameTensors(*root_ / "zero-mpi" / "student-hf", *root_ / "student");
}

TEST_F(HfRunTest, ZeroStepsThenExportGivesEveryTensorBackBitForBitWithTensorParallelism) {
  ZeroStepsRoundTrip(*root_, "zero-tp2", {"--ranks", "3", "--pin", "student.tp=2", "--pin", "teacher.dp=1"});
  auto plan = plan::LoadPlan((*root_ / "zero-tp2" / "plan.json").string());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->sections.at(static_cast<size_t>(plan->section_index("student"))).config.tp, 2);
  int rank_files = 0;
  for (const auto& e : fs::directory_iterator(*root_ / "zero-tp2" / "run" / "initial" / "ckpt-0000000000")) {
    rank_files += e.path().extension() == ".safetensors" ? 1 : 0;
  }
  EXPECT_EQ(rank_files, 2) << "each of the student's TP ranks writes its own slices (the teacher is frozen)";
  ExpectSameTensors(*root_ / "zero-tp2" / "student-hf", *root_ / "student");
}

TEST_F(HfRunTest, TrainedStudentExportsFromTheLastOrAChosenCommittedStep) {
  const fs::path out = *root_ / "trained";
  fs::remove_all(out);
  auto r = Maestro({"run", (*root_ / "kd.toml").string(), "-o", out.string(), "--no-eval", "--ranks", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto losses = runtime_testing::Losses((out / "run").string());
  ASSERT_EQ(losses.size(), 3u) << r.output;

  auto last = Maestro({"export", out.string(), "--section", "student", "-o", (out / "last").string()});
  ASSERT_EQ(last.exit_code, 0) << last.output;
  EXPECT_NE(last.output.find("after step 2"), std::string::npos) << last.output;
  auto exported = hf::HfCheckpoint::Open((out / "last").string());
  auto source = hf::HfCheckpoint::Open((*root_ / "student").string());
  ASSERT_TRUE(exported.ok() && source.ok());
  EXPECT_EQ((*exported)->TensorNames(), (*source)->TensorNames());
  auto q = (*exported)->Find("model.layers.0.self_attn.q_proj.weight");
  auto q0 = (*source)->Find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok() && q0.ok());
  EXPECT_EQ(q->info->dtype, hf::TensorDType::kBF16);  // as the student's weights stored it
  EXPECT_NE(std::memcmp((*exported)->View(*q).data, (*source)->View(*q0).data, (*source)->View(*q0).bytes), 0)
      << "three steps of training changed nothing";
  EXPECT_FALSE((*exported)->Find("lm_head.weight").ok()) << "a tied head stays tied: no lm_head in the file";

  auto fp32 =
      Maestro({"export", out.string(), "--section", "student", "-o", (out / "fp32").string(), "--dtype", "fp32"});
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  auto f = hf::HfCheckpoint::Open((out / "fp32").string());
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->Find("model.norm.weight")->info->dtype, hf::TensorDType::kF32);

  auto never = Maestro({"export", out.string(), "--section", "student", "-o", (out / "x").string(), "--step", "7"});
  EXPECT_NE(never.exit_code, 0);
  EXPECT_NE(never.output.find("no committed checkpoint of step 7"), std::string::npos) << never.output;
  EXPECT_NE(never.output.find("2"), std::string::npos) << never.output;
  EXPECT_FALSE(fs::exists(out / "x"));

  auto teacher = Maestro({"export", out.string(), "--section", "teacher", "-o", (out / "t").string()});
  EXPECT_NE(teacher.exit_code, 0);
  EXPECT_NE(teacher.output.find("forward-only"), std::string::npos) << teacher.output;

  auto again = Maestro({"export", out.string(), "--section", "student", "-o", (out / "last").string()});
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.output.find("exists"), std::string::npos) << again.output;
}

TEST_F(HfRunTest, AResumedTrainingSectionDoesNotReadItsWeightsFolderAgain) {
  const fs::path dir = *root_ / "resume";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy(*root_ / "student", dir / "student-copy");
  std::ofstream(dir / "kd.toml") << KdSpec((*root_ / "teacher").string(), "student-copy");
  // Sectioned: one replica per section, whose checkpoint the one-process
  // reference resumes (a fused plan on 2 ranks would shard the student's
  // AdamW over DP, which the reference refuses to resume; below).
  auto first = Maestro({"run", (dir / "kd.toml").string(), "-o", (dir / "out").string(), "--no-eval", "--ranks", "2",
                        "--steps", "2", "--grouping", "sectioned"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  fs::remove_all(dir / "student-copy");
  // Resume with the compiled plan (a recompile would refuse the missing folder).
  auto second = runtime_testing::RunBuiltTool("maestro-worker",
                                              {"--reference", "--no-eval", "--run-dir", (dir / "out" / "run").string(),
                                               "--steps", "3", (dir / "out" / "plan.json").string()},
                                              {}, 300);
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(runtime_testing::Losses((dir / "out" / "run").string()).size(), 3u) << second.output;
  // A fresh run cannot start without it, and says which folder is missing.
  fs::remove_all(dir / "out" / "run");
  auto fresh = runtime_testing::RunBuiltTool("maestro-worker",
                                             {"--reference", "--no-eval", "--run-dir", (dir / "out" / "run").string(),
                                              "--steps", "1", (dir / "out" / "plan.json").string()},
                                             {}, 300);
  EXPECT_NE(fresh.exit_code, 0);
  EXPECT_NE(fresh.output.find("student-copy"), std::string::npos) << fresh.output;
}

// Two tiny Megatron corpora under `dir` (train/, heldout/; 48 documents of
// 40 tokens in [2, 512) each, seeded): the cross-family runs train on one
// and evaluate the student on the other.
void WriteCorpora(const fs::path& dir) {
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int64_t> token(2, 511);
  for (const char* name : {"train", "heldout"}) {
    std::vector<std::vector<int64_t>> documents(48, std::vector<int64_t>(40));
    for (auto& d : documents) {
      for (auto& t : d) t = token(rng);
    }
    fs::create_directories(dir / name);
    ASSERT_TRUE(datasets::WriteMegatronIndexedDataset((dir / name / "text_document").string(), documents,
                                                      datasets::MegatronDType::kUint16)
                    .ok());
  }
}

// KdSpec on the corpora of WriteCorpora(dir): the student's held-out loss
// at the end of the run in eval.json.
std::string KdSpecOnCorpora(const std::string& teacher_dir, const std::string& student_dir, const fs::path& dir) {
  return fixtures::WithKeys(KdSpec(teacher_dir, student_dir),
                            {{"data", "corpus", "\"" + (dir / "train" / "text_document").string() + "\""},
                             {"data", "test_corpus", "\"" + (dir / "heldout" / "text_document").string() + "\""}});
}

double HeldOutLoss(const fs::path& run_dir) {
  const auto eval = nlohmann::json::parse(ReadText(run_dir / "eval.json"), nullptr, false);
  return eval.is_object() && eval.contains("loss") ? eval.at("loss").get<double>() : std::nan("");
}

// A KD pair of one family, as HF folders: the teacher 64 wide and untied,
// the student 32 wide and tied (vocab 512); 3 steps of 32 tokens sectioned
// on 2 ranks against the one-process reference, then the student exported.
// `family_key` is a key only that family's exported config.json holds. On
// the default layout, the exported student (fp32, as trained) also reloads:
// a run from that folder whose student does not move (lr 0) evaluates it to
// the trained run's held-out loss.
void ExpectCrossFamilyKdTrains(const std::string& family, const std::string& teacher_config,
                               const std::string& student_config, const std::string& family_key,
                               const std::vector<std::string>& layout = {"--ranks", "2"},
                               const std::vector<int>& student_tp_pp_cp = {1, 1, 1}) {
  const fs::path root = fixtures::PerTestDir("hf_run_" + family);
  auto teacher =
      fixtures::WriteRandomHfCheckpoint((root / "teacher").string(), teacher_config, hf::TensorDType::kBF16, 3);
  ASSERT_TRUE(teacher.ok()) << teacher.status().ToString();
  auto student =
      fixtures::WriteRandomHfCheckpoint((root / "student").string(), student_config, hf::TensorDType::kBF16, 4);
  ASSERT_TRUE(student.ok()) << student.status().ToString();
  const bool reload = layout == std::vector<std::string>{"--ranks", "2"};
  if (reload) {
    WriteCorpora(root);
    std::ofstream(root / "kd.toml") << KdSpecOnCorpora("teacher", "student", root);
  } else {
    std::ofstream(root / "kd.toml") << KdSpec("teacher", "student");
  }
  const fs::path out = root / "out";
  std::vector<std::string> run{"run", (root / "kd.toml").string(), "-o", out.string(), "--grouping", "sectioned"};
  if (!reload) run.push_back("--no-eval");
  run.insert(run.end(), layout.begin(), layout.end());
  auto r = runtime_testing::RunMaestro(run, {}, 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto plan = plan::LoadPlan((out / "plan.json").string());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto& layout_used = plan->sections.at(static_cast<size_t>(plan->section_index("student"))).config;
  EXPECT_EQ(std::vector<int>({layout_used.tp, layout_used.pp, layout_used.cp}), student_tp_pp_cp)
      << family << ": the layout asked for";
  const auto losses = runtime_testing::Losses((out / "run").string());
  ASSERT_EQ(losses.size(), 3u) << r.output;
  auto ref = runtime_testing::RunReference((out / "plan.json").string(), (root / "reference").string());
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  const auto expected = runtime_testing::Losses((root / "reference").string());
  ASSERT_EQ(expected.size(), losses.size()) << ref.output;
  for (const auto& [step, loss] : losses) {
    ASSERT_TRUE(std::isfinite(loss)) << family << " step " << step;
    EXPECT_NEAR(loss, expected.at(step), 1e-5 * std::abs(expected.at(step))) << family << " step " << step;
  }
  auto e = runtime_testing::RunMaestro(
      {"export", out.string(), "--section", "student", "-o", (out / "student-hf").string()});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  auto exported = hf::HfCheckpoint::Open((out / "student-hf").string());
  auto source = hf::HfCheckpoint::Open((root / "student").string());
  ASSERT_TRUE(exported.ok() && source.ok());
  EXPECT_EQ((*exported)->TensorNames(), (*source)->TensorNames()) << family;
  const std::string config = ReadText(out / "student-hf" / "config.json");
  EXPECT_NE(config.find(family_key), std::string::npos) << family << ": " << config;
  if (!reload) return;

  const double trained = HeldOutLoss(out / "run");
  ASSERT_TRUE(std::isfinite(trained)) << family << ": no held-out loss in eval.json\n" << r.output;
  auto fp32 = runtime_testing::RunMaestro(
      {"export", out.string(), "--section", "student", "-o", (root / "student-fp32").string(), "--dtype", "fp32"});
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  std::ofstream(root / "reload.toml") << fixtures::WithKeys(
      KdSpecOnCorpora("teacher", "student-fp32", root),
      {{"job", "steps", "1"}, {"section.student", "optimizer", "{ lr = 0.0, weight_decay = 0.0 }"}});
  auto again = runtime_testing::RunMaestro({"run", (root / "reload.toml").string(), "-o", (root / "reload").string(),
                                            "--grouping", "sectioned", "--ranks", "2"},
                                           {}, 300);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const double reloaded = HeldOutLoss(root / "reload" / "run");
  EXPECT_NEAR(reloaded, trained, 1e-5 * std::abs(trained)) << family << ": the exported folder reloads to another loss";
}

// Llama 3.x: the student's 32-token samples run past its original context
// of 16, where llama3 scaling changes the frequencies of every wavelength
// above 4 tokens (head_dim 8: wavelengths 6, 167, 4441, 118k).
TEST(HfRunCrossFamily, Llama3WithItsRopeScalingTrainsAsTheReferenceAndExportsItsConfig) {
  ExpectCrossFamilyKdTrains("llama3", fixtures::TinyLlama3Config(64, 2, 4, 2, 128, 512, false, 16),
                            fixtures::TinyLlama3Config(32, 2, 4, 2, 64, 512, true, 16), "\"llama3\"");
}

// Qwen3 dense: head_dim 16 on a 32-wide student (4 heads: q is 64 wide).
TEST(HfRunCrossFamily, Qwen3WithQkNormsTrainsAsTheReferenceAndExportsItsConfig) {
  ExpectCrossFamilyKdTrains("qwen3", fixtures::TinyQwen3Config(64, 2, 4, 2, 16, 128, 512, false),
                            fixtures::TinyQwen3Config(32, 2, 4, 2, 16, 64, 512, true), "\"qwen3\"");
}

// Qwen2.5 with YaRN: a Qwen2 config (q/k/v biases) whose rope_scaling is
// YaRN (factor 4 over an original context of 16), so the 32-token samples
// run where the scaled frequencies differ from the unscaled ones.
std::string TinyQwen25YarnConfig(int hidden, int ffn, bool tied) {
  std::string c = fixtures::TinyQwen2Config(hidden, 2, 4, 2, ffn, 512, tied);
  const std::string at = ", \"tie_word_embeddings\"";
  c.insert(c.find(at),
           ", \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4.0, "
           "\"original_max_position_embeddings\": 16}");
  return c;
}

// Mistral past its window: the Llama-shaped decoder with sliding_window 8
// under 32-token samples (transformers' rule kv_idx > q_idx - 8).
std::string TinyMistralConfig(int hidden, int ffn, bool tied) {
  return "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\", \"hidden_size\": " +
         std::to_string(hidden) + ", \"intermediate_size\": " + std::to_string(ffn) +
         ", \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
         "\"vocab_size\": 512, \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-05, "
         "\"rope_theta\": 10000.0, \"sliding_window\": 8, \"tie_word_embeddings\": " +
         (tied ? "true" : "false") + ", \"torch_dtype\": \"bfloat16\"}\n";
}

TEST(HfRunCrossFamily, Qwen25WithYarnPastItsOriginalContextTrainsAsTheReferenceAndExportsItsConfig) {
  ExpectCrossFamilyKdTrains("qwen25_yarn", TinyQwen25YarnConfig(64, 128, false), TinyQwen25YarnConfig(32, 64, true),
                            "\"yarn\"");
}

TEST(HfRunCrossFamily, MistralPastItsWindowTrainsAsTheReferenceAndExportsItsConfig) {
  ExpectCrossFamilyKdTrains("mistral_window", TinyMistralConfig(64, 128, false), TinyMistralConfig(32, 64, true),
                            "\"sliding_window\": 8");
}

// Qwen3-MoE with dense layers: 4 layers, decoder_sparse_step 2 and
// mlp_only_layers [3], so layer 1 alone is a MoE layer (4 experts, top 2)
// and the others dense MLPs; the teacher and the student alike. Over 2
// pipeline stages the second stage holds no MoE layer at all (its part of
// the load-balancing term is nothing).
TEST(HfRunCrossFamily, Qwen3MoeWithDenseLayersTrainsAsTheReferenceAndExportsItsConfig) {
  const auto teacher = fixtures::TinyQwen3MoeConfig(64, 4, 4, 2, 16, 128, 32, 4, 2, 2, "[3]", 512, false);
  const auto student = fixtures::TinyQwen3MoeConfig(32, 4, 4, 2, 16, 64, 16, 4, 2, 2, "[3]", 512, true);
  ExpectCrossFamilyKdTrains("qwen3_moe_mixed", teacher, student, "\"mlp_only_layers\": [");
  ExpectCrossFamilyKdTrains("qwen3_moe_mixed_pp2", teacher, student, "\"qwen3_moe\"",
                            {"--ranks", "3", "--pin", "student.pp=2", "--pin", "teacher.dp=1"}, {1, 2, 1});
}

// Gemma 3 text: 32-token samples through 2 layers, layer 0 local (a window
// of 8, RoPE base 10000) and layer 1 global (rope_theta 1e6), so the two
// kinds attend differently; the exported student is gemma3_text again and
// imports as the same model.
TEST(HfRunCrossFamily, Gemma3LocalAndGlobalLayersTrainAsTheReferenceAndExportItsConfig) {
  ExpectCrossFamilyKdTrains("gemma3", fixtures::TinyGemma3Config(64, 2, 4, 2, 16, 128, 512, 8, 2),
                            fixtures::TinyGemma3Config(32, 2, 4, 2, 16, 64, 512, 8, 2), "\"gemma3_text\"");
  const fs::path exported = fs::path(MAESTRO_TEST_TMP) / "hf_run_gemma3" /
                            ::testing::UnitTest::GetInstance()->current_test_info()->name() / "out" / "student-hf";
  auto back = compiler::ModelFromHfConfig(ReadText(exported / "config.json"), "exported config.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(plan::Gemma3(*back));
  EXPECT_TRUE(plan::IsSlidingLayer(*back, 0));
  EXPECT_FALSE(plan::IsSlidingLayer(*back, 1));
  auto loaded = hf::HfCheckpoint::Open(exported.string());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  auto names = hf::ExpandWeightNames(*back);
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(names->layout, hf::WeightLayout::kGemma3);
  for (const auto& w : names->weights) EXPECT_TRUE((*loaded)->Find(w.hf_name).ok()) << w.hf_name;
}

// The two families' students split as the runtime splits a decoder (issue
// #40: TP 2, PP 2 and CP 2 runs of two families equal the reference): the
// Llama 3.x student over 2 TP ranks and over 2 pipeline stages, the Qwen3
// student (its q/k norms per head, each TP rank its heads' share) over 2 TP
// ranks and over 2 CP ranks (its 32 tokens in load-balanced halves).
TEST(HfRunCrossFamily, Llama3StudentAtTp2AndPp2EqualsTheReference) {
  const auto teacher = fixtures::TinyLlama3Config(64, 2, 4, 2, 128, 512, false, 16);
  const auto student = fixtures::TinyLlama3Config(32, 2, 4, 2, 64, 512, true, 16);
  ExpectCrossFamilyKdTrains("llama3_tp2", teacher, student, "\"llama3\"",
                            {"--ranks", "3", "--pin", "student.tp=2", "--pin", "teacher.dp=1"}, {2, 1, 1});
  ExpectCrossFamilyKdTrains("llama3_pp2", teacher, student, "\"llama3\"",
                            {"--ranks", "3", "--pin", "student.pp=2", "--pin", "teacher.dp=1"}, {1, 2, 1});
}

TEST(HfRunCrossFamily, Qwen3StudentAtTp2AndCp2EqualsTheReference) {
  const auto teacher = fixtures::TinyQwen3Config(64, 2, 4, 2, 16, 128, 512, false);
  const auto student = fixtures::TinyQwen3Config(32, 2, 4, 2, 16, 64, 512, true);
  ExpectCrossFamilyKdTrains("qwen3_tp2", teacher, student, "\"qwen3\"",
                            {"--ranks", "3", "--pin", "student.tp=2", "--pin", "teacher.dp=1"}, {2, 1, 1});
  ExpectCrossFamilyKdTrains("qwen3_cp2", teacher, student, "\"qwen3\"",
                            {"--ranks", "3", "--pin", "student.cp=2", "--pin", "teacher.dp=1"}, {1, 1, 2});
}

// The Gemma 3 student over 2 TP ranks (its heads split, the four norms per
// layer and the q/k norms replicated), over 2 CP ranks (each layer's mask
// over the gathered keys: the local layer's window, the global layer's
// causal prefix) and over 2 pipeline stages.
TEST(HfRunCrossFamily, Gemma3StudentAtTp2Cp2AndPp2EqualsTheReference) {
  const auto teacher = fixtures::TinyGemma3Config(64, 2, 4, 2, 16, 128, 512, 8, 2);
  const auto student = fixtures::TinyGemma3Config(32, 2, 4, 2, 16, 64, 512, 8, 2);
  ExpectCrossFamilyKdTrains("gemma3_tp2", teacher, student, "\"gemma3_text\"",
                            {"--ranks", "3", "--pin", "student.tp=2", "--pin", "teacher.dp=1"}, {2, 1, 1});
  ExpectCrossFamilyKdTrains("gemma3_cp2", teacher, student, "\"gemma3_text\"",
                            {"--ranks", "3", "--pin", "student.cp=2", "--pin", "teacher.dp=1"}, {1, 1, 2});
  // 2 pipeline stages: the local layer on one, the global layer on the other.
  ExpectCrossFamilyKdTrains("gemma3_pp2", teacher, student, "\"gemma3_text\"",
                            {"--ranks", "3", "--pin", "student.pp=2", "--pin", "teacher.dp=1"}, {1, 2, 1});
}

}  // namespace
}  // namespace maestro
