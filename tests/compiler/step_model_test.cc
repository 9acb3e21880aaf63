// SPDX-License-Identifier: Apache-2.0
// The device profile (compiler/devices/h100_sxm.json: reading, errors,
// interpolation) and the step model from parts against the H100
// measurements (../shared/research/h100-measurements.md, section 1).
#include "compiler/step_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "compiler/device_profile.h"
#include "tests/fixtures/models.h"

namespace maestro::compiler {
namespace {

DeviceProfile H100() {
  auto p = BuiltinDeviceProfile("h100_sxm");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

plan::ModelDesc Decoder(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t ffn,
                        int64_t vocab, bool tied, bool qkv_bias) {
  fixtures::DecoderShape shape;
  shape.hidden = hidden;
  shape.layers = layers;
  shape.heads = heads;
  shape.kv_heads = kv_heads;
  shape.ffn_hidden = ffn;
  shape.vocab = vocab;
  plan::ModelDesc d = fixtures::DecoderModel(shape);
  d.head_dim = head_dim;
  d.tie_embeddings = tied;
  if (qkv_bias) d.extra["qkv_bias"] = 1;
  return d;
}

// Public configs (config.json on the Hugging Face hub).
plan::ModelDesc Llama32_1B() {
  return Decoder(2048, 16, 32, 8, 64, 8192, 128256, true, false);
}
plan::ModelDesc Qwen25_05B() {
  return Decoder(896, 24, 14, 2, 64, 4864, 151936, true, true);
}
plan::ModelDesc Llama3_8BLayers8() {
  return Decoder(4096, 8, 32, 8, 128, 14336, 128256, false, false);
}

TEST(DeviceProfile, BuiltinH100CarriesItsNumbersAndValidationCases) {
  const DeviceProfile p = H100();
  EXPECT_EQ(p.name, "h100_sxm");
  EXPECT_DOUBLE_EQ(p.peak_flops, 989.4e12);
  EXPECT_DOUBLE_EQ(p.memory_bytes_per_s, 3.0e12);
  EXPECT_GT(p.kernel_launch_seconds, 0);
  EXPECT_EQ(p.gemm.size(), 13u);
  EXPECT_EQ(p.attention.size(), 3u);
  EXPECT_EQ(p.validation.size(), 6u);
  EXPECT_NE(p.origin.find("h100_sxm.json"), std::string::npos);
  auto missing = BuiltinDeviceProfile("a100_imaginary");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("h100_sxm"), std::string::npos) << missing.status().ToString();
}

// A minimal valid profile to break field by field.
nlohmann::json MinimalProfile() {
  return nlohmann::json::parse(R"({
    "schema": "maestro.device_profile", "schema_version": 1, "name": "tiny", "source": "a test",
    "peak_bf16_tflops": {"value": 100, "source": "t"},
    "memory_bandwidth_tb_per_s": {"value": 1, "source": "t"},
    "kernel_launch_us": {"value": 5, "source": "t"},
    "gemm": {"source": "t", "m": [100, 1000], "rows": [{"k": 64, "n": 64, "tflops": [10, 50]}]},
    "attention": {"source": "t", "t": [128, 1024],
                  "rows": [{"heads": 8, "head_dim": 64, "fwd_tflops": [5, 20], "fwd_bwd_tflops": [4, 15]}]}
  })");
}

TEST(DeviceProfile, ErrorsNameTheFileAndTheField) {
  ASSERT_TRUE(ParseDeviceProfile(MinimalProfile().dump(), "tiny.json").ok());
  {
    auto j = MinimalProfile();
    j["peak_bf16_tflops"].erase("source");
    auto p = ParseDeviceProfile(j.dump(), "dev/tiny.json");
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("dev/tiny.json"), std::string::npos);
    EXPECT_NE(p.status().message().find("/peak_bf16_tflops/source"), std::string::npos) << p.status().ToString();
  }
  {
    auto j = MinimalProfile();
    j["gemm"]["rows"][0]["tflops"] = {10, 20, 30};
    auto p = ParseDeviceProfile(j.dump(), "tiny.json");
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("/gemm/rows/0/tflops"), std::string::npos) << p.status().ToString();
  }
  {
    auto j = MinimalProfile();
    j["schema_version"] = 2;
    auto p = ParseDeviceProfile(j.dump(), "tiny.json");
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("schema_version"), std::string::npos) << p.status().ToString();
  }
  {
    auto j = MinimalProfile();
    j["attention"]["t"] = {1024, 128};
    auto p = ParseDeviceProfile(j.dump(), "tiny.json");
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("/attention/t must be strictly ascending"), std::string::npos);
  }
  auto bad = ParseDeviceProfile("{\"schema\": ", "broken.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("broken.json"), std::string::npos);
  EXPECT_FALSE(LoadDeviceProfileFile("/nonexistent/dir/x.json").ok());
}

