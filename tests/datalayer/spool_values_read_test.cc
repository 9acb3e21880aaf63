// SPDX-License-Identifier: Apache-2.0
// datalayer/spool_values_read.h: direct reads of a spool file's /values
// against HDF5's own H5Dread of the same values, and through the spool: rows
// read, then written around and after, then read again.
#include "datalayer/spool_values_read.h"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <cstring>
#include <vector>

#include "datalayer/activation_spool.h"
#include "datalayer/crc32c.h"
#include "datalayer/sample_index.h"
#include "tests/datalayer/test_dirs.h"

namespace maestro::datalayer {
namespace {

// A 1-D extendible float dataset of `n` values (value i = i * 0.5) in
// chunks of `chunk` values, as the spool makes /values, and its file.
struct ValuesFile {
  hid_t file = -1, values = -1;
  ValuesFile(const std::string& path, hsize_t n, hsize_t chunk, bool deflate, hid_t stored = H5T_NATIVE_FLOAT) {
    file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hsize_t dims[1] = {n}, maxdims[1] = {H5S_UNLIMITED};
    const hid_t space = H5Screate_simple(1, dims, maxdims);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 1, &chunk);
    if (deflate) H5Pset_deflate(dcpl, 1);
    values = H5Dcreate2(file, "/values", stored, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    std::vector<float> v(n);
    for (hsize_t i = 0; i < n; ++i) v[i] = 0.5f * static_cast<float>(i);
    H5Dwrite(values, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Fflush(file, H5F_SCOPE_GLOBAL);
    H5Pclose(dcpl);
    H5Sclose(space);
  }
  ~ValuesFile() {
    H5Dclose(values);
    H5Fclose(file);
  }
  std::vector<float> ThroughHdf5(hsize_t offset, hsize_t count) const {
    std::vector<float> out(count);
    const hid_t fspace = H5Dget_space(values);
    hsize_t start[1] = {offset}, n[1] = {count};
    H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, nullptr, n, nullptr);
    const hid_t mspace = H5Screate_simple(1, n, nullptr);
    EXPECT_GE(H5Dread(values, H5T_NATIVE_FLOAT, mspace, fspace, H5P_DEFAULT, out.data()), 0);
    H5Sclose(mspace);
    H5Sclose(fspace);
    return out;
  }
};

TEST(SpoolValuesRead, EqualsH5DreadAcrossChunksAndPiecesFromAnyOffset) {
  const std::string dir = testing::FreshDir("spool_values_read");
  // 1,000-value chunks (not a power of two), a run of 300,001 values from an
  // offset inside a chunk: chunks 12-312, 5 pieces of 256 KiB, odd ends.
  const ValuesFile f(dir + "/values.h5", 400000, 1000, /*deflate=*/false);
  DirectValues direct = DirectValuesOf(f.file, f.values, H5T_NATIVE_FLOAT);
  ASSERT_GE(direct.fd, 0);
  EXPECT_EQ(direct.chunk_values, 1000u);
  for (const auto& [offset, count] : {std::pair<hsize_t, hsize_t>{12345, 300001}, {0, 1}, {999, 2}, {399000, 1000}}) {
    std::vector<float> got(count, -7.0f);
    const std::optional<uint32_t> crc =
        ReadValuesDirect(direct, f.values, static_cast<int64_t>(offset), static_cast<int64_t>(count), sizeof(float),
                         reinterpret_cast<std::byte*>(got.data()));
    ASSERT_TRUE(crc.has_value()) << offset;
    const std::vector<float> want = f.ThroughHdf5(offset, count);
    EXPECT_EQ(got, want) << offset;
    EXPECT_EQ(*crc, Crc32c(want.data(), want.size() * sizeof(float))) << offset;
  }
  // Chunks 12-312, then 0, then 0 (known) and 1, then 399: each looked up once.
  EXPECT_EQ(direct.chunk_address.size(), 301u + 1 + 1 + 1);
}

TEST(SpoolValuesRead, AFilteredDatasetAnotherByteOrderOrAClosedFileIsLeftToH5Dread) {
  const std::string dir = testing::FreshDir("spool_values_read_filtered");
  const ValuesFile deflated(dir + "/deflated.h5", 5000, 1000, /*deflate=*/true);
  DirectValues direct = DirectValuesOf(deflated.file, deflated.values, H5T_NATIVE_FLOAT);
  EXPECT_EQ(direct.fd, -1) << "deflated chunks are not the values";
  float one = 0;
  EXPECT_FALSE(ReadValuesDirect(direct, deflated.values, 0, 1, sizeof(float), reinterpret_cast<std::byte*>(&one)));
  const ValuesFile big_endian(dir + "/big_endian.h5", 5000, 1000, /*deflate=*/false, H5T_IEEE_F32BE);
  EXPECT_EQ(DirectValuesOf(big_endian.file, big_endian.values, H5T_NATIVE_FLOAT).fd, -1)
      << "stored bytes that need converting";
  EXPECT_GE(DirectValuesOf(big_endian.file, big_endian.values, H5T_IEEE_F32BE).fd, 0) << "the same, read as stored";
  EXPECT_EQ(DirectValuesOf(-1, -1, H5T_NATIVE_FLOAT).fd, -1);
}

TEST(SpoolValuesRead, RowsWrittenAfterAReadIntoTheSameAndNewChunksReadBack) {
  const std::string dir = testing::FreshDir("spool_values_read_interleaved");
  auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
  SpoolOptions o;
  o.name = "teacher.hidden";
  o.dtype = DType::kF32;
  o.chunk_bytes = 4096;  // 1,024 values
  auto spool = ActivationSpool::Open(dir + "/spool.h5", &index->db(), o).ValueOrDie();
  const auto row = [](int64_t sample, size_t n) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(sample * 1000 + static_cast<int64_t>(i));
    return v;
  };
  // Rows of 700 values: each new row ends inside a chunk the last one began.
  for (int64_t round = 0; round < 3; ++round) {
    for (int64_t s = round * 4; s < round * 4 + 4; ++s) {
      const auto v = row(s, 700);
      ASSERT_TRUE(spool->Put(s, 0, RowView{{700}, v.data(), v.size() * sizeof(float)}).ValueOrDie());
    }
    ASSERT_TRUE(spool->Commit().ok());
    for (int64_t s = 0; s < round * 4 + 4; ++s) {  // every row so far, the earlier ones again
      SpoolRow got;
      ASSERT_TRUE(spool->GetInto(s, 0, &got).ValueOrDie()) << s;
      std::vector<float> values(got.data.size() / sizeof(float));
      std::memcpy(values.data(), got.data.data(), got.data.size());
      EXPECT_EQ(values, row(s, 700)) << "round " << round << " sample " << s;
    }
  }
  EXPECT_EQ(spool->stats().corrupt_rows, 0);
}

}  // namespace
}  // namespace maestro::datalayer
