// SPDX-License-Identifier: Apache-2.0
#include "datalayer/activation_spool.h"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <sstream>

#include "datalayer/sample_index.h"
#include "tests/datalayer/test_dirs.h"

namespace maestro::datalayer {
namespace {

std::vector<float> Row(int64_t sample, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(sample) + 0.25f * static_cast<float>(i);
  return v;
}

RowView View(const std::vector<float>& v, std::vector<int64_t> dims) {
  return RowView{std::move(dims), v.data(), v.size() * sizeof(float)};
}

std::vector<float> Floats(const SpoolRow& row) {
  std::vector<float> v(row.data.size() / sizeof(float));
  std::memcpy(v.data(), row.data.data(), row.data.size());
  return v;
}

struct SpoolFixture {
  explicit SpoolFixture(std::string d) : dir(std::move(d)) {}
  std::string dir;
  std::unique_ptr<SampleIndex> index;
  std::unique_ptr<ActivationSpool> spool;
  void Open(const SpoolOptions& options) {
    spool.reset();
    index.reset();
    index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
    spool = ActivationSpool::Open(dir + "/spool.h5", &index->db(), options).ValueOrDie();
  }
};

SpoolOptions Options(bool reuse_across_epochs = false, int64_t budget = int64_t{1} << 30) {
  SpoolOptions o;
  o.name = "teacher.topk";
  o.dtype = DType::kF32;
  o.reuse_across_epochs = reuse_across_epochs;
  o.budget_bytes = budget;
  o.chunk_bytes = 4096;
  return o;
}

TEST(ActivationSpool, CommittedRowsRoundTripAcrossReopenAndUncommittedOnesDoNot) {
  SpoolFixture f(testing::FreshDir("spool_roundtrip"));
  f.Open(Options());
  for (int64_t s = 0; s < 40; ++s) {  // rows of varying shape: (s % 5 + 1, 16)
    auto row = Row(s, static_cast<size_t>((s % 5 + 1) * 16));
    ASSERT_TRUE(f.spool->Put(s, 0, View(row, {s % 5 + 1, 16})).ValueOrDie());
  }
  ASSERT_TRUE(f.spool->Commit().ok());
  auto staged = Row(99, 16);
  ASSERT_TRUE(f.spool->Put(99, 0, View(staged, {16})).ValueOrDie());  // never committed
  f.Open(Options());
  for (int64_t s = 0; s < 40; ++s) {
    auto got = f.spool->Get(s, 0).ValueOrDie();
    ASSERT_TRUE(got.has_value()) << s;
    EXPECT_EQ(got->dims, (std::vector<int64_t>{s % 5 + 1, 16}));
    EXPECT_EQ(Floats(*got), Row(s, static_cast<size_t>((s % 5 + 1) * 16)));
  }
  EXPECT_FALSE(f.spool->Get(99, 0).ValueOrDie().has_value());
  EXPECT_EQ(f.spool->stats().hits, 40);
  EXPECT_EQ(f.spool->stats().corrupt_rows, 0);
}

TEST(ActivationSpool, LargeRowsWrittenDirectlyMixWithStagedOnes) {
  SpoolFixture f(testing::FreshDir("spool_large"));
  f.Open(Options());
  // (128, 256) f32 rows = 128 KiB go straight to the file; 16-value rows are staged.
  for (int64_t s = 0; s < 12; ++s) {
    const bool large = s % 3 != 1;
    auto row = Row(s, large ? 128 * 256 : 16);
    ASSERT_TRUE(
        f.spool->Put(s, 0, View(row, large ? std::vector<int64_t>{128, 256} : std::vector<int64_t>{16})).ValueOrDie());
    if (s == 5) {
      ASSERT_TRUE(f.spool->Commit().ok());
    }
  }
  ASSERT_TRUE(f.spool->Commit().ok());
  auto lost = Row(50, 128 * 256);  // written to the file, never committed
  ASSERT_TRUE(f.spool->Put(50, 0, View(lost, {128, 256})).ValueOrDie());
  f.Open(Options());
  for (int64_t s = 0; s < 12; ++s) {
    auto got = f.spool->Get(s, 0).ValueOrDie();
    ASSERT_TRUE(got.has_value()) << s;
    EXPECT_EQ(Floats(*got), Row(s, s % 3 != 1 ? 128 * 256 : 16)) << s;
  }
  EXPECT_FALSE(f.spool->Get(50, 0).ValueOrDie().has_value());
  // The uncommitted row's space is reused by the next row.
  auto next = Row(60, 16);
  ASSERT_TRUE(f.spool->Put(60, 0, View(next, {16})).ValueOrDie());
  ASSERT_TRUE(f.spool->Commit().ok());
  f.Open(Options());
  EXPECT_EQ(Floats(*f.spool->Get(60, 0).ValueOrDie()), next);
  EXPECT_EQ(Floats(*f.spool->Get(11, 0).ValueOrDie()), Row(11, 128 * 256));
  EXPECT_EQ(f.spool->stats().corrupt_rows, 0);
}

TEST(ActivationSpool, EpochReuseFollowsTheOption) {
  SpoolFixture f(testing::FreshDir("spool_epochs"));
  f.Open(Options(/*reuse_across_epochs=*/false));
  auto row = Row(5, 8);
  ASSERT_TRUE(f.spool->Put(5, 0, View(row, {8})).ValueOrDie());
  ASSERT_TRUE(f.spool->Commit().ok());
  EXPECT_TRUE(f.spool->Get(5, 0).ValueOrDie().has_value());
  EXPECT_FALSE(f.spool->Get(5, 1).ValueOrDie().has_value());
  f.Open(Options(/*reuse_across_epochs=*/true));
  EXPECT_TRUE(f.spool->Get(5, 1).ValueOrDie().has_value());
}

TEST(ActivationSpool, BudgetCapsTheFile) {
  SpoolFixture f(testing::FreshDir("spool_budget"));
  f.Open(Options(false, /*budget=*/10 * 64 * 4));
  int kept = 0;
  for (int64_t s = 0; s < 20; ++s) {
    auto row = Row(s, 64);
    kept += f.spool->Put(s, 0, View(row, {64})).ValueOrDie() ? 1 : 0;
  }
  EXPECT_EQ(kept, 10);
  EXPECT_EQ(f.spool->stats().rows_over_budget, 10);
  ASSERT_TRUE(f.spool->Commit().ok());
  EXPECT_LE(f.spool->stats().committed_bytes, 10 * 64 * 4);
}

TEST(ActivationSpool, ACorruptRowIsDetectedAndRecomputedNeverUsed) {
  SpoolFixture f(testing::FreshDir("spool_corrupt"));
  f.Open(Options());
  for (int64_t s = 0; s < 4; ++s) {
    auto row = Row(s, 32);
    ASSERT_TRUE(f.spool->Put(s, 0, View(row, {32})).ValueOrDie());
  }
  ASSERT_TRUE(f.spool->Commit().ok());
  f.spool.reset();
  // Flip one value of row 2 (elements 64..95) behind the spool's back.
  {
    hid_t file = H5Fopen((f.dir + "/spool.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    hid_t ds = H5Dopen2(file, "/values", H5P_DEFAULT);
    hid_t fspace = H5Dget_space(ds);
    hsize_t start[1] = {70}, count[1] = {1};
    H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, count, nullptr);
    hid_t mspace = H5Screate_simple(1, count, nullptr);
    const float bad = -1.0f;
    ASSERT_GE(H5Dwrite(ds, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, &bad), 0);
    H5Sclose(mspace);
    H5Sclose(fspace);
    H5Dclose(ds);
    H5Fclose(file);
  }
  f.Open(Options());
  EXPECT_TRUE(f.spool->Get(1, 0).ValueOrDie().has_value());
  EXPECT_FALSE(f.spool->Get(2, 0).ValueOrDie().has_value()) << "a corrupt row must not be served";
  EXPECT_EQ(f.spool->stats().corrupt_rows, 1);
  // Recompute and commit it: served again, correctly.
  auto row = Row(2, 32);
  ASSERT_TRUE(f.spool->Put(2, 0, View(row, {32})).ValueOrDie());
  ASSERT_TRUE(f.spool->Commit().ok());
  f.Open(Options());
  auto again = f.spool->Get(2, 0).ValueOrDie();
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(Floats(*again), Row(2, 32));
}

TEST(ActivationSpool, AnUnreadableFileIsMovedAsideAndEverythingRecomputed) {
  SpoolFixture f(testing::FreshDir("spool_garbage"));
  f.Open(Options());
  auto row = Row(1, 16);
  ASSERT_TRUE(f.spool->Put(1, 0, View(row, {16})).ValueOrDie());
  ASSERT_TRUE(f.spool->Commit().ok());
  f.spool.reset();
  std::ofstream(f.dir + "/spool.h5", std::ios::trunc) << "this is not HDF5";
  f.Open(Options());
  EXPECT_FALSE(f.spool->Get(1, 0).ValueOrDie().has_value());
  EXPECT_TRUE(std::ifstream(f.dir + "/spool.h5.corrupt").good());
}

TEST(ActivationSpool, RejectsARowWhoseBytesDoNotMatchItsShape) {
  SpoolFixture f(testing::FreshDir("spool_shape"));
  f.Open(Options());
  auto row = Row(1, 16);
  EXPECT_EQ(f.spool->Put(1, 0, RowView{{4, 5}, row.data(), row.size() * 4}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ActivationSpool, H5dumpReadsTheLayout) {
  if (std::system("command -v h5dump > /dev/null 2>&1") != 0) GTEST_SKIP() << "h5dump (hdf5-tools) not installed";
  SpoolFixture f{testing::FreshDir("spool_h5dump")};
  f.Open(Options());
  auto row = Row(7, 4);
  ASSERT_TRUE(f.spool->Put(7, 3, View(row, {2, 2})).ValueOrDie());
  ASSERT_TRUE(f.spool->Commit().ok());
  f.spool.reset();  // HDF5 locks a file open for writing
  const std::string out = f.dir + "/dump.txt";
  ASSERT_EQ(std::system(("h5dump " + f.dir + "/spool.h5 > " + out + " 2>&1").c_str()), 0);
  std::ifstream in(out);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  EXPECT_NE(text.find("DATASET \"values\""), std::string::npos) << text;
  EXPECT_NE(text.find("DATASET \"rows\""), std::string::npos);
  EXPECT_NE(text.find("\"f32\""), std::string::npos);
  EXPECT_NE(text.find("7.25"), std::string::npos);  // Row(7, 4)[1]
}

// A sealed file (committed, closed) read by any process: OpenSealed serves
// its committed rows (a sample written twice: the later row), verified by
// their checksums, reads only the rows its seal counts, and refuses writes.
TEST(ActivationSpool, ASealedFileServesItsCommittedRowsReadOnly) {
  SpoolFixture f(testing::FreshDir("spool_sealed"));
  f.Open(Options(/*reuse_across_epochs=*/true));
  const auto a = Row(1, 16), b = Row(2, 16), a2 = Row(7, 16), late = Row(3, 16);
  ASSERT_TRUE(f.spool->Put(1, 0, View(a, {4, 4})).ValueOrDie());
  ASSERT_TRUE(f.spool->Put(2, 0, View(b, {4, 4})).ValueOrDie());
  ASSERT_TRUE(f.spool->Commit().ok());
  ASSERT_TRUE(f.spool->Put(1, 1, View(a2, {4, 4})).ValueOrDie());  // sample 1 again, later
  ASSERT_TRUE(f.spool->Commit().ok());
  const int64_t rows = f.spool->committed_table_rows();
  EXPECT_EQ(rows, 3);
  ASSERT_TRUE(f.spool->Close().ok());
  f.spool.reset();
  f.index.reset();

  auto sealed = ActivationSpool::OpenSealed(f.dir + "/spool.h5", Options(true), rows);
  ASSERT_TRUE(sealed.ok()) << sealed.status().ToString();
  std::vector<int64_t> samples = (*sealed)->CommittedSamples();
  std::sort(samples.begin(), samples.end());
  EXPECT_EQ(samples, (std::vector<int64_t>{1, 2}));
  auto one = (*sealed)->Get(1, 5).ValueOrDie();
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(Floats(*one), a2) << "the later row of sample 1";
  auto two = (*sealed)->Get(2, 5).ValueOrDie();
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(Floats(*two), b);
  EXPECT_FALSE((*sealed)->Put(3, 0, View(late, {4, 4})).ok()) << "a sealed file takes no rows";
  // A seal that counts fewer rows: only those are records.
  auto first_two = ActivationSpool::OpenSealed(f.dir + "/spool.h5", Options(true), 2);
  ASSERT_TRUE(first_two.ok());
  EXPECT_EQ(Floats(*(*first_two)->Get(1, 0).ValueOrDie()), a);
  EXPECT_FALSE(ActivationSpool::OpenSealed(f.dir + "/spool.h5", Options(true), 4).ok()) << "more rows than the file";
  SpoolOptions other = Options(true);
  other.dtype = DType::kBF16;
  EXPECT_FALSE(ActivationSpool::OpenSealed(f.dir + "/spool.h5", other, rows).ok()) << "another dtype";
}

}  // namespace
}  // namespace maestro::datalayer
