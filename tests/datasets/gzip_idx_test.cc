// SPDX-License-Identifier: Apache-2.0
// gzip reading (zlib) and idx parsing on made-up files: gzip and plain text
// read alike, damaged gzip streams are Corruption, and no byte string makes
// ParseIdx crash or accept data that disagrees with its dims; IdxFile reads a
// plain file in place (mapped) and a gzip one inflated, alike, with the same
// checks.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "datasets/demo_data.h"
#include "datasets/idx_file.h"
#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

namespace fs = std::filesystem;

// This file's scratch folders: <test-tmp>/maestro-datasets-gz-<pid>/<name> (fixtures::ScratchDir).
constexpr char kScratch[] = "maestro-datasets-gz-";

void WriteGzip(const std::string& path, const std::string& content) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, content.data(), static_cast<unsigned>(content.size())), static_cast<int>(content.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

std::string SomeText() {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "line " + std::to_string(i) + " of a made-up text\n";
  return text;
}

TEST(GzipRead, GzipAndPlainFilesReadTheSame) {
  const std::string dir = fixtures::ScratchDir(kScratch, "same");
  const std::string text = SomeText();
  WriteGzip(dir + "/t.gz", text);
  std::ofstream(dir + "/t.txt", std::ios::binary) << text;
  ASSERT_LT(fs::file_size(dir + "/t.gz"), text.size()) << "really compressed";
  auto gz = ReadMaybeGzipFile(dir + "/t.gz", "hint");
  auto plain = ReadMaybeGzipFile(dir + "/t.txt", "hint");
  ASSERT_TRUE(gz.ok()) << gz.status().ToString();
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(*gz, text);
  EXPECT_EQ(*plain, text);

  // A gzip text_path gives the same samples as the plain one.
  DemoOptions o;
  o.kind = DemoKind::kText;
  o.seq_len = 33;
  o.text_path = dir + "/t.gz";
  auto a = DemoDataset::Open(o);
  o.text_path = dir + "/t.txt";
  auto b = DemoDataset::Open(o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ((*a)->NumTrain(), (*b)->NumTrain());
  EXPECT_EQ((*a)->NumTextChunks(), static_cast<int64_t>(text.size()) / 32);
  for (int64_t id = 0; id < (*a)->NumTrain(); ++id)
    EXPECT_EQ((*a)->LoadTrain(id)->input_ids, (*b)->LoadTrain(id)->input_ids);
  EXPECT_EQ((*a)->Decode((*a)->LoadTrain(0)->input_ids), "<bos>line 0 of a made-up text\\nline 1 ");
}

TEST(GzipRead, TruncatedOrDamagedGzipIsCorruption) {
  const std::string dir = fixtures::ScratchDir(kScratch, "damaged");
  WriteGzip(dir + "/good.gz", SomeText());
  const std::string good = fixtures::ReadFile(dir + "/good.gz");
  std::ofstream(dir + "/truncated.gz", std::ios::binary) << good.substr(0, good.size() / 2);
  std::string flipped = good;
  flipped[flipped.size() - 6] = static_cast<char>(flipped[flipped.size() - 6] ^ 0x5a);  // inside the CRC-32 trailer
  std::ofstream(dir + "/flipped.gz", std::ios::binary) << flipped;
  for (const char* name : {"truncated.gz", "flipped.gz"}) {
    auto r = ReadMaybeGzipFile(dir + "/" + name, "reinstall the package");
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
    EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().ToString();
  }
  auto dir_as_file = ReadMaybeGzipFile(dir, "hint");
  ASSERT_FALSE(dir_as_file.ok());
  EXPECT_EQ(dir_as_file.status().code(), StatusCode::kInvalidArgument);
}

TEST(IdxFile, RandomBytesNeverCrashAndNeverDisagreeWithTheDims) {
  std::mt19937_64 rng(42);
  const std::string valid(
      "\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02"
      "\x01\x02\x03\x04\x05\x06\x07\x08",
      24);
  int accepted = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    std::string bytes = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 3) {
        case 0: bytes[rng() % bytes.size()] = static_cast<char>(rng()); break;
        case 1: bytes.resize(rng() % (bytes.size() + 1)); break;
        default: bytes.push_back(static_cast<char>(rng())); break;
      }
      if (bytes.empty()) break;
    }
    for (int rank = 1; rank <= 3; ++rank) {
      auto r = ParseIdx(bytes, rank, "fuzz");
      if (!r.ok()) {
        EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
        continue;
      }
      ++accepted;
      ASSERT_EQ(static_cast<int>(r->dims.size()), rank);
      size_t count = 1;
      for (int64_t d : r->dims) count *= static_cast<size_t>(d);
      ASSERT_EQ(r->data.size(), count);
    }
  }
  EXPECT_GT(accepted, 0) << "some mutations (e.g. of the data bytes) stay valid";
}

// An idx array of 3 x 2 x 2 bytes, a plain file and its gzip: IdxFile reads
// both as ParseIdx does, the plain one in place; a damaged one is refused with
// ParseIdx's reason, a missing one names the hint.
TEST(IdxFile, APlainFileIsReadInPlaceAndAGzipOneInflatedAlike) {
  const std::string dir = fixtures::ScratchDir(kScratch, "idx_file");
  std::string bytes("\x00\x00\x08\x03\x00\x00\x00\x03\x00\x00\x00\x02\x00\x00\x00\x02", 16);
  for (int i = 0; i < 12; ++i) bytes.push_back(static_cast<char>(7 * i + 1));
  std::ofstream(dir + "/a-idx3-ubyte", std::ios::binary) << bytes;
  WriteGzip(dir + "/a-idx3-ubyte.gz", bytes);
  auto expected = ParseIdx(bytes, 3, "expected");
  ASSERT_TRUE(expected.ok()) << expected.status().ToString();
  for (const char* name : {"a-idx3-ubyte", "a-idx3-ubyte.gz"}) {
    auto file = IdxFile::Open(dir + "/" + name, 3, "hint");
    ASSERT_TRUE(file.ok()) << name << ": " << file.status().ToString();
    EXPECT_EQ(file->dims(), expected->dims) << name;
    ASSERT_EQ(file->size(), expected->data.size()) << name;
    EXPECT_TRUE(std::equal(expected->data.begin(), expected->data.end(), file->data())) << name;
    // A moved IdxFile still reads the same bytes (the data is not a pointer
    // into a moved-from buffer).
    IdxFile moved = std::move(file).value();
    EXPECT_TRUE(std::equal(expected->data.begin(), expected->data.end(), moved.data())) << name;
  }

  std::ofstream(dir + "/short-idx3-ubyte", std::ios::binary) << bytes.substr(0, bytes.size() - 1);
  auto truncated = IdxFile::Open(dir + "/short-idx3-ubyte", 3, "hint");
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kCorruption);
  EXPECT_NE(truncated.status().message().find("short-idx3-ubyte"), std::string::npos) << truncated.status().ToString();
  auto wrong_rank = IdxFile::Open(dir + "/a-idx3-ubyte", 1, "hint");
  ASSERT_FALSE(wrong_rank.ok());
  EXPECT_EQ(wrong_rank.status().code(), StatusCode::kCorruption);

  auto missing = IdxFile::Open(dir + "/none-idx3-ubyte", 3, "install the package");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("install the package"), std::string::npos) << missing.status().ToString();
  auto directory = IdxFile::Open(dir, 3, "hint");
  ASSERT_FALSE(directory.ok());
  EXPECT_EQ(directory.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace maestro::datasets
