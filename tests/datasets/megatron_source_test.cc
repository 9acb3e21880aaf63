// SPDX-License-Identifier: Apache-2.0
// A Megatron corpus through the data seam: samples, targets, token counts for
// the SampleIndex, token ids outside the model's vocabulary, and a held-out
// corpus as the test split.
#include "datasets/megatron_source.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

class MegatronSourceTest : public fixtures::TempDirTest {
 protected:
  MegatronSourceTest() : TempDirTest("maestro-msrc") {}
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(TempDirTest::SetUp());
    prefix_ = dir_ + "/corpus";
    // Two documents: 1..7 and 20..24.
    ASSERT_TRUE(
        WriteMegatronIndexedDataset(prefix_, {{1, 2, 3, 4, 5, 6, 7}, {20, 21, 22, 23, 24}}, MegatronDType::kUint16)
            .ok());
  }
  std::string prefix_;
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

// [data] test_corpus: a second corpus cut by the same rule is the test split;
// its samples never enter the train split, and a bad one is named.
TEST_F(MegatronSourceTest, AHeldOutCorpusIsTheTestSplitCutByTheSameRule) {
  const std::string heldout = dir_ + "/heldout";
  // One document 40..45: with eos 9 and seq_len 3, the packed stream
  // 40 41 42 43 44 45 9 gives (7 - 1) / 3 = 2 windows.
  ASSERT_TRUE(WriteMegatronIndexedDataset(heldout, {{40, 41, 42, 43, 44, 45}}, MegatronDType::kUint16).ok());
  MegatronSampleOptions o;
  o.rule = MegatronSampleRule::kPack;
  o.seq_len = 3;
  o.eos_id = 9;
  o.vocab_size = 64;
  auto source = MegatronSampleSource::Open(prefix_, o, heldout);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  const SampleSource& s = **source;
  // Train: 1..7 9 20..24 9 = 14 tokens -> 4 windows; unchanged by the test corpus.
  EXPECT_EQ(s.NumSamples(Split::kTrain), 4);
  ASSERT_EQ(s.NumSamples(Split::kTest), 2);
  auto first = s.Load(Split::kTest, 0);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->input_ids, (std::vector<int64_t>{40, 41, 42}));
  EXPECT_EQ(first->target_ids, (std::vector<int64_t>{41, 42, 43}));
  auto last = s.Load(Split::kTest, 1);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(last->input_ids, (std::vector<int64_t>{43, 44, 45}));
  EXPECT_EQ(last->target_ids, (std::vector<int64_t>{44, 45, 9}));
  auto train = s.Load(Split::kTrain, 0);
  ASSERT_TRUE(train.ok());
  EXPECT_EQ(train->input_ids, (std::vector<int64_t>{1, 2, 3}));
  auto past = s.Load(Split::kTest, 2);
  ASSERT_FALSE(past.ok());
  EXPECT_NE(past.status().message().find(heldout), std::string::npos) << past.status().message();
  EXPECT_TRUE(s.CheckBeforeIngest().ok());

  // A held-out token outside the vocabulary: the whole-corpus check before
  // ingestion names the held-out .bin, and so does the sample's load.
  o.vocab_size = 42;  // the train corpus (ids <= 24, eos 9) fits; 42..45 do not
  auto narrow = MegatronSampleSource::Open(prefix_, o, heldout);
  ASSERT_TRUE(narrow.ok()) << narrow.status().ToString();
  const Status whole = (*narrow)->CheckBeforeIngest();
  ASSERT_FALSE(whole.ok());
  EXPECT_NE(whole.message().find(heldout + ".bin"), std::string::npos) << whole.message();
  auto bad = (*narrow)->Load(Split::kTest, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("test sample 0"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find(heldout), std::string::npos) << bad.status().message();

  // A missing or too short held-out corpus stops Open, naming it.
  o.vocab_size = 64;
  auto missing = MegatronSampleSource::Open(prefix_, o, dir_ + "/no_such_corpus");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no_such_corpus"), std::string::npos) << missing.status().message();
  o.seq_len = 10;  // the held-out stream has 7 tokens: no window of 11
  auto short_one = MegatronSampleSource::Open(prefix_, o, heldout);
  ASSERT_FALSE(short_one.ok());
  EXPECT_NE(short_one.status().message().find("test corpus '" + heldout + "'"), std::string::npos)
      << short_one.status().message();
}

}  // namespace
}  // namespace maestro::datasets
