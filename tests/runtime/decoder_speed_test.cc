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

// The tiny decoder trained on `device` (bf16 or fp32) in micro-batches of 2
// samples of `seq_len` tokens, one warm-up step and two measured; fatal
// unless it runs, then its figures consistent (ExpectConsistent).
void MeasureTwoSteps(const std::string& device, bool bf16, int seq_len, StatusOr<DecoderSpeed>* speed) {
  DecoderSpeedOptions o;
  o.device = device;
  o.bf16 = bf16;
  o.micro_batch = 2;
  o.seq_len = seq_len;
  o.warmup = 1;
  o.steps = 2;
  *speed = MeasureDecoderTraining(TinyDecoder(), o);
  ASSERT_TRUE(speed->ok()) << speed->status().ToString();
  ExpectConsistent(**speed, o);
}

TEST(DecoderSpeed, TrainsOnTheCpuAndReportsConsistentFigures) {
  StatusOr<DecoderSpeed> speed = Status::Internal("not measured");
  ASSERT_NO_FATAL_FAILURE(MeasureTwoSteps("cpu", false, 16, &speed));
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
  StatusOr<DecoderSpeed> speed = Status::Internal("not measured");
  ASSERT_NO_FATAL_FAILURE(MeasureTwoSteps("cuda", true, 128, &speed));
  EXPECT_EQ(speed->dtype, "bf16");
  EXPECT_NE(speed->device.find("cuda"), std::string::npos);
}

}  // namespace
}  // namespace maestro::runtime
