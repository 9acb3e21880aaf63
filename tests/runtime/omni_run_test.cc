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
// Every step line of metrics.jsonl reports each section's real work
// ("sections": tokens, tokens_per_s, model_flops_per_s), sectioned, fused
// and with TP, DP and PP replicas: the counts equal those worked out here
// from the manifest lines of the step's samples (a text line brings no image
// and no clip, and its sequence is shorter than seq_len), and the
// projector's and the LLM's FLOPs those of independent arithmetic.
//
// Each test makes the workload (python3-torch, python3-pil,
// python3-soundfile; skips without them) and runs one to three jobs of 6
// steps on 5 to 8 CPU ranks: 36 s, 41 s and 19 s on two busy cores.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "datalayer/crash_env.h"
#include "datalayer/sample_index.h"
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
  // Every step line of `run_dir`/metrics.jsonl (a run of omni.toml by
  // `plan`) against the work of its samples, counted from their manifest
  // lines.
  static void ExpectRealWorkReported(const std::string& run_dir, const plan::Plan& plan, const std::string& what);
  std::string root_, workload_;
};

// One manifest line as work: its images, clips and non-padding tokens.
struct LineWork {
  int64_t images = 0, audios = 0, tokens = 0;
};

// The run's samples by id: the index's manifest names each one's line of
// the user's manifest ("<path>:<line>", 1-based), read here.
std::map<int64_t, LineWork> SampleLines(const std::string& run_dir, int64_t seq_len) {
  std::map<int64_t, LineWork> out;
  std::istringstream index(ReadText(run_dir + "/manifest.jsonl"));
  std::map<int64_t, int64_t> line_of;
  std::string manifest_path;
  for (std::string text; std::getline(index, text);) {
    const auto j = nlohmann::json::parse(text);
    const std::string location = j.at("location").get<std::string>();
    const size_t colon = location.rfind(':');
    manifest_path = location.substr(0, colon);
    line_of[j.at("id").get<int64_t>()] = std::stoll(location.substr(colon + 1));
  }
  std::vector<LineWork> lines;
  std::istringstream manifest(ReadText(manifest_path));
  for (std::string text; std::getline(manifest, text);) {
    const auto j = nlohmann::json::parse(text);
    LineWork w;
    w.images = j.contains("images") ? static_cast<int64_t>(j.at("images").size()) : 0;
    w.audios = j.contains("audios") ? static_cast<int64_t>(j.at("audios").size()) : 0;
    w.tokens = std::min<int64_t>(static_cast<int64_t>(j.at("input_ids").size()), seq_len);
    lines.push_back(w);
  }
  for (const auto& [id, line] : line_of) out[id] = lines.at(static_cast<size_t>(line - 1));
  return out;
}

