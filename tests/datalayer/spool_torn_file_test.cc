// SPDX-License-Identifier: Apache-2.0
// A spool file torn the way kill -9 tears it (cut short, or metadata bytes
// overwritten) is never fatal: Open() succeeds, the lost rows are misses,
// and Put/Commit/Get work on a fresh file.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "datalayer/activation_spool.h"
#include "datalayer/sample_index.h"
#include "tests/datalayer/test_dirs.h"

namespace maestro::datalayer {
namespace {

constexpr int kSamples = 6;
constexpr size_t kRowFloats = 700;  // 2800 bytes: rows span several 4 KiB chunks

std::vector<float> Row(int64_t sample) {
  std::vector<float> v(kRowFloats);
  for (size_t i = 0; i < kRowFloats; ++i) v[i] = static_cast<float>(sample) * 1000.0f + static_cast<float>(i);
  return v;
}

SpoolOptions Options() {
  SpoolOptions o;
  o.name = "teacher.topk";
  o.dtype = DType::kF32;
  o.chunk_bytes = 4096;
  return o;
}

void PutAndCommitAll(ActivationSpool* spool, int64_t epoch) {
  for (int64_t s = 0; s < kSamples; ++s) {
    const std::vector<float> v = Row(s);
    auto put = spool->Put(s, epoch, RowView{{static_cast<int64_t>(kRowFloats)}, v.data(), v.size() * sizeof(float)});
    ASSERT_TRUE(put.ok()) << put.status().ToString();
    ASSERT_TRUE(*put);
  }
  Status commit = spool->Commit();
  ASSERT_TRUE(commit.ok()) << commit.ToString();
}

// Every committed row is either served intact or a miss; never wrong data.
int CountIntactHits(ActivationSpool* spool, int64_t epoch) {
  int hits = 0;
  for (int64_t s = 0; s < kSamples; ++s) {
    auto got = spool->Get(s, epoch);
    EXPECT_TRUE(got.ok()) << got.status().ToString();
    if (!got.ok() || !got->has_value()) continue;
    const std::vector<float> want = Row(s);
    EXPECT_EQ((*got)->data.size(), want.size() * sizeof(float));
    EXPECT_EQ(std::memcmp((*got)->data.data(), want.data(), want.size() * sizeof(float)), 0) << "sample " << s;
    ++hits;
  }
  return hits;
}

// Writes a committed spool, lets `tear` damage the file, then checks that
// reopening, Get, Put and Commit work and that the rows come back.
template <typename Tear>
void CheckSurvives(const std::string& name, Tear tear, bool expect_all_lost) {
  SCOPED_TRACE(name);
  const std::string dir = testing::FreshDir("spool_torn_" + name);
  const std::string h5 = dir + "/spool.h5";
  {
    auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
    auto spool = ActivationSpool::Open(h5, &index->db(), Options()).ValueOrDie();
    PutAndCommitAll(spool.get(), 0);
    ASSERT_EQ(CountIntactHits(spool.get(), 0), kSamples);
  }
  tear(h5, static_cast<int64_t>(std::filesystem::file_size(h5)));
  {
    auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
    auto spool = ActivationSpool::Open(h5, &index->db(), Options());
    ASSERT_TRUE(spool.ok()) << spool.status().ToString();
    const int hits = CountIntactHits(spool->get(), 0);
    if (expect_all_lost) {
      EXPECT_EQ(hits, 0);
    }
    // Recompute the misses (Put/Commit on the reopened or fresh file).
    for (int64_t s = 0; s < kSamples; ++s) {
      auto got = (*spool)->Get(s, 0);
      ASSERT_TRUE(got.ok());
      if (got->has_value()) continue;
      const std::vector<float> v = Row(s);
      auto put = (*spool)->Put(s, 0, RowView{{static_cast<int64_t>(kRowFloats)}, v.data(), v.size() * sizeof(float)});
      ASSERT_TRUE(put.ok()) << put.status().ToString();
    }
    Status commit = (*spool)->Commit();
    ASSERT_TRUE(commit.ok()) << commit.ToString();
    EXPECT_EQ(CountIntactHits(spool->get(), 0), kSamples);
  }
  {
    // And the recomputed rows survive the next reopen.
    auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
    auto spool = ActivationSpool::Open(h5, &index->db(), Options());
    ASSERT_TRUE(spool.ok()) << spool.status().ToString();
    EXPECT_EQ(CountIntactHits(spool->get(), 0), kSamples);
  }
}

void Truncate(const std::string& path, int64_t length) {
  std::filesystem::resize_file(path, static_cast<uintmax_t>(length));
}

void Overwrite(const std::string& path, int64_t at, int64_t n, char byte) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(at);
  const std::vector<char> junk(static_cast<size_t>(n), byte);
  f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
}

TEST(SpoolTornFile, TruncatedToAnyLengthReopensAndRecomputes) {
  CheckSurvives(
      "trunc_empty", [](const std::string& p, int64_t) { Truncate(p, 0); }, true);
  CheckSurvives(
      "trunc_superblock", [](const std::string& p, int64_t) { Truncate(p, 96); }, true);
  CheckSurvives(
      "trunc_past_superblock", [](const std::string& p, int64_t) { Truncate(p, 800); }, true);
  CheckSurvives(
      "trunc_4k", [](const std::string& p, int64_t) { Truncate(p, 4096); }, false);
  CheckSurvives(
      "trunc_half", [](const std::string& p, int64_t size) { Truncate(p, size / 2); }, false);
  CheckSurvives(
      "trunc_last_byte", [](const std::string& p, int64_t size) { Truncate(p, size - 1); }, false);
}

TEST(SpoolTornFile, OverwrittenMetadataReopensAndRecomputes) {
  for (int64_t at : {0, 40, 96, 200, 400, 800, 1200, 1600, 2000}) {
    for (char byte : {'\0', '\xff'}) {
      CheckSurvives(
          "overwrite_" + std::to_string(at) + "_" + std::to_string(static_cast<int>(byte) & 0xff),
          [at, byte](const std::string& p, int64_t) { Overwrite(p, at, 64, byte); }, false);
    }
  }
}

// The tear of issue #24, made by hand: a commit's chunk index and extent
// reached the file, its superblock (the end of allocation, EOA) and its
// commit records did not (kill -9 between the two inside H5Fflush). The
// reopened spool keeps the rows committed before, takes writes into the
// chunks named past the old EOA, and moves nothing aside.
TEST(SpoolTornFile, EndOfAllocationBehindItsChunksIsRepairedAndTheRowsKept) {
  const std::string dir = testing::FreshDir("spool_torn_eoa");
  const std::string h5 = dir + "/spool.h5";
  auto put_all = [](ActivationSpool* spool, int64_t first) {
    for (int64_t s = first; s < first + kSamples; ++s) {
      const std::vector<float> v = Row(s);
      auto put = spool->Put(s, 0, RowView{{static_cast<int64_t>(kRowFloats)}, v.data(), v.size() * sizeof(float)});
      ASSERT_TRUE(put.ok() && *put) << put.status().ToString();
    }
    Status commit = spool->Commit();
    ASSERT_TRUE(commit.ok()) << commit.ToString();
  };
  int64_t values = 0, rows = 0;
  std::vector<char> superblock;
  {
    auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
    auto spool = ActivationSpool::Open(h5, &index->db(), Options()).ValueOrDie();
    put_all(spool.get(), 0);
    auto meta = index->db().Prepare("SELECT committed_values, committed_rows FROM spools").ValueOrDie();
    ASSERT_TRUE(meta.Step().ValueOrDie());
    values = meta.Int(0);
    rows = meta.Int(1);
  }
  {
    // The superblock after the first commit: version 0 is 96 bytes, 1 is 100.
    std::ifstream f(h5, std::ios::binary);
    superblock.resize(100);
    f.read(superblock.data(), static_cast<std::streamsize>(superblock.size()));
    ASSERT_TRUE(superblock[8] == 0 || superblock[8] == 1) << "superblock version " << int{superblock[8]};
    superblock.resize(superblock[8] == 0 ? 96 : 100);
  }
  const auto size_before = std::filesystem::file_size(h5);
  {
    auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
    auto spool = ActivationSpool::Open(h5, &index->db(), Options()).ValueOrDie();
    put_all(spool.get(), kSamples);  // new chunks past the first commit's EOA
  }
  ASSERT_GT(std::filesystem::file_size(h5), size_before);
  {
    std::fstream f(h5, std::ios::in | std::ios::out | std::ios::binary);
    f.write(superblock.data(), static_cast<std::streamsize>(superblock.size()));
    auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
    ASSERT_TRUE(index->db().Exec(fmt::format("DELETE FROM spool_rows WHERE sample_id >= {}", kSamples)).ok());
    ASSERT_TRUE(
        index->db().Exec(fmt::format("UPDATE spools SET committed_values={}, committed_rows={}", values, rows)).ok());
  }
  {
    auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
    auto spool = ActivationSpool::Open(h5, &index->db(), Options()).ValueOrDie();
    EXPECT_EQ(CountIntactHits(spool.get(), 0), kSamples) << "the rows committed before the tear are kept";
    put_all(spool.get(), kSamples);  // writes into the chunks the old EOA did not cover
    for (int64_t s = 0; s < 2 * kSamples; ++s) {
      auto got = spool->Get(s, 0);
      ASSERT_TRUE(got.ok() && got->has_value()) << "sample " << s;
      const std::vector<float> want = Row(s);
      EXPECT_EQ(std::memcmp((*got)->data.data(), want.data(), want.size() * sizeof(float)), 0) << "sample " << s;
    }
    EXPECT_EQ(spool->stats().corrupt_rows, 0);
  }
  EXPECT_FALSE(std::filesystem::exists(h5 + ".corrupt")) << "the file was moved aside";
  testing::RemoveDir(dir);
}

}  // namespace
}  // namespace maestro::datalayer
