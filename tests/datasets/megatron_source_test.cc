// SPDX-License-Identifier: Apache-2.0
// A Megatron corpus through the data seam: samples, targets, token counts for
// the SampleIndex, and token ids outside the model's vocabulary.
#include "datasets/megatron_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace maestro::datasets {
namespace {

class MegatronSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/maestro-msrc-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    prefix_ = dir_ + "/corpus";
    // Two documents: 1..7 and 20..24.
    ASSERT_TRUE(
        WriteMegatronIndexedDataset(prefix_, {{1, 2, 3, 4, 5, 6, 7}, {20, 21, 22, 23, 24}}, MegatronDType::kUint16)
            .ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, prefix_;
};

TEST_F(MegatronSourceTest, SplitSamplesBecomeRecordsWithShiftedTargets) {
  MegatronSampleOptions o;
  o.rule = MegatronSampleRule::kSplit;
  o.seq_len = 4;
  o.pad_id = 0;
  o.vocab_size = 32;
  auto source = MegatronSampleSource::Open(prefix_, o);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const SampleSource& s = **source;
  // Document 0 (7 tokens): windows [1..5], [5..7]+pad; document 1 (5 tokens): [20..24].
  ASSERT_EQ(s.NumSamples(Split::kTrain), 3);
  EXPECT_EQ(s.NumSamples(Split::kTest), 0);
  auto first = s.Load(Split::kTrain, 0);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->input_ids, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(first->target_ids, (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_TRUE(first->images.empty());
  auto tail = s.Load(Split::kTrain, 1);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->input_ids, (std::vector<int64_t>{5, 6, 7, 0}));
  EXPECT_EQ(tail->target_ids, (std::vector<int64_t>{6, 7, -100, -100}));
  const SampleTokens tokens = s.TokensOf(1);
  EXPECT_EQ(tokens.location, prefix_ + "#1");
  ASSERT_EQ(tokens.tokens.size(), 1u);
  EXPECT_EQ(tokens.tokens[0], (std::pair<std::string, int64_t>{"text", 3}));
  EXPECT_FALSE(s.Load(Split::kTrain, 3).ok());
  EXPECT_FALSE(s.Load(Split::kTest, 0).ok());
}

TEST_F(MegatronSourceTest, TokenIdsOutsideTheVocabularyAreNamed) {
  MegatronSampleOptions o;
  o.rule = MegatronSampleRule::kPack;
  o.seq_len = 4;
  o.vocab_size = 16;  // 20..24 are outside
  auto source = MegatronSampleSource::Open(prefix_, o);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  EXPECT_TRUE((*source)->Load(Split::kTrain, 0).ok());  // 1..5
  auto bad = (*source)->Load(Split::kTrain, 2);         // 20..24
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(prefix_), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("sample 2"), std::string::npos) << bad.status().message();
  const Status whole = (*source)->CheckBeforeIngest();
  ASSERT_FALSE(whole.ok());
  EXPECT_NE(whole.message().find("20"), std::string::npos) << whole.message();
  o.vocab_size = 0;
  EXPECT_FALSE(MegatronSampleSource::Open(prefix_, o).ok());
  o.vocab_size = 32;
  o.seq_len = 100;  // longer than the whole corpus
  EXPECT_FALSE(MegatronSampleSource::Open(prefix_, o).ok());
}

}  // namespace
}  // namespace maestro::datasets
