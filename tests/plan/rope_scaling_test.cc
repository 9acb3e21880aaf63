// SPDX-License-Identifier: Apache-2.0
// plan/rope_scaling.h against values computed by hand from the published
// formulas (the numbers below come from a desk calculation, not from this
// code): theta = 100, head_dim 8, so the unscaled frequencies are
// 100^(-i/4) = 1, 0.3162..., 0.1, 0.0316... with wavelengths 2 pi / f =
// 6.28, 19.87, 62.8, 198.7; an original context of 32 puts them on every
// side of the llama3 and YaRN thresholds.
#include "plan/rope_scaling.h"

#include <gtest/gtest.h>

#include <cmath>

#include "plan/model_desc.h"

namespace maestro::plan {
namespace {

constexpr double kTol = 1e-12;

TEST(RopeScaling, DefaultIsThetaToTheMinusTwoIOverD) {
  const auto inv = RopeInverseFrequencies(10000.0, 8, RopeScaling{});
  ASSERT_EQ(inv.size(), 4u);
  EXPECT_NEAR(inv[0], 1.0, kTol);
  EXPECT_NEAR(inv[1], 0.1, kTol);
  EXPECT_NEAR(inv[2], 0.01, kTol);
  EXPECT_NEAR(inv[3], 0.001, kTol);
  EXPECT_EQ(RopeAttentionFactor(RopeScaling{}), 1.0);
}

TEST(RopeScaling, LinearDividesEveryFrequency) {
  RopeScaling s;
  s.type = RopeType::kLinear;
  s.factor = 4;
  const auto inv = RopeInverseFrequencies(10000.0, 8, s);
  EXPECT_NEAR(inv[0], 0.25, kTol);
  EXPECT_NEAR(inv[3], 0.00025, kTol);
  EXPECT_EQ(RopeAttentionFactor(s), 1.0);
}

// Llama 3.1's rule at original 32, factor 8, low_freq_factor 1, high 4:
// wavelength 6.28 < 32/4 is kept, 19.87 is blended with
// a = (32 / 19.87 - 1) / 3 = 0.2035, 62.8 and 198.7 > 32 are divided by 8.
TEST(RopeScaling, Llama3KeepsHighBlendsMiddleAndDividesLowFrequencies) {
  RopeScaling s;
  s.type = RopeType::kLlama3;
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_position_embeddings = 32;
  const auto inv = RopeInverseFrequencies(100.0, 8, s);
  EXPECT_NEAR(inv[0], 1.0, kTol);
  EXPECT_NEAR(inv[1], 0.09583998588296266, kTol);
  EXPECT_NEAR(inv[2], 0.0125, kTol);
  EXPECT_NEAR(inv[3], 0.003952847075210474, kTol);
  EXPECT_EQ(RopeAttentionFactor(s), 1.0);
}

// YaRN at original 32, factor 4, beta 32 / 1: the correction dimensions are
// 8 ln(32 / (2 pi 32)) / (2 ln 100) = -1.596 and 8 ln(32 / 2 pi) / (2 ln 100)
// = 1.414; truncated to [0, 2] the ramp is 0, 0.5, 1, 1; untruncated
// [0, 1.414] it is 0, 0.7072, 1, 1. cos and sin scale by 0.1 ln 4 + 1.
TEST(RopeScaling, YarnRampsBetweenTheCorrectionDimensionsAndScalesCosSin) {
  RopeScaling s;
  s.type = RopeType::kYarn;
  s.factor = 4;
  s.original_max_position_embeddings = 32;
  auto inv = RopeInverseFrequencies(100.0, 8, s);
  EXPECT_NEAR(inv[0], 1.0, kTol);
  EXPECT_NEAR(inv[1], 0.19764235376052372, kTol);
  EXPECT_NEAR(inv[2], 0.025, kTol);
  EXPECT_NEAR(inv[3], 0.007905694150420948, kTol);
  EXPECT_NEAR(RopeAttentionFactor(s), 1.138629436111989, kTol);

  s.truncate = false;
  inv = RopeInverseFrequencies(100.0, 8, s);
  EXPECT_NEAR(inv[0], 1.0, kTol);
  EXPECT_NEAR(inv[1], 0.14849024701094488, kTol);
  EXPECT_NEAR(inv[2], 0.025, kTol);

  s.attention_factor = 0.75;  // the config's own wins
  EXPECT_EQ(RopeAttentionFactor(s), 0.75);
  s.attention_factor = 0;
  s.factor = 40;
  s.mscale = 1;  // DeepSeek-V3: mscale == mscale_all_dim cancels out
  s.mscale_all_dim = 1;
  EXPECT_NEAR(RopeAttentionFactor(s), 1.0, kTol);
  s.mscale_all_dim = 0.5;
  EXPECT_NEAR(RopeAttentionFactor(s), (0.1 * std::log(40.0) + 1) / (0.05 * std::log(40.0) + 1), kTol);
}

TEST(RopeScaling, TypeNamesAreHfsAndRoundTrip) {
  for (int code = 0; code < kRopeTypeCount; ++code) {
    const auto type = static_cast<RopeType>(code);
    EXPECT_EQ(RopeTypeOfName(RopeTypeName(type)), type);
  }
  EXPECT_EQ(RopeTypeOfName("llama3"), RopeType::kLlama3);
  EXPECT_EQ(RopeTypeOfName("yarn"), RopeType::kYarn);
  EXPECT_FALSE(RopeTypeOfName("longrope").has_value());
  EXPECT_FALSE(RopeTypeOfName("mrope").has_value());
}

TEST(RopeScaling, ModelDescCarriesTheParametersByName) {
  ModelDesc d;
  d.kind = ModelKind::kDecoder;
  EXPECT_EQ(RopeScalingOf(d).type, RopeType::kDefault);
  d.extra[kRopeScalingTypeKey] = 3;
  d.extra[kRopeScalingFactorKey] = 4;
  d.extra[kRopeScalingOriginalMaxPositionsKey] = 32768;
  d.extra[kRopeScalingTruncateKey] = 0;
  const RopeScaling s = RopeScalingOf(d);
  EXPECT_EQ(s.type, RopeType::kYarn);
  EXPECT_EQ(s.factor, 4);
  EXPECT_EQ(s.original_max_position_embeddings, 32768);
  EXPECT_FALSE(s.truncate);
  EXPECT_EQ(s.beta_fast, 32);  // absent: HF's default
  EXPECT_EQ(s.beta_slow, 1);
}

}  // namespace
}  // namespace maestro::plan