void OmniRun::ExpectRealWorkReported(const std::string& run_dir, const plan::Plan& plan, const std::string& what) {
  const plan::Plan flat = plan::ExpandFusedSections(plan);  // the spec's sections, by name
  auto model = [&](const std::string& name) {
    return flat.sections.at(static_cast<size_t>(flat.section_index(name))).model;
  };
  const plan::ModelDesc vit = model("vit"), audio = model("audio"), proj = model("proj"), llm = model("llm");
  const int64_t vit_tokens = (vit.image_size / vit.patch_size) * (vit.image_size / vit.patch_size) + 1;  // + CLS
  const int64_t clip_frames = (audio.audio_frames + 1) / 2;
  // The LLM's FLOPs of a sample of t tokens: 2 per weight of q, k, v, o,
  // the SwiGLU MLP and the LM head, and causal attention over t / 2 keys.
  const int64_t head_dim = llm.hidden / llm.heads;
  const double llm_weights =
      static_cast<double>(llm.layers * (2 * llm.hidden * llm.heads * head_dim +
                                        2 * llm.hidden * llm.kv_heads * head_dim + 3 * llm.hidden * llm.ffn_hidden) +
                          llm.vocab * llm.hidden);
  auto llm_flops = [&](double t) {
    return t * (2 * llm_weights + 4.0 * static_cast<double>(llm.layers) * (t / 2) * static_cast<double>(llm.hidden));
  };
  const std::map<int64_t, LineWork> lines = SampleLines(run_dir, plan.data.seq_len);
  auto index = datalayer::SampleIndex::Open(run_dir + "/index.sqlite");
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  std::istringstream metrics(ReadText(run_dir + "/metrics.jsonl"));
  int steps = 0;
  for (std::string text; std::getline(metrics, text);) {
    const auto line = nlohmann::json::parse(text);
    if (!line.contains("step")) continue;
    ++steps;
    const int64_t step = line.at("step").get<int64_t>();
    auto record = (*index)->CommittedStep(step);
    ASSERT_TRUE(record.ok() && record->has_value()) << what << " step " << step;
    int64_t images = 0, audios = 0;
    double llm_tokens = 0, llm_forward = 0;
    for (int64_t id : (*record)->sample_ids) {
      const LineWork& w = lines.at(id);
      images += w.images;
      audios += w.audios;
      llm_tokens += static_cast<double>(w.tokens);
      llm_forward += llm_flops(static_cast<double>(w.tokens));
    }
    ASSERT_GT(images, 0) << what << " step " << step;
    ASSERT_LT(images, static_cast<int64_t>((*record)->sample_ids.size())) << "a sample without an image";
    const std::map<std::string, double> want{{"vit", static_cast<double>(images * vit_tokens)},
                                             {"proj", static_cast<double>(images * vit_tokens)},
                                             {"audio", static_cast<double>(audios * clip_frames)},
                                             {"audio_proj", static_cast<double>(audios * clip_frames)},
                                             {"llm", llm_tokens}};
    const auto& sections = line.at("sections");
    ASSERT_EQ(sections.size(), want.size()) << what << ": " << text;
    const double seconds = line.at("step_seconds").get<double>();
    for (const auto& [name, tokens] : want) {
      const auto& got = sections.at(name);
      EXPECT_EQ(got.at("tokens").get<double>(), tokens) << what << " step " << step << " " << name << ": " << text;
      EXPECT_NEAR(got.at("tokens_per_s").get<double>() * seconds, tokens, 1e-9 * tokens) << what << " " << name;
      EXPECT_GT(got.at("model_flops_per_s").get<double>(), 0) << what << " step " << step << " " << name;
    }
    // Every section trains: 3 forwards' FLOPs.
    const double proj_weights = static_cast<double>(proj.in_dim * proj.out_dim + proj.out_dim * proj.out_dim);
    EXPECT_NEAR(sections.at("proj").at("model_flops_per_s").get<double>() * seconds,
                3 * 2 * proj_weights * want.at("proj"), 1e-9 * 6 * proj_weights * want.at("proj"))
        << what << " step " << step;
    EXPECT_NEAR(sections.at("llm").at("model_flops_per_s").get<double>() * seconds, 3 * llm_forward,
                1e-9 * 3 * llm_forward)
        << what << " step " << step;
  }
  EXPECT_EQ(steps, kSteps) << what;
}

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
  ExpectRealWorkReported(root_ + "/sectioned/run", *plan, "sectioned");

  const RunResult fused = Run("omni.toml", root_ + "/fused", {"--ranks", "5", "--grouping", "fused"});
  ASSERT_EQ(fused.exit_code, 0) << fused.output;
  auto fused_plan = plan::LoadPlan(root_ + "/fused/plan.json");
  ASSERT_TRUE(fused_plan.ok()) << fused_plan.status().ToString();
  ASSERT_EQ(fused_plan->sections.size(), 1u);
  EXPECT_EQ(fused_plan->sections[0].components.size(), 5u);
  ExpectSameLosses(Losses(root_ + "/fused/run"), want, "fused");
  ExpectRealWorkReported(root_ + "/fused/run", *fused_plan, "fused");

  // The index holds each sample's audio placeholders beside its image ones.
  const std::string index_manifest = ReadText(root_ + "/sectioned/run/manifest.jsonl");
  EXPECT_NE(index_manifest.find("\"audio\": 50"), std::string::npos) << index_manifest.substr(0, 600);
  EXPECT_NE(index_manifest.find("\"image\": 17"), std::string::npos) << index_manifest.substr(0, 600);
}

// TP, DP and PP replicas: the ViT on 2 TP ranks, the audio encoder on 2 DP
// replicas, the LLM in 2 pipeline stages. Each sample's work is counted once
// (TP rank 0, the first stage; each DP replica its own samples), so every
// step reports what the samples bring, as on one rank per section.
TEST_F(OmniRun, ModelParallelRanksCountEachSampleOnce) {
  std::string spec = ReadText(workload_ + "/omni.toml");
  for (const auto& [section, pin] :
       std::vector<std::pair<std::string, std::string>>{{"vit", "tp = 2"}, {"audio", "dp = 2"}, {"llm", "pp = 2"}}) {
    const std::string head = "name = \"" + section + "\"\nmodel = \"" + section + "\"\n";
    const size_t at = spec.find(head);
    ASSERT_NE(at, std::string::npos) << section;
    spec.insert(at + head.size(), pin + "\n");
  }
  std::ofstream(workload_ + "/omni_mp.toml") << spec;
  const RunResult run = Run("omni_mp.toml", root_ + "/model_parallel", {"--ranks", "8", "--grouping", "sectioned"});
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto plan = plan::LoadPlan(root_ + "/model_parallel/plan.json");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto config = [&](const std::string& name) {
    return plan->sections.at(static_cast<size_t>(plan->section_index(name))).config;
  };
  ASSERT_EQ(config("vit").tp, 2);
  ASSERT_EQ(config("audio").dp, 2);
  ASSERT_EQ(config("llm").pp, 2);
  ExpectRealWorkReported(root_ + "/model_parallel/run", *plan, "model parallel");
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
