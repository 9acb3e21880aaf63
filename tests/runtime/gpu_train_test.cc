// SPDX-License-Identifier: Apache-2.0
// The tiny VLM trained on a CUDA device (labels gpu;mpi;runtime; issue #19
// item 3): maestro-worker ranks under mpirun with --device cuda (the ranks
// share the visible GPUs round robin; the plan is a CPU plan, so links and
// groups stay on MPI and every row crosses through the pinned host staging
// and the transfer stream), against the CPU fp32 reference:
//  - --precision fp32 on CUDA: every step within kCudaFp32VsCpu relative
//    (cuDNN's convolutions may use TF32, and reductions run in another
//    order);
//  - --precision bf16 (the GPU default) on CUDA: within kBf16VsFp32 of the
//    CPU fp32 reference and within kBf16VsBf16 of the CUDA bf16 reference
//    (--reference --device cuda --precision bf16), and the loss falls.
// The VLM reads a JSONL manifest of generated PNG images (0..2 per sample),
// so it needs no demo data set: a GPU machine runs it as it is. Skips only
// without a CUDA device (maestro-worker --version says "cuda no"). No torch
// headers here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;
using launcher::testing::RunResult;
using runtime_testing::Losses;

// Not measured on a GPU yet (this was written without one): the CPU's bf16
// runs stay within 1e-4 of fp32 (train_mpi_test.cc), CUDA's autocast casts
// more ops (conv, baddbmm) and cuDNN may use TF32, so these leave room. The
// test prints the three numbers: tighten them to ~10x after the first run.
constexpr double kCudaFp32VsCpu = 1e-3;
constexpr double kBf16VsFp32 = 1e-2;
constexpr double kBf16VsBf16 = 2e-3;

bool WorkerSeesCuda(std::string* why) {
  const auto version = runtime_testing::RunBuiltTool("maestro-worker", {"--version"});
  if (version.exit_code != 0) {
    *why = "maestro-worker --version failed: " + version.output;
    return false;
  }
  if (version.output.find("cuda yes") == std::string::npos) {
    *why = "this maestro-worker's libtorch sees no CUDA device (" + version.output + ")";
    return false;
  }
  return true;
}

#define MAESTRO_SKIP_WITHOUT_CUDA()                 \
  do {                                              \
    std::string why;                                \
    if (!WorkerSeesCuda(&why)) GTEST_SKIP() << why; \
  } while (0)

constexpr int64_t kImageToken = 300;  // below the tiny decoder's vocabulary of 512

// <dir>/img/<k>.png (6 gray 28x28 patterns) and <dir>/train.jsonl: sample i
// has i % 3 images, each as 16 placeholder tokens then a word naming it,
// then counting text.
std::string WriteManifest(const std::string& dir, int samples) {
  return runtime_testing::WriteImageManifest(dir, samples, 16, kImageToken, {},
                                             runtime_testing::ImageManifestKind::kPngOnly);
}

// The tiny VLM (vit -> llm) on the manifest, vit DP 1, llm DP `llm_dp`, on
// this machine's ranks.
plan::Plan VlmPlan(const std::string& manifest, int llm_dp, int64_t steps) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_vlm.toml", compiler::Grouping::kSectioned);
  for (auto& s : p.sections) {
    s.config.pp = s.config.cp = s.config.tp = 1;
    s.config.dp = s.name == "llm" ? llm_dp : 1;
    s.config.micro_batch = s.name == "llm" ? 4 : 8;
  }
  runtime_testing::UseImageManifest(p, manifest, kImageToken, 48, 16);
  runtime_testing::PlaceOnThisMachine(p, steps);  // MPI backends: the host staging path
  return p;
}

// Fresh(name): <test-tmp>/runtime_gpu_train/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_gpu_train"};

// The ranks on CUDA with their per-step lines, a communication timeout of 120 s.
RunResult Sectioned(const plan::Plan& p, const std::string& plan_path, const std::string& run_dir,
                    const std::string& precision) {
  runtime_testing::WorkerOptions options;
  options.per_step_lines = true;
  options.comm_timeout_s = "120";
  return runtime_testing::RunWorkers(p, plan_path, run_dir, {"--device", "cuda", "--precision", precision}, options);
}

RunResult Reference(const std::string& plan_path, const std::string& run_dir, const std::string& device,
                    const std::string& precision) {
  return runtime_testing::RunReference(plan_path, run_dir, {"--device", device, "--precision", precision});
}

// Worst relative difference of `a` from `b` over their common steps.
double WorstRelative(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b) {
  double worst = 0;
  for (const auto& [step, loss] : a) {
    EXPECT_TRUE(b.count(step)) << "step " << step;
    if (!b.count(step)) continue;
    EXPECT_TRUE(std::isfinite(loss)) << "step " << step;
    worst = std::max(worst, std::abs(loss - b.at(step)) / std::abs(b.at(step)));
  }
  return worst;
}

TEST(GpuTrain, TinyVlmOnCudaTracksTheCpuFp32Reference) {
  MAESTRO_SKIP_WITHOUT_CUDA();
  const std::string dir = Fresh("vlm");
  const plan::Plan p = VlmPlan(WriteManifest(dir + "/data", 48), 2, 6);
  const std::string plan_path = dir + "/plan.json";
  ASSERT_TRUE(plan::SavePlan(p, plan_path).ok());

  const auto cpu = Reference(plan_path, dir + "/cpu_fp32", "cpu", "fp32");
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  const auto fp32 = Sectioned(p, plan_path, dir + "/cuda_fp32", "fp32");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  EXPECT_NE(fp32.output.find("computes on cuda:"), std::string::npos) << fp32.output;
  const auto bf16 = Sectioned(p, plan_path, dir + "/cuda_bf16", "bf16");
  ASSERT_EQ(bf16.exit_code, 0) << bf16.output;
  const auto ref_bf16 = Reference(plan_path, dir + "/cuda_bf16_reference", "cuda", "bf16");
  ASSERT_EQ(ref_bf16.exit_code, 0) << ref_bf16.output;

  const auto c = Losses(dir + "/cpu_fp32");
  const auto g32 = Losses(dir + "/cuda_fp32");
  const auto g16 = Losses(dir + "/cuda_bf16");
  const auto r16 = Losses(dir + "/cuda_bf16_reference");
  ASSERT_EQ(static_cast<int64_t>(c.size()), p.data.steps);
  ASSERT_EQ(g32.size(), c.size());
  ASSERT_EQ(g16.size(), c.size());
  ASSERT_EQ(r16.size(), c.size());
  const double fp32_vs_cpu = WorstRelative(g32, c);
  const double bf16_vs_cpu = WorstRelative(g16, c);
  const double bf16_vs_reference = WorstRelative(g16, r16);
  std::printf("cuda fp32 vs cpu fp32 %.3g; cuda bf16 vs cpu fp32 %.3g; cuda bf16 sectioned vs reference %.3g\n",
              fp32_vs_cpu, bf16_vs_cpu, bf16_vs_reference);
  EXPECT_LE(fp32_vs_cpu, kCudaFp32VsCpu);
  EXPECT_LE(bf16_vs_cpu, kBf16VsFp32);
  EXPECT_LE(bf16_vs_reference, kBf16VsBf16);
  EXPECT_GT(bf16_vs_cpu, 0.0) << "bf16 on CUDA gave fp32's losses exactly: was --precision bf16 ignored?";
  EXPECT_LT(g16.rbegin()->second, g16.begin()->second);
}

}  // namespace
}  // namespace maestro
