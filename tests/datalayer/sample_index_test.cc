// SPDX-License-Identifier: Apache-2.0
#include "datalayer/sample_index.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <set>
#include <string>

#include "tests/datalayer/fake_training.h"
#include "tests/datalayer/test_dirs.h"

namespace maestro::datalayer {
namespace {

std::string WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  return path;
}

TEST(SampleIndex, IngestsManifestWithModalitiesAndTokenCounts) {
  const std::string dir = testing::FreshDir("ingest");
  const std::string manifest =
      WriteText(dir + "/m.jsonl",
                "{\"id\": 3, \"location\": \"a.tar:0\", \"tokens\": {\"text\": 10}}\n"
                "\n"
                "{\"id\": 1, \"location\": \"a.tar:1\", \"tokens\": {\"text\": 5, \"image\": 64}}\n"
                "{\"id\": 2, \"location\": \"b.tar:0\", \"tokens\": {\"audio\": 7}}\n");
  auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
  auto stats = index->IngestManifest(manifest).ValueOrDie();
  EXPECT_EQ(stats.samples, 3);
  EXPECT_EQ(stats.modalities, (std::vector<std::string>{"text", "image", "audio"}));
  EXPECT_EQ(index->NumSamples(), 3);
  auto samples = index->GetSamples({1, 2}).ValueOrDie();
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0].location, "a.tar:1");
  EXPECT_EQ(samples[0].tokens, (std::map<std::string, int64_t>{{"image", 64}, {"text", 5}}));
  EXPECT_EQ(samples[1].tokens, (std::map<std::string, int64_t>{{"audio", 7}}));
  // Same manifest again: a no-op. Another one: refused.
  EXPECT_TRUE(index->IngestManifest(manifest).ValueOrDie().already_ingested);
  const std::string other =
      WriteText(dir + "/other.jsonl", "{\"id\": 9, \"location\": \"x\", \"tokens\": {\"text\": 1}}\n");
  EXPECT_EQ(index->IngestManifest(other).status().code(), StatusCode::kFailedPrecondition);
  // Survives reopening.
  index.reset();
  index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
  EXPECT_EQ(index->NumSamples(), 3);
  EXPECT_EQ(index->GetSamples({3}).ValueOrDie()[0].tokens.at("text"), 10);
}

TEST(SampleIndex, BadManifestLinesNameFileAndLineAndIngestNothing) {
  const std::string dir = testing::FreshDir("bad_manifest");
  struct Case {
    std::string text;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"{\"id\": 1, \"location\": \"a\", \"tokens\": {\"text\": 1}}\nnot json\n", "m.jsonl:2: not a JSON object"},
      {"{\"id\": \"x\", \"location\": \"a\", \"tokens\": {\"text\": 1}}\n", "\"id\" must be an integer"},
      {"{\"id\": 1, \"tokens\": {\"text\": 1}}\n", "\"location\" must be a string"},
      {"{\"id\": 1, \"location\": \"a\", \"tokens\": {}}\n", "\"tokens\" must be a non-empty object"},
      {"{\"id\": 1, \"location\": \"a\", \"tokens\": {\"Bad-Name\": 1}}\n", "modality name 'Bad-Name'"},
      {"{\"id\": 1, \"location\": \"a\", \"tokens\": {\"text\": -4}}\n", "non-negative integer"},
      {"{\"id\": 1, \"location\": \"a\", \"tokens\": {\"text\": 1}}\n{\"id\": 1, \"location\": \"b\", \"tokens\": "
       "{\"text\": 1}}\n",
       "m.jsonl:2: sample id 1 appears twice"},
  };
  for (const Case& c : cases) {
    const std::string sub = testing::FreshDir("bad_manifest/case");
    const std::string manifest = WriteText(sub + "/m.jsonl", c.text);
    auto index = SampleIndex::Open(sub + "/index.sqlite").ValueOrDie();
    Status s = index->IngestManifest(manifest).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(s.message().find(c.expect), std::string::npos) << s.ToString();
    EXPECT_EQ(index->NumSamples(), 0) << "a failed ingest must leave no samples";
  }
}

