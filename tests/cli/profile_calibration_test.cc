// SPDX-License-Identifier: Apache-2.0
#include "cli/profile_calibration.h"

#include <gtest/gtest.h>

namespace maestro::cli {
namespace {

plan::Plan TwoSections() {
  plan::Plan p;
  p.sections.resize(2);
  p.sections[0].name = "vit";
  p.sections[0].config.micro_batch = 4;
  p.sections[1].name = "llm";
  p.sections[1].config.micro_batch = 8;
  return p;
}

plan::ProfilePoint Point(const std::string& section, int mb, double seconds, double forward, double optimizer) {
  return {section, 1, mb, seconds, forward, optimizer};
}

// An "X" event of section `pid` in step `step`: dur in seconds.
nlohmann::json Op(const std::string& name, int pid, int64_t step, int samples, double seconds) {
  return {{"name", name}, {"ph", "X"}, {"pid", pid}, {"tid", pid}, {"ts", 0},
          {"dur", seconds * 1e6}, {"args", {{"step", step}, {"samples", samples}}}};
}

TEST(ProfileCalibration, ScalesEachSectionToItsInRunTimeAtThePlannedSize) {
  std::vector<plan::ProfilePoint> profile = {Point("vit", 4, 0.010, 0.004, 0.001), Point("vit", 8, 0.018, 0.006, 0.001),
                                             Point("llm", 8, 0.020, 0.008, 0.002), Point("llm", 16, 0.040, 0.015, 0.002)};
  nlohmann::json events = nlohmann::json::array();
  events.push_back(Op("F0", 1, 0, 8, 1.0));  // warm-up step: ignored
  for (int64_t step = 2; step < 5; ++step) {
    events.push_back(Op("F0", 0, step, 4, 0.006));  // vit: 0.006 + 0.009 = 0.015 = 1.5x the sweep
    events.push_back(Op("B0", 0, step, 4, 0.009));
    events.push_back(Op("F1", 0, step, 3, 0.100));  // a partial micro-batch: not compared
    events.push_back(Op("F0", 1, step, 8, 0.008));  // llm: 0.008 + 0.012 = 0.020 = 1.0x
    events.push_back(Op("B0", 1, step, 8, 0.012));
    events.push_back(Op("O", 1, step, 0, 0.005));
  }
  auto result = CalibrateProfile(TwoSections(), nlohmann::json{{"traceEvents", events}}, 2, &profile);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->size(), 2u);
  EXPECT_EQ((*result)[0].samples, 4);
  EXPECT_EQ((*result)[0].ops, 3);
  EXPECT_NEAR((*result)[0].ratio, 1.5, 1e-9);
  EXPECT_LT((*result)[0].optimizer_seconds, 0);  // none seen: the sweep's kept
  EXPECT_NEAR((*result)[1].ratio, 1.0, 1e-9);
  EXPECT_NEAR((*result)[1].optimizer_seconds, 0.005, 1e-9);
  // Every point of a section scales, the one compared and the others.
  EXPECT_NEAR(profile[0].seconds, 0.015, 1e-9);
  EXPECT_NEAR(profile[1].seconds, 0.027, 1e-9);
  EXPECT_NEAR(profile[1].forward_seconds, 0.009, 1e-9);
  EXPECT_NEAR(profile[0].optimizer_seconds, 0.001, 1e-9);
  EXPECT_NEAR(profile[3].seconds, 0.040, 1e-9);
  EXPECT_NEAR(profile[3].optimizer_seconds, 0.005, 1e-9);
}

TEST(ProfileCalibration, FallsBackToTheCommonestMeasuredSizeOrKeepsTheSweep) {
  plan::Plan plan = TwoSections();
  std::vector<plan::ProfilePoint> profile = {Point("vit", 2, 0.010, 0.004, 0.0), Point("llm", 8, 0.02, 0.0, 0.0)};
  nlohmann::json events = nlohmann::json::array();
  for (int64_t step = 0; step < 4; ++step) events.push_back(Op("F0", 0, step, 2, 0.02));  // vit never reaches 4
  auto result = CalibrateProfile(plan, events, 0, &profile);  // a bare event array works too
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ((*result)[0].samples, 2);
  EXPECT_NEAR((*result)[0].ratio, 2.0, 1e-9);
  EXPECT_EQ((*result)[1].samples, 0);  // no llm ops at all
  EXPECT_DOUBLE_EQ((*result)[1].ratio, 1.0);
  EXPECT_NEAR(profile[1].seconds, 0.02, 1e-12);
}

TEST(ProfileCalibration, RejectsMalformedInput) {
  // A malformed profile file is refused by its reader (plan/profile.h).
  EXPECT_FALSE(plan::ProfilePointsFromJson("{}").ok());
  EXPECT_FALSE(plan::ProfilePointsFromJson(R"([{"section": "vit"}])").ok());
  std::vector<plan::ProfilePoint> ok;
  EXPECT_FALSE(CalibrateProfile(TwoSections(), nlohmann::json{{"traceEvents", 3}}, 0, &ok).ok());
}

}  // namespace
}  // namespace maestro::cli
