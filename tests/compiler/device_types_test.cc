// SPDX-License-Identifier: Apache-2.0
// GPU types as data (issue #23): [cluster.gpu.NAME] `type` (a built-in
// device profile) or `kernels` (a profile file), the documented default for
// a type with neither (the report says so), and the cost model pricing a
// section with the step model from parts when its device has tables.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/device_profile.h"
#include "compiler/runtime_support.h"
#include "compiler/spec.h"
#include "compiler/step_model.h"
#include "compiler/workload_builder.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

namespace fs = std::filesystem;

// A KD spec (teacher forward-only, student trains) on GPU type `gpu_keys`.
std::string KdSpec(const std::string& gpu_keys, const std::string& name = "h100") {
  return R"([job]
name = "t"
[cluster]
nodes = 4
gpus_per_node = 8
[cluster.gpu.)" +
         name + "]\n" + gpu_keys + R"(
[data]
global_batch = 64
seq_len = 2048
[models.teacher]
kind = "decoder"
hidden = 2048
layers = 8
heads = 16
kv_heads = 4
ffn_hidden = 5632
vocab = 32000
[models.student]
kind = "decoder"
hidden = 1024
layers = 4
heads = 16
kv_heads = 4
ffn_hidden = 2816
vocab = 32000
[[section]]
name = "teacher"
model = "teacher"
mode = "forward"
[[section]]
name = "student"
model = "student"
loss = { kind = "kd" }
[[edge]]
from = "teacher"
to = "student"
tensor = "teacher_hidden"
)";
}

StatusOr<Spec> Parse(const std::string& text, const std::string& dir = ".") {
  return ParseSpecString(text, "spec.toml", dir);
}

std::string ErrorOf(const std::string& text, const std::string& dir = ".") {
  auto s = Parse(text, dir);
  return s.ok() ? "" : s.status().message();
}

