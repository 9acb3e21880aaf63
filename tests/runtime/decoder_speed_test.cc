// SPDX-License-Identifier: Apache-2.0
// The decoder training-speed probe behind `maestro-bench gpu`: on the CPU it
// runs forward, backward and AdamW and reports consistent
// figures; on CUDA (label gpu) the same in bf16, skipped without a device.
#include "runtime/decoder_speed.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/fixtures/models.h"

namespace maestro::runtime {
namespace {

plan::ModelDesc TinyDecoder() {
  return fixtures::DecoderModel({64, 2, 4, 2, 128, 256});
}

void ExpectConsistent(const DecoderSpeed& s, const DecoderSpeedOptions& o) {
  EXPECT_GT(s.params, 0);
  EXPECT_GT(s.seconds_per_step, 0.0);
  EXPECT_NEAR(s.tokens_per_second * s.seconds_per_step, static_cast<double>(o.micro_batch) * o.seq_len,
              1e-6 * o.seq_len);
}

TEST(DecoderSpeed, TrainsOnTheCpuAndReportsConsistentFigures) {
  DecoderSpeedOptions o;
  o.device = "cpu";
  o.bf16 = false;
  o.micro_batch = 2;
  o.seq_len = 16;
  o.warmup = 1;
  o.steps = 2;
  auto speed = MeasureDecoderTraining(TinyDecoder(), o);
  ASSERT_TRUE(speed.ok()) << speed.status().ToString();
  ExpectConsistent(*speed, o);
  EXPECT_EQ(speed->device, "cpu");
  EXPECT_EQ(speed->dtype, "fp32");
  // 64*256 embedding (tied: no head) + 2 blocks + final norm.
  EXPECT_GT(speed->params, 64 * 256);
}

TEST(DecoderSpeed, RejectsAnUnknownDeviceAndSaysWhyCudaIsMissing) {
  DecoderSpeedOptions o;
  o.device = "tpu";
  EXPECT_FALSE(MeasureDecoderTraining(TinyDecoder(), o).ok());
  std::string why;
  if (!CudaUsable(&why)) {
    EXPECT_FALSE(why.empty());
    o.device = "cuda";
    auto s = MeasureDecoderTraining(TinyDecoder(), o);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find(why), std::string::npos);
  }
}

TEST(DecoderSpeedGpu, TrainsInBf16OnCuda) {
  std::string why;
  if (!CudaUsable(&why)) GTEST_SKIP() << why;
  DecoderSpeedOptions o;
  o.device = "cuda";
  o.bf16 = true;
  o.micro_batch = 2;
  o.seq_len = 128;
  o.warmup = 1;
  o.steps = 2;
  auto speed = MeasureDecoderTraining(TinyDecoder(), o);
  ASSERT_TRUE(speed.ok()) << speed.status().ToString();
  ExpectConsistent(*speed, o);
  EXPECT_EQ(speed->dtype, "bf16");
  EXPECT_NE(speed->device.find("cuda"), std::string::npos);
}

}  // namespace
}  // namespace maestro::runtime