TEST(DeviceProfile, GemmInterpolationHitsTablePointsSkipsTheNoisyOneAndClamps) {
  const DeviceProfile p = H100();
  EXPECT_DOUBLE_EQ(p.GemmFlopsPerSecond(1024, 1280, 640), 129e12);    // ViT-H MLP TP 8
  EXPECT_DOUBLE_EQ(p.GemmFlopsPerSecond(8192, 4096, 14336), 701e12);  // Llama-8B FFN TP 1
  // The starred 386 at (2048, 2048, 8192) is skipped: halfway in log M between 583 and 728.
  EXPECT_NEAR(p.GemmFlopsPerSecond(2048, 2048, 8192), (583e12 + 728e12) / 2, 1e9);
  // Clamped: past the table's largest M and N, its corner.
  EXPECT_DOUBLE_EQ(p.GemmFlopsPerSecond(1e6, 4096, 1e6), 724e12);
  EXPECT_DOUBLE_EQ(p.GemmFlopsPerSecond(16, 896, 100), 17e12);
  // Between two N rows of the same K: between their values.
  const double mid = p.GemmFlopsPerSecond(1024, 896, 1700);
  EXPECT_GT(mid, 145e12);
  EXPECT_LT(mid, 233e12);
  EXPECT_DOUBLE_EQ(p.AttentionFlopsPerSecond(128, 4096, true), 489e12);
  EXPECT_DOUBLE_EQ(p.AttentionFlopsPerSecond(64, 2048, false), 400e12);
  EXPECT_DOUBLE_EQ(p.AttentionFlopsPerSecond(80, 64, true), 96e12);  // clamped below T = 256
}

struct Case {
  const char* model;
  int64_t micro_batch, seq_len;
};

TEST(StepModel, SixMeasuredH100CasesWithin15Percent) {
  const DeviceProfile p = H100();
  const std::map<std::string, plan::ModelDesc> models = {{"Llama-3.2-1B", Llama32_1B()},
                                                         {"Qwen2.5-0.5B", Qwen25_05B()},
                                                         {"Llama-3-8B layer shape, 8 layers", Llama3_8BLayers8()}};
  ASSERT_EQ(p.validation.size(), 6u);
  for (const ValidationCase& c : p.validation) {
    ASSERT_TRUE(models.count(c.model)) << c.model;
    auto step = PredictDecoderStepFromParts(models.at(c.model), c.micro_batch, c.seq_len, 1, p);
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    const double ratio = step->total_seconds / c.seconds_per_step;
    // The table of docs/step_model.md.
    std::printf("%-34s %2lld x %5lld  predicted %.4f s  measured %.4f s  ratio %.3f  mfu %.3f\n", c.model.c_str(),
                static_cast<long long>(c.micro_batch), static_cast<long long>(c.seq_len), step->total_seconds,
                c.seconds_per_step, ratio, step->mfu);
    EXPECT_NEAR(ratio, 1.0, 0.15) << c.model << " " << c.micro_batch << " x " << c.seq_len << ": predicted "
                                  << step->total_seconds << " s, measured " << c.seconds_per_step << " s (gemm "
                                  << step->gemm_seconds << ", attention " << step->attention_seconds << ", memory "
                                  << step->memory_seconds << ", optimizer " << step->optimizer_seconds << ")";
    double sum = 0;
    for (const auto& term : step->terms) sum += term.seconds;
    EXPECT_NEAR(sum, step->total_seconds, 1e-9 * step->total_seconds);
  }
}

TEST(StepModel, SmallSectionRunsAtAboutHalfTheMfuOfAnEightBShapedOne) {
  const DeviceProfile p = H100();
  auto small = PredictDecoderStepFromParts(Qwen25_05B(), 4, 2048, 1, p);
  auto large = PredictDecoderStepFromParts(Llama3_8BLayers8(), 2, 4096, 1, p);
  ASSERT_TRUE(small.ok() && large.ok());
  const double ratio = small->mfu / large->mfu;  // measured: 0.220 / 0.428 = 0.51
  EXPECT_GT(ratio, 0.4);
  EXPECT_LT(ratio, 0.65);
  // The memory-bound share grows as hidden shrinks.
  EXPECT_GT((small->memory_seconds + small->optimizer_seconds) / small->total_seconds,
            (large->memory_seconds + large->optimizer_seconds) / large->total_seconds);
}

TEST(StepModel, TensorParallelEightOnAVitHMlpIsFarLessEfficientThanOne) {
  const DeviceProfile p = H100();
  for (double tokens : {1024.0, 2048.0}) {
    // GPU-seconds of the two MLP GEMMs (fc1 1280 -> 5120, fc2 5120 -> 1280).
    const double tp1 = TrainGemmSeconds(tokens, 1280, 5120, p) + TrainGemmSeconds(tokens, 5120, 1280, p);
    const double tp8 = 8 * (TrainGemmSeconds(tokens, 1280, 640, p) + TrainGemmSeconds(tokens, 640, 1280, p));
    EXPECT_GT(tp8 / tp1, 2.0) << tokens << " tokens";
  }
  // And a decoder section at TP 8 takes more GPU-seconds than at TP 1.
  auto t1 = PredictDecoderStepFromParts(Qwen25_05B(), 1, 2048, 1, p);
  auto t2 = PredictDecoderStepFromParts(Qwen25_05B(), 1, 2048, 2, p);
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_GT(2 * t2->gemm_seconds, 1.3 * t1->gemm_seconds);
  EXPECT_LT(t2->total_seconds, t1->total_seconds);
}

TEST(StepModel, RejectsWhatItDoesNotModel) {
  const DeviceProfile p = H100();
  plan::ModelDesc moe = Llama32_1B();
  moe.experts = 8;
  moe.experts_per_token = 2;
  EXPECT_FALSE(PredictDecoderStepFromParts(moe, 1, 2048, 1, p).ok());
  EXPECT_FALSE(PredictDecoderStepFromParts(Qwen25_05B(), 1, 2048, 4, p).ok());  // 14 heads
  EXPECT_FALSE(PredictDecoderStepFromParts(Llama32_1B(), 0, 2048, 1, p).ok());
}

}  // namespace
}  // namespace maestro::compiler