TEST(SampleIndex, SchemaVersionMismatchIsAClearError) {
  const std::string dir = testing::FreshDir("version");
  { auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie(); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((dir + "/index.sqlite").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE meta SET value='99' WHERE key='schema_version'", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto reopened = SampleIndex::Open(dir + "/index.sqlite");
  ASSERT_FALSE(reopened.ok());
  EXPECT_EQ(reopened.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(reopened.status().message().find("schema version 99"), std::string::npos) << reopened.status().ToString();
  EXPECT_NE(reopened.status().message().find("reads version 1"), std::string::npos);
}

// A SampleIndex at <dir>/index.sqlite with `manifest` ingested and a run
// configured (`seed`, `global_batch`); fatal where either fails.
void OpenConfigured(const std::string& dir, const std::string& manifest, uint64_t seed, int64_t global_batch,
                    std::unique_ptr<SampleIndex>* index) {
  *index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
  ASSERT_TRUE((*index)->IngestManifest(manifest).ok());
  ASSERT_TRUE((*index)->ConfigureRun(seed, global_batch).ok());
}

TEST(SampleIndex, EpochPermutationsAreSeededPermutationsAndBatchesCoverTheEpoch) {
  const std::string dir = testing::FreshDir("perm");
  ASSERT_TRUE(testing::WriteFakeManifest(dir + "/m.jsonl", 103).ok());
  std::unique_ptr<SampleIndex> index;
  ASSERT_NO_FATAL_FAILURE(OpenConfigured(dir, dir + "/m.jsonl", 42, 10, &index));
  EXPECT_EQ(index->StepsPerEpoch(), 11);
  const auto e0 = index->EpochPermutation(0);
  const auto e1 = index->EpochPermutation(1);
  EXPECT_NE(e0, e1);
  auto sorted = e0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> ids(103);
  for (int i = 0; i < 103; ++i) ids[static_cast<size_t>(i)] = 1000 + i;
  EXPECT_EQ(sorted, ids);
  // Batches of epoch 1 (steps 11..21) cover it exactly once, the last one short.
  std::vector<int64_t> seen;
  for (int64_t step = 11; step < 22; ++step) {
    auto batch = index->BatchForStep(step).ValueOrDie();
    EXPECT_EQ(batch.epoch, 1);
    EXPECT_EQ(batch.sample_ids.size(), step == 21 ? 3u : 10u);
    seen.insert(seen.end(), batch.sample_ids.begin(), batch.sample_ids.end());
  }
  EXPECT_EQ(seen, e1);
  // Another index with the same seed gives the same order; another seed not.
  const std::string dir2 = testing::FreshDir("perm2");
  std::unique_ptr<SampleIndex> index2;
  ASSERT_NO_FATAL_FAILURE(OpenConfigured(dir2, dir + "/m.jsonl", 42, 10, &index2));
  EXPECT_EQ(index2->EpochPermutation(0), e0);
  const std::string dir3 = testing::FreshDir("perm3");
  std::unique_ptr<SampleIndex> index3;
  ASSERT_NO_FATAL_FAILURE(OpenConfigured(dir3, dir + "/m.jsonl", 43, 10, &index3));
  EXPECT_NE(index3->EpochPermutation(0), e0);
  // The seed cannot change mid-run.
  EXPECT_EQ(index->ConfigureRun(43, 10).code(), StatusCode::kFailedPrecondition);
}

TEST(SampleIndex, CommitStepsIsOrderedAndConsumesEachSampleOnce) {
  const std::string dir = testing::FreshDir("commit");
  ASSERT_TRUE(testing::WriteFakeManifest(dir + "/m.jsonl", 20).ok());
  std::unique_ptr<SampleIndex> index;
  ASSERT_NO_FATAL_FAILURE(OpenConfigured(dir, dir + "/m.jsonl", 1, 5, &index));
  auto b0 = index->BatchForStep(0).ValueOrDie();
  auto b1 = index->BatchForStep(1).ValueOrDie();
  auto b2 = index->BatchForStep(2).ValueOrDie();
  EXPECT_EQ(index->CommitSteps({{1, b1.sample_ids, "{}"}}, 1, "c1").code(), StatusCode::kFailedPrecondition)
      << "step 1 before step 0";
  ASSERT_TRUE(index->CommitSteps({{0, b0.sample_ids, "{}"}, {1, b1.sample_ids, "{\"s\":1}"}}, 1, "ckpt-1").ok());
  auto point = index->LastCommit().ValueOrDie();
  EXPECT_EQ(point.last_step, 1);
  EXPECT_EQ(point.checkpoint_file, "ckpt-1");
  EXPECT_EQ(index->ConsumedCount(0).ValueOrDie(), 10);
  auto logged = index->CommittedStep(1).ValueOrDie();
  ASSERT_TRUE(logged.has_value());
  EXPECT_EQ(logged->sample_ids, b1.sample_ids);
  EXPECT_EQ(logged->schedule_json, "{\"s\":1}");
  EXPECT_FALSE(index->CommittedStep(2).ValueOrDie().has_value());
  // Step 2 claiming a sample already consumed this epoch: refused, nothing recorded.
  std::vector<int64_t> bad = b2.sample_ids;
  bad[0] = b0.sample_ids[0];
  Status s = index->CommitSteps({{2, bad, "{}"}}, 2, "ckpt-2");
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.message().find("consumed a second time"), std::string::npos) << s.ToString();
  EXPECT_EQ(index->LastCommit().ValueOrDie().last_step, 1);
  EXPECT_EQ(index->ConsumedCount(0).ValueOrDie(), 10);
  ASSERT_TRUE(index->CommitSteps({{2, b2.sample_ids, "{}"}}, 2, "ckpt-2").ok());
  EXPECT_EQ(index->ConsumedCount(0).ValueOrDie(), 15);
  EXPECT_EQ(index->CommittedCheckpoints().ValueOrDie(), (std::vector<int64_t>{1, 2}));
}

TEST(SampleIndex, TheSqliteCliReadsIt) {
  if (std::system("command -v sqlite3 > /dev/null 2>&1") != 0) GTEST_SKIP() << "sqlite3 CLI not installed";
  const std::string dir = testing::FreshDir("cli");
  ASSERT_TRUE(testing::WriteFakeManifest(dir + "/m.jsonl", 9).ok());
  {
    auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
    ASSERT_TRUE(index->IngestManifest(dir + "/m.jsonl").ok());
  }
  const std::string out = dir + "/out.txt";
  ASSERT_EQ(std::system(("sqlite3 " + dir +
                         "/index.sqlite \"SELECT count(*), sum(tokens_image > 0) FROM samples; "
                         "SELECT value FROM meta WHERE key='schema_version'\" > " +
                         out)
                            .c_str()),
            0);
  std::ifstream in(out);
  std::string counts, version;
  std::getline(in, counts);
  std::getline(in, version);
  EXPECT_EQ(counts, "9|3");  // WriteFakeManifest: every third sample has an image
  EXPECT_EQ(version, "1");
}

}  // namespace
}  // namespace maestro::datalayer
