// SPDX-License-Identifier: Apache-2.0
// `maestro profile --kernels -o FILE` on the CPU (quick sweep): the file is
// a device profile the compiler reads (compiler/device_profile.h), with the
// grid's rows, positive finite values, interpolation that returns the
// measured points, and sources that name the command; the step model from
// parts prices its validation decoder step within a loose factor; bad
// input (a missing folder, a bad grid, --kernels with a spec or without -o)
// is refused with a clear message and leaves the file as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "compiler/device_profile.h"
#include "compiler/step_model.h"
#include "plan/plan.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"

namespace maestro::cli {
namespace {

namespace fs = std::filesystem;
using launcher::testing::RunCaptured;
using launcher::testing::RunResult;

const std::string kMaestro = std::string(MAESTRO_BIN_DIR) + "/maestro";

std::string FreshDir(const std::string& name) {
  const std::string dir = std::string(MAESTRO_TEST_TMP) + "/kernel-profile-" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The quick CPU sweep into `path`; fails the test when it does not succeed.
RunResult ProfileCpu(const std::string& path) {
  RunResult r = RunCaptured({kMaestro, "profile", "--kernels", "-o", path, "--device", "cpu", "--quick"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r;
}

bool Positive(double x) {
  return std::isfinite(x) && x > 0;
}

TEST(KernelProfileCli, CpuQuickSweepWritesADeviceProfileTheCompilerReads) {
  const std::string dir = FreshDir("cpu");
  const std::string path = dir + "/cpu.json";
  const RunResult run = ProfileCpu(path);
  ASSERT_EQ(run.exit_code, 0);
  EXPECT_NE(run.output.find("wrote " + path), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  auto profile = compiler::LoadDeviceProfileFile(path);
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  const auto doc = nlohmann::json::parse(fixtures::ReadFile(path));
  EXPECT_EQ(doc.at("device"), "cpu");
  EXPECT_EQ(doc.at("dtype"), "fp32");  // the runtime trains fp32 on the CPU

  // GEMM: the quick CPU grid, K and N in {64, 256, 1024}, M 64, 256, 1024.
  const std::vector<double> ms{64, 256, 1024};
  std::set<std::pair<double, double>> rows;
  double best_tflops = 0;
  for (const auto& row : profile->gemm) {
    rows.insert({row.k, row.n});
    EXPECT_EQ(row.m, ms) << row.label;
    for (double t : row.tflops) {
      EXPECT_TRUE(Positive(t)) << row.label << ": " << t;
      best_tflops = std::max(best_tflops, t);
    }
  }
  std::set<std::pair<double, double>> expected;
  for (double k : {64, 256, 1024}) {
    for (double n : {64, 256, 1024}) expected.insert({k, n});
  }
  EXPECT_EQ(rows, expected);
  EXPECT_EQ(profile->gemm.size(), expected.size());

  // The compiler's interpolation returns the measured points, and between
  // two points of a row a value between them.
  for (const auto& row : profile->gemm) {
    for (size_t i = 0; i < row.m.size(); ++i) {
      EXPECT_DOUBLE_EQ(profile->GemmFlopsPerSecond(row.m[i], row.k, row.n), row.tflops[i] * 1e12)
          << row.label << " M " << row.m[i];
      if (i + 1 == row.m.size()) continue;
      const double between = profile->GemmFlopsPerSecond(std::sqrt(row.m[i] * row.m[i + 1]), row.k, row.n);
      EXPECT_GE(between, std::min(row.tflops[i], row.tflops[i + 1]) * 1e12 * (1 - 1e-12)) << row.label;
      EXPECT_LE(between, std::max(row.tflops[i], row.tflops[i + 1]) * 1e12 * (1 + 1e-12)) << row.label;
    }
  }

  // Attention: 4 x 32 and 4 x 64 at T 64, 256; forward and forward+backward.
  ASSERT_EQ(profile->attention.size(), 2u);
  const std::vector<double> ts{64, 256};
  for (const auto& row : profile->attention) {
    EXPECT_EQ(row.heads, 4);
    EXPECT_TRUE(row.head_dim == 32 || row.head_dim == 64) << row.head_dim;
    EXPECT_EQ(row.t, ts);
    for (size_t i = 0; i < row.t.size(); ++i) {
      EXPECT_TRUE(Positive(row.fwd_tflops[i]) && Positive(row.fwd_bwd_tflops[i])) << row.head_dim << " " << row.t[i];
      EXPECT_DOUBLE_EQ(profile->AttentionFlopsPerSecond(row.head_dim, row.t[i], false), row.fwd_tflops[i] * 1e12);
      EXPECT_DOUBLE_EQ(profile->AttentionFlopsPerSecond(row.head_dim, row.t[i], true), row.fwd_bwd_tflops[i] * 1e12);
    }
    const double between = profile->AttentionFlopsPerSecond(row.head_dim, 128, true);
    EXPECT_GE(between, std::min(row.fwd_bwd_tflops[0], row.fwd_bwd_tflops[1]) * 1e12 * (1 - 1e-12));
    EXPECT_LE(between, std::max(row.fwd_bwd_tflops[0], row.fwd_bwd_tflops[1]) * 1e12 * (1 + 1e-12));
  }
  EXPECT_EQ(doc.at("attention").at("flops_convention").get<std::string>().find("forward 4*B*T*(T/2)*heads*head_dim"),
            0u);

  // Constants: positive; on the CPU the "peak" is the best GEMM measured.
  EXPECT_TRUE(Positive(profile->memory_bytes_per_s));
  EXPECT_TRUE(Positive(profile->kernel_launch_seconds));
  // The issue probe is timed on the CPU too (fp32, its phases apart), but
  // only a GPU's profile gets an issue cost (cli/issue_calibration.h).
  const auto& probe = doc.at("issue_probe");
  EXPECT_TRUE(Positive(probe.at("forward_seconds").get<double>()));
  EXPECT_TRUE(Positive(probe.at("backward_seconds").get<double>()));
  EXPECT_EQ(probe.at("precision"), "fp32");
  EXPECT_FALSE(doc.contains("training_issue_us"));
  EXPECT_EQ(profile->training_issue_seconds, 0);
  EXPECT_DOUBLE_EQ(profile->peak_flops, best_tflops * 1e12);
  EXPECT_NE(doc.at("peak_bf16_tflops").at("source").get<std::string>().find("NOT a datasheet peak"), std::string::npos);

  // One validation case: the CPU decoder's step.
  ASSERT_EQ(profile->validation.size(), 1u);
  EXPECT_EQ(profile->validation[0].micro_batch, 2);
  EXPECT_EQ(profile->validation[0].seq_len, 128);
  EXPECT_TRUE(Positive(profile->validation[0].seconds_per_step));

  // Every table and constant says where, when and how it was measured.
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const std::vector<std::string> sources{doc.at("gemm").at("source"),
                                         doc.at("attention").at("source"),
                                         doc.at("validation").at("source"),
                                         doc.at("peak_bf16_tflops").at("source"),
                                         doc.at("memory_bandwidth_tb_per_s").at("source"),
                                         doc.at("kernel_launch_us").at("source"),
                                         doc.at("issue_probe").at("source"),
                                         doc.at("source").at("setup")};
  for (const auto& s : sources) {
    EXPECT_NE(s.find("maestro profile --kernels --device cpu --quick"), std::string::npos) << s;
    EXPECT_NE(s.find(host), std::string::npos) << s;
    EXPECT_NE(s.find("fp32"), std::string::npos) << s;
    EXPECT_NE(s.find("libtorch "), std::string::npos) << s;
  }
  EXPECT_NE(doc.at("source").at("document").get<std::string>().find("maestro profile --kernels"), std::string::npos);
  EXPECT_EQ(doc.at("source").at("date").get<std::string>().size(), 10u);  // YYYY-MM-DD
}

// The step model from parts, priced with this CPU's own tables, against the
// decoder step measured in the same run. The model's op list was fitted to
// eager CUDA (bf16 bytes, fused flash attention), not to fp32 CPU eager:
// a loose factor of 3 either way.
TEST(KernelProfileCli, StepModelPricesTheMeasuredCpuDecoderStepWithinAFactorOfThree) {
  const std::string dir = FreshDir("step");
  const std::string path = dir + "/cpu.json";
  ASSERT_EQ(ProfileCpu(path).exit_code, 0);
  auto profile = compiler::LoadDeviceProfileFile(path);
  ASSERT_TRUE(profile.ok()) << profile.status().ToString();
  ASSERT_EQ(profile->validation.size(), 1u);
  const auto& measured = profile->validation[0];
  const auto shape = nlohmann::json::parse(fixtures::ReadFile(path)).at("validation").at("cases").at(0).at("shape");
  plan::ModelDesc desc;
  desc.kind = plan::ModelKind::kDecoder;
  desc.hidden = shape.at("hidden").get<int64_t>();
  desc.layers = shape.at("layers").get<int64_t>();
  desc.heads = shape.at("heads").get<int64_t>();
  desc.kv_heads = shape.at("kv_heads").get<int64_t>();
  desc.ffn_hidden = shape.at("ffn_hidden").get<int64_t>();
  desc.vocab = shape.at("vocab").get<int64_t>();
  desc.tie_embeddings = shape.at("tie_embeddings").get<bool>();
  auto predicted = compiler::PredictDecoderStepFromParts(desc, measured.micro_batch, measured.seq_len, 1, *profile);
  ASSERT_TRUE(predicted.ok()) << predicted.status().ToString();
  const double ratio = measured.seconds_per_step / predicted->total_seconds;
  std::cout << "measured " << measured.seconds_per_step << " s/step, predicted " << predicted->total_seconds
            << " s (gemm " << predicted->gemm_seconds << ", attention " << predicted->attention_seconds << ", memory "
            << predicted->memory_seconds << ", optimizer " << predicted->optimizer_seconds << "): measured / predicted "
            << ratio << "\n";
  RecordProperty("measured_over_predicted", std::to_string(ratio));
  EXPECT_GT(ratio, 1.0 / 3.0);
  EXPECT_LT(ratio, 3.0);
}

TEST(KernelProfileCli, AMissingFolderIsRefusedBeforeMeasuringAndNothingIsWritten) {
  const std::string dir = FreshDir("missing");
  const std::string path = dir + "/no/such/folder/cpu.json";
  const RunResult r = RunCaptured({kMaestro, "profile", "--kernels", "-o", path, "--device", "cpu"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(path), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mkdir -p " + dir + "/no/such/folder"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("gemm"), std::string::npos) << "measured before refusing: " << r.output;
  EXPECT_FALSE(fs::exists(dir + "/no"));
}

TEST(KernelProfileCli, ABadGridLeavesAnExistingFileAsItWas) {
  const std::string dir = FreshDir("bad-grid");
  const std::string path = dir + "/device.json";
  std::ofstream(path) << "{\"kept\": true}\n";
  const RunResult r =
      RunCaptured({kMaestro, "profile", "--kernels", "-o", path, "--device", "cpu", "--kernel-arg=--gemm-m=256,64"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--gemm-m must be strictly ascending (256 then 64)"), std::string::npos) << r.output;
  EXPECT_EQ(fixtures::ReadFile(path), "{\"kept\": true}\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(KernelProfileCli, KernelsTakesNoSpecAndNeedsAnOutputFile) {
  const std::string spec = std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_vlm.toml";
  const std::string dir = FreshDir("cli");
  const RunResult with_spec = RunCaptured({kMaestro, "profile", "--kernels", spec, "-o", dir + "/x.json"});
  EXPECT_NE(with_spec.exit_code, 0);
  EXPECT_NE(with_spec.output.find("spec excludes --kernels"), std::string::npos) << with_spec.output;

  const RunResult without_out = RunCaptured({kMaestro, "profile", "--kernels"});
  EXPECT_NE(without_out.exit_code, 0);
  EXPECT_NE(without_out.output.find("--kernels requires --out"), std::string::npos) << without_out.output;

  const RunResult spec_option = RunCaptured({kMaestro, "profile", "--kernels", "-o", dir + "/x.json", "--ranks", "2"});
  EXPECT_NE(spec_option.exit_code, 0);
  EXPECT_NE(spec_option.output.find("--kernels excludes --ranks"), std::string::npos) << spec_option.output;

  const RunResult nothing = RunCaptured({kMaestro, "profile"});
  EXPECT_NE(nothing.exit_code, 0);
  EXPECT_NE(nothing.output.find("or --kernels -o FILE is required"), std::string::npos) << nothing.output;

  // --device also chooses a spec's devices (GPUs or the CPU, as maestro run); --quick is --kernels' alone.
  const RunResult quick_alone = RunCaptured({kMaestro, "profile", spec, "--quick"});
  EXPECT_NE(quick_alone.exit_code, 0);
  EXPECT_NE(quick_alone.output.find("--quick requires --kernels"), std::string::npos) << quick_alone.output;
  EXPECT_TRUE(fs::is_empty(dir));
}

}  // namespace
}  // namespace maestro::cli
