// SPDX-License-Identifier: Apache-2.0
// What a run's samples hold against what its plan was priced for
// (runtime/data_against_plan.h): silent where they agree within the slack,
// one line naming the modality, the numbers and the keys to set where the
// share of samples or the mean tokens is off.
#include "runtime/data_against_plan.h"

#include <gtest/gtest.h>

namespace maestro::runtime {
namespace {

// Samples whose image tokens are given: 0 = text only.
class CountsSource : public datasets::SampleSource {
 public:
  explicit CountsSource(std::vector<int64_t> image_tokens) : image_(std::move(image_tokens)) {}
  int64_t NumSamples(datasets::Split split) const override {
    return split == datasets::Split::kTrain ? static_cast<int64_t>(image_.size()) : 0;
  }
  StatusOr<datasets::SampleRecord> Load(datasets::Split, int64_t) const override {
    return Status::Internal("not read here");
  }
  datasets::SampleTokens TokensOf(int64_t id) const override {
    datasets::SampleTokens t;
    t.tokens.push_back({"text", 100});
    if (image_[static_cast<size_t>(id)] > 0) t.tokens.push_back({"image", image_[static_cast<size_t>(id)]});
    return t;
  }

 private:
  std::vector<int64_t> image_;
};

plan::Plan PlanFor(double fraction, int64_t tokens) {
  plan::Plan p;
  p.data.modalities = {{"image", fraction, tokens}};
  return p;
}

TEST(DataAgainstPlan, AgreesWithinTheSlackAndNamesWhatIsOff) {
  // Half the samples carry images of 600 or 1,000 tokens: 800 on average.
  std::vector<int64_t> tokens;
  for (int i = 0; i < 100; ++i) tokens.push_back(i % 2 == 0 ? 0 : (i % 4 == 1 ? 600 : 1000));
  const CountsSource source(tokens);
  EXPECT_TRUE(DataAgainstPlan(PlanFor(0.5, 800), source).empty());
  EXPECT_TRUE(DataAgainstPlan(PlanFor(0.58, 990), source).empty());  // inside 10 points and 25%

  const auto share = DataAgainstPlan(PlanFor(0.8, 800), source);
  ASSERT_EQ(share.size(), 1u);
  for (const char* w : {"modality 'image'", "80%", "50% (50 of 100)", "fraction = 0.5", "tokens = 800"}) {
    EXPECT_NE(share[0].find(w), std::string::npos) << w << " in: " << share[0];
  }
  const auto heavy = DataAgainstPlan(PlanFor(0.5, 4096), source);
  ASSERT_EQ(heavy.size(), 1u);
  EXPECT_NE(heavy[0].find("4096 tokens each"), std::string::npos) << heavy[0];
  EXPECT_NE(heavy[0].find("tokens = 800"), std::string::npos) << heavy[0];
  // A modality the data never carries is named too.
  const auto none = DataAgainstPlan(PlanFor(0.5, 800), CountsSource(std::vector<int64_t>(10, 0)));
  ASSERT_EQ(none.size(), 1u);
  EXPECT_NE(none[0].find("0% (0 of 10)"), std::string::npos) << none[0];
  EXPECT_TRUE(DataAgainstPlan(plan::Plan(), source).empty());
}

}  // namespace
}  // namespace maestro::runtime
