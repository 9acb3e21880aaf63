// SPDX-License-Identifier: Apache-2.0
// The section training-speed probe behind `maestro-bench gpu`: on the CPU it
// runs forward, backward and AdamW of a decoder and of a ViT (the built-in
// layout and Qwen2-VL's tower), in fp32 and in the runtime's mixed
// precision, and reports consistent figures (the phases apart, the
// optimizer alone); on CUDA (label gpu) the same in bf16 and mixed, with the
// device's peak memory, skipped without a device.
#include "runtime/section_speed.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "tests/fixtures/models.h"

namespace maestro::runtime {
namespace {

plan::ModelDesc TinyDecoder() {
  return fixtures::DecoderModel({64, 2, 4, 2, 128, 256});
}

SectionSpeedOptions TwoSteps(const std::string& device, const std::string& precision, int micro_batch, int seq_len) {
  SectionSpeedOptions o;
  o.device = device;
  o.precision = precision;
  o.micro_batch = micro_batch;
  o.seq_len = seq_len;
  o.warmup = 1;
  o.steps = 2;
  return o;
}

// Fatal unless `desc` trains under `o`; then its figures consistent.
void Measure(const plan::ModelDesc& desc, const SectionSpeedOptions& o, int64_t tokens_per_step,
             StatusOr<SectionSpeed>* speed) {
  *speed = MeasureSectionTraining(desc, o);
  ASSERT_TRUE(speed->ok()) << speed->status().ToString();
  const SectionSpeed& s = **speed;
  EXPECT_GT(s.params, 0);
  EXPECT_GT(s.seconds_per_step, 0.0);
  EXPECT_EQ(s.tokens_per_step, tokens_per_step);
  EXPECT_NEAR(s.tokens_per_second * s.seconds_per_step, static_cast<double>(tokens_per_step), 1e-6 * tokens_per_step);
  EXPECT_NEAR(s.samples_per_second * s.seconds_per_step, o.micro_batch, 1e-6 * o.micro_batch);
  EXPECT_EQ(s.precision, o.precision);
  EXPECT_GT(s.aten_ops, 0);
  EXPECT_GT(s.autograd_nodes, 0);
  if (o.phases) {
    EXPECT_GT(s.forward_seconds, 0.0);
    EXPECT_GT(s.backward_seconds, 0.0);
    EXPECT_GT(s.optimizer_seconds, 0.0);
    EXPECT_GT(s.optimizer_loop_seconds, 0.0);
  } else {
    EXPECT_EQ(s.forward_seconds, -1);
    EXPECT_EQ(s.optimizer_loop_seconds, -1);
  }
}

TEST(SectionSpeed, ADecoderTrainsOnTheCpuAndReportsConsistentFigures) {
  StatusOr<SectionSpeed> speed = Status::Internal("not measured");
  ASSERT_NO_FATAL_FAILURE(Measure(TinyDecoder(), TwoSteps("cpu", "fp32", 2, 16), 32, &speed));
  EXPECT_EQ(speed->device, "cpu");
  EXPECT_EQ(speed->dtype, "fp32");
  EXPECT_EQ(speed->peak_allocated_bytes, -1);  // the CPU reports none
  // 64*256 embedding (tied: no head) + 2 blocks + final norm.
  EXPECT_GT(speed->params, 64 * 256);
}

// The runtime's precision (autocast to bf16 over fp32 masters, the loss of
// runtime/vocab_loss.cc) with the phases timed apart: each phase takes time,
// and the optimizer alone is timed as the loop (and fused where the CPU has it).
TEST(SectionSpeed, TheRuntimesMixedPrecisionTimesEachPhase) {
  SectionSpeedOptions o = TwoSteps("cpu", "mixed", 2, 16);
  o.phases = true;
  StatusOr<SectionSpeed> speed = Status::Internal("not measured");
  ASSERT_NO_FATAL_FAILURE(Measure(TinyDecoder(), o, 32, &speed));
  EXPECT_EQ(speed->dtype, "bf16");
}

// A ViT as built in (8x8 images in 4x4 patches: 4 patches each) and as
// Qwen2-VL's tower (16x16 in 4x4: 16 patches, merged 2x2 after the blocks):
// tokens are images x patches.
TEST(SectionSpeed, AVitTrainsOnTheCpuInEitherLayout) {
  SectionSpeedOptions o = TwoSteps("cpu", "mixed", 3, 0);
  o.phases = true;
  StatusOr<SectionSpeed> speed = Status::Internal("not measured");
  ASSERT_NO_FATAL_FAILURE(Measure(fixtures::TinyVitModel(), o, 3 * 4, &speed));
  ASSERT_NO_FATAL_FAILURE(Measure(fixtures::TinyQwen2VlVisionModel(), o, 3 * 16, &speed));
  o.precision = "fp32";
  ASSERT_NO_FATAL_FAILURE(Measure(fixtures::TinyQwen2VlVisionModel(), o, 3 * 16, &speed));
}

// The ops a step dispatches are counted, not estimated: the same model
// dispatches the same ops every step, and every layer more adds the same
// number of ops and autograd nodes (a layer's forward and backward), in
// fp32 and under autocast alike.
TEST(SectionSpeed, EachLayerAddsTheSameCountOfDispatchedOps) {
  for (const std::string precision : {"fp32", "mixed"}) {
    std::vector<std::pair<int64_t, int64_t>> counts;  // (aten ops, autograd nodes) at 1, 2, 3 layers
    for (int64_t layers = 1; layers <= 3; ++layers) {
      plan::ModelDesc desc = TinyDecoder();
      desc.layers = layers;
      auto speed = MeasureSectionTraining(desc, TwoSteps("cpu", precision, 1, 8));
      ASSERT_TRUE(speed.ok()) << speed.status().ToString();
      counts.emplace_back(speed->aten_ops, speed->autograd_nodes);
      auto again = MeasureSectionTraining(desc, TwoSteps("cpu", precision, 1, 8));
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      EXPECT_EQ(again->aten_ops, speed->aten_ops) << precision << " " << layers;
      EXPECT_EQ(again->autograd_nodes, speed->autograd_nodes) << precision << " " << layers;
    }
    const int64_t layer_ops = counts[1].first - counts[0].first;
    const int64_t layer_nodes = counts[1].second - counts[0].second;
    EXPECT_GT(layer_ops, 20) << precision;  // a block's forward and backward: dozens of ops
    EXPECT_GT(layer_nodes, 10) << precision;
    EXPECT_EQ(counts[2].first - counts[1].first, layer_ops) << precision;
    EXPECT_EQ(counts[2].second - counts[1].second, layer_nodes) << precision;
  }
}

TEST(SectionSpeed, RejectsWhatItCannotMeasureAndSaysWhyCudaIsMissing) {
  SectionSpeedOptions o = TwoSteps("tpu", "fp32", 2, 16);
  EXPECT_NE(MeasureSectionTraining(TinyDecoder(), o).status().message().find("device"), std::string::npos);
  o.device = "cpu";
  o.precision = "fp8";
  EXPECT_NE(MeasureSectionTraining(TinyDecoder(), o).status().message().find("precision"), std::string::npos);
  o.precision = "fp32";
  EXPECT_NE(MeasureSectionTraining(fixtures::TinyAudioModel(), o).status().message().find("audio"), std::string::npos);
  std::string why;
  if (!CudaUsable(&why)) {
    EXPECT_FALSE(why.empty());
    o.device = "cuda";
    auto s = MeasureSectionTraining(TinyDecoder(), o);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find(why), std::string::npos);
  }
}

// On CUDA: bf16 and the runtime's mixed precision, each with the device's
// peak memory above what the weights alone take.
TEST(SectionSpeedGpu, TrainsInBf16AndMixedOnCuda) {
  std::string why;
  if (!CudaUsable(&why)) GTEST_SKIP() << why;
  StatusOr<SectionSpeed> speed = Status::Internal("not measured");
  for (const std::string precision : {"bf16", "mixed"}) {
    SectionSpeedOptions o = TwoSteps("cuda", precision, 2, 128);
    o.phases = true;
    ASSERT_NO_FATAL_FAILURE(Measure(TinyDecoder(), o, 256, &speed));
    EXPECT_EQ(speed->dtype, "bf16");
    EXPECT_NE(speed->device.find("cuda"), std::string::npos);
    const int64_t weight_bytes = speed->params * (precision == "bf16" ? 2 : 4);
    EXPECT_GT(speed->peak_allocated_bytes, weight_bytes) << precision;
  }
  ASSERT_NO_FATAL_FAILURE(Measure(fixtures::TinyQwen2VlVisionModel(), TwoSteps("cuda", "mixed", 3, 0), 48, &speed));
}

}  // namespace
}  // namespace maestro::runtime
