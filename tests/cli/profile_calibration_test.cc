// SPDX-License-Identifier: Apache-2.0
#include "cli/profile_calibration.h"

#include <gtest/gtest.h>

#include <algorithm>

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

// An "X" event of section `pid` on rank `tid` in step `step`, from `start`
// for `seconds` (both in seconds).
nlohmann::json Op(const std::string& name, int pid, int64_t step, int samples, double seconds, double start = 0.0,
                  int tid = -1) {
  return {{"name", name},
          {"ph", "X"},
          {"pid", pid},
          {"tid", tid < 0 ? pid : tid},
          {"ts", start * 1e6},
          {"dur", seconds * 1e6},
          {"args", {{"step", step}, {"samples", samples}}}};
}

const plan::ProfilePoint* Find(const std::vector<plan::ProfilePoint>& points, const std::string& section, int mb) {
  for (const auto& p : points) {
    if (p.section == section && p.micro_batch == mb) return &p;
  }
  return nullptr;
}

TEST(ProfileCalibration, OneSizeScalesEverySweepPointOfTheSection) {
  std::vector<plan::ProfilePoint> profile = {Point("vit", 4, 0.010, 0.004, 0.001), Point("vit", 8, 0.018, 0.006, 0.001),
                                             Point("llm", 8, 0.020, 0.008, 0.002),
                                             Point("llm", 16, 0.040, 0.015, 0.002)};
  nlohmann::json events = nlohmann::json::array();
  events.push_back(Op("F0", 1, 0, 8, 1.0));  // warm-up step: ignored
  double t = 0.0;
  for (int64_t step = 2; step < 5; ++step, t += 1.0) {  // nothing overlaps
    events.push_back(Op("F0", 0, step, 4, 0.006, t));   // vit: 0.006 + 0.009 = 0.015 = 1.5x the sweep
    events.push_back(Op("B0", 0, step, 4, 0.009, t + 0.01));
    if (step < 4) events.push_back(Op("F1", 0, step, 3, 0.100, t + 0.02));  // twice in all: too few to count
    events.push_back(Op("F0", 1, step, 8, 0.008, t + 0.2));                 // llm: 0.008 + 0.012 = 0.020 = 1.0x
    events.push_back(Op("B0", 1, step, 8, 0.012, t + 0.21));
    events.push_back(Op("O", 1, step, 0, 0.005, t + 0.3));
  }
  auto result = CalibrateProfile(TwoSections(), nlohmann::json{{"traceEvents", events}}, 2, &profile);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  ASSERT_EQ(result->size(), 2u);
  EXPECT_EQ((*result)[0].sizes, 1);
  EXPECT_EQ((*result)[0].smallest, 4);
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

// A noisy sweep whose per-sample time rises with the size (4: 0.0275 s,
// 16: 0.2099 s, as a CI run measured) extrapolates below zero at one sample;
// the planner (which floors it at the proportional share) planned
// micro-batch 1, the run timed it at 0.0168 s, and the calibration divided by
// the clamped zero: every point x1.7e10 and a plan that predicted 1.8e9 s per
// step. The calibration reads the sweep as the compiler prices it.
TEST(ProfileCalibration, ASizeBelowTheSweepIsComparedAtTheProportionalShareOfItsSmallestPoint) {
  plan::Plan p = TwoSections();
  p.sections[1].config.micro_batch = 1;
  std::vector<plan::ProfilePoint> profile = {Point("vit", 4, 0.010, 0.004, 0.0), Point("llm", 4, 0.0275, 0.0125, 0.0),
                                             Point("llm", 16, 0.2099, 0.0751, 0.0)};
  nlohmann::json events = nlohmann::json::array();
  double t = 0.0;
  for (int64_t step = 1; step < 4; ++step, t += 1.0) {
    events.push_back(Op("F0", 1, step, 1, 0.006, t));
    events.push_back(Op("B0", 1, step, 1, 0.0108, t + 0.01));
  }
  auto result = CalibrateProfile(p, nlohmann::json{{"traceEvents", events}}, 1, &profile);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const SectionCalibration& llm = (*result)[1];
  EXPECT_EQ(llm.sizes, 1);
  EXPECT_NEAR(llm.sweep_seconds, 0.0275 / 4, 1e-12);    // the floor, not zero
  EXPECT_NEAR(llm.ratio, 0.0168 / (0.0275 / 4), 1e-9);  // 2.44x
  EXPECT_NEAR(Find(profile, "llm", 4)->seconds, 0.0275 * llm.ratio, 1e-9);
  EXPECT_NEAR(Find(profile, "llm", 16)->seconds, 0.2099 * llm.ratio, 1e-9);
}

// A run-ahead teacher (section 0, forward only): its F ops read back rows its
// A ops computed a step earlier (the trace's "computed" argument, 0 there),
// so only the A ops time it; the "ahead" op after the items is not a forward.
TEST(ProfileCalibration, ASpooledForwardSectionIsTimedByTheRowsItComputed) {
  std::vector<plan::ProfilePoint> profile = {Point("vit", 4, 0.010, 0.010, 0.0), Point("vit", 8, 0.020, 0.020, 0.0),
                                             Point("llm", 8, 0.020, 0.008, 0.002)};
  const auto with_computed = [](nlohmann::json op, int computed) {
    op["args"]["computed"] = computed;
    return op;
  };
  nlohmann::json events = nlohmann::json::array();
  double t = 0.0;
  for (int64_t step = 2; step < 6; ++step, t += 1.0) {
    events.push_back(with_computed(Op("F0", 0, step, 4, 0.0002, t), 0));        // read back: not a forward of 4
    events.push_back(with_computed(Op("A0", 0, step, 4, 0.030, t + 0.01), 4));  // 3x the sweep
    events.push_back(Op("ahead", 0, step, 0, 0.5, t + 0.05));
  }
  auto result = CalibrateProfile(TwoSections(), nlohmann::json{{"traceEvents", events}}, 2, &profile);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ((*result)[0].sizes, 1);
  EXPECT_EQ((*result)[0].ops, 4);  // the four A ops
  EXPECT_NEAR((*result)[0].ratio, 3.0, 1e-9);
  EXPECT_NEAR(profile[1].seconds, 0.060, 1e-9);

  // Without the argument (every sample computed), the same F ops would have
  // timed it at a fiftieth of the sweep: what the argument is there to prevent.
  std::vector<plan::ProfilePoint> again = {Point("vit", 4, 0.010, 0.010, 0.0), Point("vit", 8, 0.020, 0.020, 0.0)};
  nlohmann::json bare = nlohmann::json::array();
  for (int64_t step = 2; step < 6; ++step) bare.push_back(Op("F0", 0, step, 4, 0.0002, step));
  auto unmarked = CalibrateProfile(TwoSections(), nlohmann::json{{"traceEvents", bare}}, 2, &again);
  ASSERT_TRUE(unmarked.ok());
  EXPECT_NEAR((*unmarked)[0].ratio, 0.02, 1e-9);
}

TEST(ProfileCalibration, SeveralSizesReplaceTheSweepBetweenThemByTheInRunLine) {
  // llm's sweep: 1 -> 0.004, 4 -> 0.010, 16 -> 0.034 (forward a third); the
  // run used sizes 4, 8 and 12 (partial micro-batches), each 3 times, at
  // 0.002 + 0.001 * n forward + backward (forward 0.0005 + 0.0004 n).
  std::vector<plan::ProfilePoint> profile = {Point("vit", 4, 0.010, 0.004, 0.0), Point("llm", 1, 0.004, 0.0012, 0.0),
                                             Point("llm", 4, 0.010, 0.003, 0.0), Point("llm", 16, 0.034, 0.011, 0.0)};
  nlohmann::json events = nlohmann::json::array();
  double t = 0.0;
  for (int64_t step = 0; step < 3; ++step) {
    for (int n : {4, 8, 12}) {
      const double forward = 0.0005 + 0.0004 * n, backward = 0.002 + 0.001 * n - forward;
      events.push_back(Op("F0", 1, step, n, forward, t));
      events.push_back(Op("B0", 1, step, n, backward, t + 0.1));
      t += 1.0;
    }
  }
  auto result = CalibrateProfile(TwoSections(), events, 0, &profile);  // a bare event array works too
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  const SectionCalibration& llm = (*result)[1];
  EXPECT_EQ(llm.sizes, 3);
  EXPECT_EQ(llm.smallest, 4);
  EXPECT_EQ(llm.largest, 12);
  EXPECT_EQ(llm.ops, 9);
  EXPECT_NEAR(llm.fixed_seconds, 0.002, 1e-9);
  EXPECT_NEAR(llm.seconds_per_sample, 0.001, 1e-9);
  // The planned size (8) now costs the line's 0.010; the sweep said 0.018.
  EXPECT_NEAR(llm.sweep_seconds, 0.018, 1e-9);
  EXPECT_NEAR(llm.in_run_seconds, 0.010, 1e-9);
  // Points: the line at 4 and 12; 1 scaled by line(4) / sweep(4) = 0.6;
  // 16 by line(12) / sweep(12) = 0.014 / 0.026.
  ASSERT_NE(Find(profile, "llm", 4), nullptr);
  ASSERT_NE(Find(profile, "llm", 12), nullptr);
  EXPECT_NEAR(Find(profile, "llm", 4)->seconds, 0.006, 1e-9);
  EXPECT_NEAR(Find(profile, "llm", 4)->forward_seconds, 0.0021, 1e-9);
  EXPECT_NEAR(Find(profile, "llm", 12)->seconds, 0.014, 1e-9);
  EXPECT_NEAR(Find(profile, "llm", 1)->seconds, 0.004 * 0.6, 1e-9);
  EXPECT_NEAR(Find(profile, "llm", 16)->seconds, 0.034 * 0.014 / 0.026, 1e-9);
  EXPECT_EQ(
      std::count_if(profile.begin(), profile.end(), [](const plan::ProfilePoint& p) { return p.section == "llm"; }), 4);
  // vit had no ops: its sweep is kept.
  EXPECT_EQ((*result)[0].sizes, 0);
  EXPECT_DOUBLE_EQ((*result)[0].ratio, 1.0);
  EXPECT_NEAR(Find(profile, "vit", 4)->seconds, 0.010, 1e-12);
}

TEST(ProfileCalibration, SharedCoresTurnEachOpIntoItsTimeAloneOnACore) {
  // Two ranks on one core: vit's and llm's forward ran side by side for 2 s
  // each (each at half speed: 1 s alone), then llm's backward ran alone for
  // 1 s. Three steps of that.
  plan::Plan plan = TwoSections();
  plan.shared_cores = 1;
  plan.sections[0].config.micro_batch = 4;
  std::vector<plan::ProfilePoint> profile = {Point("vit", 4, 0.5, 0.5, 0.0), Point("llm", 4, 1.0, 0.5, 0.0)};
  nlohmann::json events = nlohmann::json::array();
  for (int64_t step = 0; step < 3; ++step) {
    const double t = 10.0 * static_cast<double>(step);
    events.push_back(Op("F0", 0, step, 4, 2.0, t, 0));
    events.push_back(Op("F0", 1, step, 4, 2.0, t, 1));
    events.push_back(Op("B0", 1, step, 4, 1.0, t + 2.0, 1));
  }
  auto result = CalibrateProfile(plan, events, 0, &profile);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_NEAR(Find(profile, "vit", 4)->seconds, 1.0, 1e-9);  // 2 s at half speed
  EXPECT_NEAR(Find(profile, "llm", 4)->seconds, 2.0, 1e-9);  // 1 s + 1 s
  EXPECT_NEAR(Find(profile, "llm", 4)->forward_seconds, 1.0, 1e-9);
  // The same trace without shared cores: the durations as they are.
  plan.shared_cores = 0;
  profile = {Point("vit", 4, 0.5, 0.5, 0.0), Point("llm", 4, 1.0, 0.5, 0.0)};
  ASSERT_TRUE(CalibrateProfile(plan, events, 0, &profile).ok());
  EXPECT_NEAR(Find(profile, "vit", 4)->seconds, 2.0, 1e-9);
  EXPECT_NEAR(Find(profile, "llm", 4)->seconds, 3.0, 1e-9);
}

TEST(ProfileCalibration, TheSweepSideBySideIsScaledToOneCore) {
  std::vector<plan::ProfilePoint> profile = {Point("vit", 4, 0.3, 0.1, 0.03)};
  ScaleSweepToOneCore(0, 3, &profile);  // nothing shared
  EXPECT_DOUBLE_EQ(profile[0].seconds, 0.3);
  ScaleSweepToOneCore(4, 3, &profile);  // more cores than ranks
  EXPECT_DOUBLE_EQ(profile[0].seconds, 0.3);
  ScaleSweepToOneCore(2, 3, &profile);
  EXPECT_NEAR(profile[0].seconds, 0.2, 1e-12);
  EXPECT_NEAR(profile[0].forward_seconds, 0.1 * 2 / 3, 1e-12);
  EXPECT_NEAR(profile[0].optimizer_seconds, 0.02, 1e-12);
}

TEST(ProfileCalibration, RejectsMalformedInput) {
  // A malformed profile file is refused by its reader (plan/profile.h).
  EXPECT_FALSE(plan::ProfilePointsFromJson("{}").ok());
  EXPECT_FALSE(plan::ProfilePointsFromJson(R"([{"section": "vit"}])").ok());
  std::vector<plan::ProfilePoint> ok;
  EXPECT_FALSE(CalibrateProfile(TwoSections(), nlohmann::json{{"traceEvents", 3}}, 0, &ok).ok());
  EXPECT_FALSE(CalibrateProfile(TwoSections(), nlohmann::json::array(), 0, nullptr).ok());
}

}  // namespace
}  // namespace maestro::cli