TEST(DeviceTypes, ABuiltinTypeBringsItsTablesAndItsPeak) {
  auto s = Parse(KdSpec("type = \"h100_sxm\"\nmemory_gb = 80\n"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const GpuTypeSpec& g = s->cluster.gpu_types.at(0);
  ASSERT_TRUE(g.kernels);
  EXPECT_EQ(g.kernels_origin, "builtin:h100_sxm");
  EXPECT_TRUE(g.kernels_note.empty());
  EXPECT_DOUBLE_EQ(g.tflops_bf16, 989.4);  // the profile's peak when the spec gives none
  auto own = Parse(KdSpec("type = \"h100_sxm\"\ntflops_bf16 = 900\n"));
  ASSERT_TRUE(own.ok());
  EXPECT_DOUBLE_EQ(own->cluster.gpu_types.at(0).tflops_bf16, 900);  // the spec's own number wins
  auto bw = Parse(KdSpec("type = \"h100_sxm\"\nmemory_bandwidth_tbps = 2\n"));
  ASSERT_TRUE(bw.ok());
  EXPECT_DOUBLE_EQ(bw->cluster.gpu_types.at(0).kernels->memory_bytes_per_s, 2e12);
}

TEST(DeviceTypes, WrongTypesAndFilesAreNamedWithTheFix) {
  std::string e = ErrorOf(KdSpec("type = \"b200\"\n"));
  EXPECT_NE(e.find("spec.toml:"), std::string::npos) << e;
  EXPECT_NE(e.find("type = 'b200'"), std::string::npos) << e;
  EXPECT_NE(e.find("h100_sxm"), std::string::npos) << e;  // the known names
  e = ErrorOf(KdSpec("type = \"h100_sxm\"\nkernels = \"k.json\"\n"));
  EXPECT_NE(e.find("not both"), std::string::npos) << e;
  e = ErrorOf(KdSpec("kernels = \"missing/k.json\"\n"), "specs");
  EXPECT_NE(e.find("specs/missing/k.json"), std::string::npos) << e;
  EXPECT_NE(e.find("maestro profile --kernels"), std::string::npos) << e;
}

TEST(DeviceTypes, AKernelsFileIsReadRelativeToTheSpecFolder) {
  const fs::path dir = fs::path(::testing::TempDir()) / "maestro_device_types_kernels";
  fs::create_directories(dir);
  auto h100 = BuiltinDeviceProfile("h100_sxm");
  ASSERT_TRUE(h100.ok());
  // The built-in file's text, renamed: any valid profile will do.
  nlohmann::json j;
  {
    const fs::path src = fs::path(MAESTRO_SOURCE_DIR) / "compiler/devices/h100_sxm.json";
    std::ifstream in(src);
    ASSERT_TRUE(in) << src;
    j = nlohmann::json::parse(in);
  }
  j["name"] = "my_gpu";
  j["peak_bf16_tflops"]["value"] = 500;
  std::ofstream(dir / "my_gpu.json") << j.dump();
  auto s = Parse(KdSpec("kernels = \"my_gpu.json\"\n"), dir.string());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const GpuTypeSpec& g = s->cluster.gpu_types.at(0);
  ASSERT_TRUE(g.kernels);
  EXPECT_EQ(g.kernels->name, "my_gpu");
  EXPECT_EQ(g.kernels_origin, "file:my_gpu.json");
  EXPECT_DOUBLE_EQ(g.tflops_bf16, 500);
  // A broken file: the error names the field.
  j["gemm"]["rows"][0]["tflops"] = nlohmann::json::array({1, 2});
  std::ofstream(dir / "broken.json") << j.dump();
  const std::string e = ErrorOf(KdSpec("kernels = \"broken.json\"\n"), dir.string());
  EXPECT_NE(e.find("/gemm/rows/0/tflops"), std::string::npos) << e;
}

TEST(DeviceTypes, ATypeWithNeitherIsPricedWithTheDefaultScaledAndTheReportSaysSo) {
  auto s = Parse(KdSpec("tflops_bf16 = 312\nmemory_gb = 80\n", "a100"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const GpuTypeSpec& g = s->cluster.gpu_types.at(0);
  ASSERT_TRUE(g.kernels);
  EXPECT_EQ(g.kernels_origin, "default:h100_sxm");
  EXPECT_NE(g.kernels_note.find("scaled"), std::string::npos) << g.kernels_note;
  auto h100 = BuiltinDeviceProfile("h100_sxm");
  ASSERT_TRUE(h100.ok());
  // Every rate scaled by 312 / 989.4; the bandwidth kept.
  const double f = 312e12 / h100->peak_flops;
  EXPECT_NEAR(g.kernels->GemmFlopsPerSecond(4096, 4096, 14336), f * h100->GemmFlopsPerSecond(4096, 4096, 14336), 1e3);
  EXPECT_NEAR(g.kernels->AttentionFlopsPerSecond(128, 4096, true), f * h100->AttentionFlopsPerSecond(128, 4096, true),
              1e3);
  EXPECT_DOUBLE_EQ(g.kernels->memory_bytes_per_s, h100->memory_bytes_per_s);

  CompileOptions o;
  auto r = Compile(*s, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->report.find("note: GPU type 'a100' names no `type` or `kernels`"), std::string::npos) << r->report;
  const auto js = nlohmann::json::parse(r->report_json);
  ASSERT_EQ(js["gpu_types"].size(), 1u);
  EXPECT_EQ(js["gpu_types"][0]["kernels"], "default:h100_sxm");
  EXPECT_NE(js["gpu_types"][0]["note"].get<std::string>().find("Unknown GPU types"), std::string::npos);

  // A CPU type without a kernels file keeps the efficiency curve, and says so.
  auto cpu = Parse(KdSpec("cpu = true\n", "cpu"));
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  EXPECT_FALSE(cpu->cluster.gpu_types.at(0).kernels);
  EXPECT_NE(cpu->cluster.gpu_types.at(0).kernels_note.find("efficiency curve"), std::string::npos);
}

// The cost model prices compute with PredictSectionPass when the device has
// tables: the stage is its forward + backward, the forward share and the
// optimizer are its own; the teacher runs forward only; the student also
// runs the teacher head and the KL.
TEST(DeviceTypes, TheCostModelPricesSectionsWithTheStepModelFromParts) {
  auto s = Parse(KdSpec("type = \"h100_sxm\"\n"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const std::vector<DeviceType> devices = DevicesOf(*s);
  ASSERT_TRUE(devices.at(0).kernels);
  EXPECT_EQ(devices.at(0).precision, ParamPrecision::kMixedBf16);  // what maestro-worker runs on a GPU
  auto w = BuildWorkload(*s, devices, {});
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  const SectionWork& teacher = w->sections.at(0);
  const SectionWork& student = w->sections.at(1);
  EXPECT_FALSE(teacher.lm_loss);  // forward only, hands its hidden state on
  EXPECT_TRUE(student.lm_loss);
  EXPECT_EQ(student.kd_teacher_hidden, 2048);
  const CostModel model(devices, 64);
  plan::ParallelConfig c;
  c.dp = 4;
  c.micro_batch = 2;
  const SectionCost sc = model.Evaluate(student, c);
  EXPECT_TRUE(sc.step_model);
  PassShape shape;
  shape.samples = 2;
  shape.tokens_per_sample = 2048;
  shape.attention_context = 2048;
  shape.lm_loss = true;
  shape.kd_teacher_hidden = 2048;
  shape.fused.gqa_in_sdpa = kRuntimeSupport.gqa_in_sdpa;  // the kernels the runtime uses (runtime_support.h)
  shape.fused.rms_norm = kRuntimeSupport.fused_rms_norm;
  shape.fused.adamw = kRuntimeSupport.fused_adamw;
  shape.param_bytes = 4;       // AdamW and .grad accumulation on the fp32 masters
  shape.optimizer_shards = 4;  // ZeRO-1 over DP 4 (zero_stage 1 by default)
  auto pass = PredictSectionPass(student.model, shape, *devices[0].kernels);
  ASSERT_TRUE(pass.ok()) << pass.status().ToString();
  {
    // Without ZeRO-1 every replica steps all its parameters: 8 kernels per
    // tensor (or the fused launches) over 4x the elements.
    plan::ParallelConfig whole = c;
    whole.zero_stage = 0;
    const SectionCost replicated = model.Evaluate(student, whole);
    PassShape unsharded = shape;
    unsharded.optimizer_shards = 1;
    auto full = PredictSectionPass(student.model, unsharded, *devices[0].kernels);
    ASSERT_TRUE(full.ok());
    EXPECT_NEAR(replicated.optimizer_seconds, full->optimizer_seconds + 7 * full->accumulate_seconds, 1e-12);
    EXPECT_LT(pass->optimizer_seconds, full->optimizer_seconds);
    EXPECT_GT(pass->optimizer_seconds, full->optimizer_seconds / 8);  // the shard is 1/4, unfused
  }
  EXPECT_NEAR(sc.stage_seconds, pass->forward_seconds + pass->backward_seconds, 1e-12);
  EXPECT_NEAR(sc.forward_share, pass->forward_seconds / (pass->forward_seconds + pass->backward_seconds), 1e-12);
  // 16 samples per replica in 8 micro-batches: AdamW once, 7 accumulations.
  EXPECT_NEAR(sc.optimizer_seconds, pass->optimizer_seconds + 7 * pass->accumulate_seconds, 1e-12);
  EXPECT_NEAR(sc.step_seconds, 8 * sc.stage_seconds + sc.dp_sync_seconds + sc.optimizer_seconds, 1e-12);

  // Without the KD head the student is cheaper; the teacher has no backward.
  shape.kd_teacher_hidden = 0;
  auto plain = PredictSectionPass(student.model, shape, *devices[0].kernels);
  ASSERT_TRUE(plain.ok());
  EXPECT_GT(pass->forward_seconds, plain->forward_seconds);
  const SectionCost tc = model.Evaluate(teacher, c);
  EXPECT_TRUE(tc.step_model);
  EXPECT_DOUBLE_EQ(tc.forward_share, 1.0);
  EXPECT_DOUBLE_EQ(tc.optimizer_seconds, 0.0);

  // The same device without tables: the efficiency curve, as before.
  std::vector<DeviceType> curve = devices;
  curve[0].kernels = nullptr;
  const SectionCost legacy = CostModel(curve, 64).Evaluate(student, c);
  EXPECT_FALSE(legacy.step_model);
  EXPECT_NE(legacy.stage_seconds, sc.stage_seconds);
}

}  // namespace
}  // namespace maestro::compiler
