// SPDX-License-Identifier: Apache-2.0
// Sharded checkpoints (datalayer/sharded_checkpoint.h) below the runtime:
// the box arithmetic, a rank's file, the metadata's commit and checks.
#include "datalayer/sharded_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "datalayer/checkpoint_store.h"
#include "datalayer/crc32c.h"
#include "datalayer/training_run.h"
#include "tests/datalayer/test_dirs.h"

namespace maestro::datalayer {
namespace {

// The C-order flat indices of `box` in a tensor of `shape`, in order.
std::vector<int64_t> FlatIndices(const std::vector<int64_t>& shape, const Box& box) {
  std::vector<int64_t> out;
  std::vector<int64_t> at(box.offsets.size(), 0);
  if (box.elements() == 0) return out;
  while (true) {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + box.offsets[d] + at[d];
    out.push_back(flat);
    int d = static_cast<int>(at.size()) - 1;
    for (; d >= 0; --d) {
      if (++at[static_cast<size_t>(d)] < box.lengths[static_cast<size_t>(d)]) break;
      at[static_cast<size_t>(d)] = 0;
    }
    if (d < 0) break;
  }
  return out;
}

TEST(ShardedCheckpoint, FlatRangesBecomeBoxesThatAreExactlyTheRangeInOrder) {
  std::mt19937 rng(7);
  const std::vector<std::vector<int64_t>> shapes = {{}, {1}, {17}, {4, 5}, {3, 1, 7}, {2, 3, 4, 5}, {6, 16}};
  for (const auto& shape : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    for (int trial = 0; trial < 200; ++trial) {
      int64_t a = static_cast<int64_t>(rng() % static_cast<uint32_t>(n + 1));
      int64_t b = static_cast<int64_t>(rng() % static_cast<uint32_t>(n + 1));
      if (a > b) std::swap(a, b);
      std::vector<int64_t> seen;
      const auto boxes = BoxesOfFlatRange(shape, a, b);
      EXPECT_LE(boxes.size(), 2 * shape.size() + 1);
      for (const Box& box : boxes) {
        ASSERT_EQ(box.offsets.size(), shape.size());
        const auto flat = FlatIndices(shape, box);
        ASSERT_FALSE(flat.empty());
        for (size_t i = 1; i < flat.size(); ++i) ASSERT_EQ(flat[i], flat[i - 1] + 1) << "a box is one contiguous run";
        seen.insert(seen.end(), flat.begin(), flat.end());
      }
      std::vector<int64_t> want;
      for (int64_t i = a; i < b; ++i) want.push_back(i);
      ASSERT_EQ(seen, want) << "shape rank " << shape.size() << " range [" << a << ", " << b << ")";
    }
  }
}

TEST(ShardedCheckpoint, IntersectIsTheCommonBoxOrNothing) {
  const Box a{{0, 2}, {4, 4}}, b{{3, 5}, {4, 4}}, c{{4, 0}, {1, 1}};
  const auto ab = Intersect(a, b);
  ASSERT_TRUE(ab.has_value());
  EXPECT_EQ(*ab, (Box{{3, 5}, {1, 1}}));
  EXPECT_FALSE(Intersect(a, c).has_value());
  EXPECT_FALSE(Intersect(a, Box{{0}, {4}}).has_value());
  EXPECT_TRUE(Intersect(Box{}, Box{}).has_value());  // scalars
}

std::vector<float> Iota(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = start + static_cast<float>(i);
  return v;
}

std::string_view BytesOf(const std::vector<float>& v) {
  return std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// Two ranks, each holding one half (rows) of a (4, 3) tensor, and rank 0 a scalar.
struct TwoRanks {
  std::vector<float> top = Iota(6, 0), bottom = Iota(6, 6), scalar = {42};
  std::vector<SliceRecord> Write(const std::string& dir) {
    std::vector<SliceToWrite> r0 = {{"w", {4, 3}, hf::TensorDType::kF32, Box{{0, 0}, {2, 3}}, BytesOf(top)},
                                    {"s", {}, hf::TensorDType::kF32, Box{}, BytesOf(scalar)}};
    std::vector<SliceToWrite> r1 = {{"w", {4, 3}, hf::TensorDType::kF32, Box{{2, 0}, {2, 3}}, BytesOf(bottom)}};
    auto a = WriteRankShard(dir, 0, r0, Env::Default()).ValueOrDie();
    auto b = WriteRankShard(dir, 1, r1, Env::Default()).ValueOrDie();
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
};

TEST(ShardedCheckpoint, EachRankWritesASafetensorsFileAndTheReaderVerifiesEveryPiece) {
  const std::string dir = testing::FreshDir("sharded_rank_files");
  TwoRanks ranks;
  const auto records = ranks.Write(dir);
  ASSERT_EQ(records.size(), 3u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + RankShardFileName(0)));
  EXPECT_TRUE(std::filesystem::exists(dir + "/" + RankShardFileName(1)));
  EXPECT_FALSE(std::filesystem::exists(dir + "/" + RankShardFileName(1) + ".tmp"));
  // Any safetensors reader opens a rank's file.
  auto file = hf::SafetensorsFile::Open(dir + "/" + RankShardFileName(1)).ValueOrDie();
  ASSERT_EQ(file->tensors().size(), 1u);
  EXPECT_EQ(file->tensors()[0].shape, (std::vector<int64_t>{2, 3}));
  ASSERT_TRUE(CheckSlicesTile(records, dir).ok());
  // The records survive their JSON (what ranks send rank 0).
  auto again = SliceRecordsFromJson(SliceRecordsToJson(records)).ValueOrDie();
  ASSERT_EQ(again.size(), records.size());
  EXPECT_EQ(again[2].box, records[2].box);
  EXPECT_EQ(again[2].crc_block_bytes, kPieceCrcBlockBytes);
  EXPECT_EQ(again[2].block_crc32c, records[2].block_crc32c);
  EXPECT_EQ(again[2].block_crc32c.size(), 1u) << "24 bytes: one block";
  ShardReader reader(dir);
  auto bytes = reader.Bytes(again[2]).ValueOrDie();
  EXPECT_EQ(bytes, BytesOf(ranks.bottom));
  // One flipped byte in rank 1's data: refused by its checksum.
  {
    const std::string path = dir + "/" + RankShardFileName(1);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) - 2));
    f.put('#');
  }
  ShardReader fresh(dir);
  EXPECT_EQ(fresh.Bytes(records[2]).status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(fresh.Bytes(records[0]).ok()) << "rank 0's file is intact";
}

TEST(ShardedCheckpoint, TheByteSpanOfAPartRunsFromItsFirstToItsLastElement) {
  const Box piece{{4, 0}, {8, 10}};  // rows 4..11 of a tensor 10 wide
  // Rows 5..6, every column: contiguous.
  EXPECT_EQ(ByteSpanOf(piece, Box{{5, 0}, {2, 10}}, 4), std::make_pair(int64_t{40}, int64_t{120}));
  // Columns 3..4 of every row: strided, from row 0's column 3 to row 7's column 4.
  EXPECT_EQ(ByteSpanOf(piece, Box{{4, 3}, {8, 2}}, 2), std::make_pair(int64_t{6}, int64_t{(7 * 10 + 4 + 1) * 2}));
  EXPECT_EQ(ByteSpanOf(piece, piece, 4), std::make_pair(int64_t{0}, int64_t{8 * 10 * 4}));
  EXPECT_EQ(ByteSpanOf(Box{}, Box{}, 4), std::make_pair(int64_t{0}, int64_t{4})) << "a scalar";
}

// A piece of several checksum blocks: a reader of part of it verifies the
// blocks it reads, and only those; a piece of a checkpoint written before
// block checksums (one CRC) is verified whole, whatever part is read.
TEST(ShardedCheckpoint, APartOfAPieceIsVerifiedBlockByBlock) {
  const std::string dir = testing::FreshDir("sharded_blocks");
  constexpr int64_t kRows = 8, kCols = 40000;  // 1.28 MB of fp32: 5 blocks of 256 KiB
  const std::vector<float> values = Iota(kRows * kCols, 0);
  const Box whole{{0, 0}, {kRows, kCols}};
  auto records =
      WriteRankShard(dir, 0, {{"w", {kRows, kCols}, hf::TensorDType::kF32, whole, BytesOf(values)}}, Env::Default())
          .ValueOrDie();
  ASSERT_EQ(records.size(), 1u);
  const SliceRecord& record = records[0];
  const auto bytes = static_cast<int64_t>(values.size() * sizeof(float));
  EXPECT_EQ(static_cast<int64_t>(record.block_crc32c.size()), (bytes + kPieceCrcBlockBytes - 1) / kPieceCrcBlockBytes);
  // One flipped byte in the last block.
  {
    const std::string path = dir + "/" + RankShardFileName(0);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(path) - 2));
    f.put('#');
  }
  const Box top{{0, 0}, {2, kCols}}, bottom{{kRows - 1, 0}, {1, kCols}};
  const auto [begin, end] = ByteSpanOf(whole, top, sizeof(float));
  ShardReader reader(dir);
  auto part = reader.Bytes(record, begin, end);
  ASSERT_TRUE(part.ok()) << part.status().ToString() << ": the first rows' blocks are intact";
  EXPECT_EQ(part->substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin)),
            BytesOf(values).substr(0, static_cast<size_t>(end)));
  const auto [bottom_begin, bottom_end] = ByteSpanOf(whole, bottom, sizeof(float));
  EXPECT_EQ(reader.Bytes(record, bottom_begin, bottom_end).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(ShardReader(dir).Bytes(record).status().code(), StatusCode::kCorruption) << "the whole piece";
  // Written before block checksums: one CRC of the whole piece (of the
  // bytes as written), so the flipped byte fails even a read of the top.
  SliceRecord old = record;
  old.crc_block_bytes = 0;
  old.block_crc32c.clear();
  old.crc32c = Crc32c(values.data(), values.size() * sizeof(float));
  auto old_again = SliceRecordsFromJson(SliceRecordsToJson({old})).ValueOrDie();
  ASSERT_EQ(old_again.size(), 1u);
  EXPECT_EQ(old_again[0].crc32c, old.crc32c);
  EXPECT_TRUE(old_again[0].block_crc32c.empty());
  EXPECT_EQ(ShardReader(dir).Bytes(old_again[0], begin, end).status().code(), StatusCode::kCorruption);
  // A record whose block checksums do not fit its piece is refused.
  SliceRecord short_list = record;
  short_list.block_crc32c.pop_back();
  EXPECT_EQ(SliceRecordsFromJson(SliceRecordsToJson({short_list})).status().code(), StatusCode::kCorruption);
}

TEST(ShardedCheckpoint, PiecesMustTileTheirTensorExactlyOnce) {
  const std::string dir = testing::FreshDir("sharded_tiling");
  TwoRanks ranks;
  auto records = ranks.Write(dir);
  auto gap = records;
  gap.pop_back();  // rank 1's half missing
  EXPECT_EQ(CheckSlicesTile(gap, dir).code(), StatusCode::kCorruption);
  auto overlap = records;
  overlap[2].box.offsets[0] = 1;  // rows 1..2 overlap rank 0's
  EXPECT_EQ(CheckSlicesTile(overlap, dir).code(), StatusCode::kCorruption);
  auto shape = records;
  shape[2].global_shape = {5, 3};
  EXPECT_EQ(CheckSlicesTile(shape, dir).code(), StatusCode::kCorruption);
}

TEST(ShardedCheckpoint, TheMetadataCommitsTheDirectoryAndUncommittedOnesAreRemoved) {
  const std::string root = testing::FreshDir("sharded_commit");
  auto store = CheckpointStore::Open(root, 2).ValueOrDie();
  TwoRanks ranks;
  CheckpointData data;
  data.step = 5;
  data.epoch = 0;
  data.next_step = 6;
  data.slices = ranks.Write(store->ShardedDir(5));
  data.counters["student/adamw.step"] = 6;
  data.rng_states["data"] = std::string("\0\1\2", 3);
  // Rank files alone are no checkpoint.
  EXPECT_TRUE(store->ListSteps().ValueOrDie().empty());
  EXPECT_EQ(store->Write(data).ValueOrDie(), "ckpt-0000000005");
  EXPECT_EQ(store->ListSteps().ValueOrDie(), std::vector<int64_t>{5});
  auto back = store->Read("ckpt-0000000005").ValueOrDie();
  EXPECT_TRUE(back.sharded());
  EXPECT_EQ(back.step, 5);
  EXPECT_EQ(back.next_step, 6);
  EXPECT_EQ(back.slices.size(), 3u);
  EXPECT_EQ(back.counters.at("student/adamw.step"), 6);
  EXPECT_EQ(back.rng_states.at("data"), std::string("\0\1\2", 3));
  EXPECT_EQ(back.dir, store->ShardedDir(5));
  // A torn metadata file is refused, not loaded.
  const std::string meta = store->ShardedDir(5) + "/" + kShardedCheckpointMetadata;
  std::filesystem::copy_file(meta, meta + ".orig");
  std::filesystem::resize_file(meta, std::filesystem::file_size(meta) - 3);
  EXPECT_EQ(store->Read("ckpt-0000000005").status().code(), StatusCode::kCorruption);
  std::filesystem::rename(meta + ".orig", meta);
  // A later step's files without metadata (a crash before the commit), and
  // an older committed one beyond the kept set: both removed.
  ranks.Write(store->ShardedDir(9));
  data.step = 2;
  data.slices = ranks.Write(store->ShardedDir(2));
  ASSERT_TRUE(store->Write(data).ok());
  // A commit's pruning spares what comes after it (the next checkpoint may
  // be in the writing); a resume's does not.
  ASSERT_TRUE(store->RemoveAllBut({5}, /*spare_after=*/5).ok());
  EXPECT_TRUE(std::filesystem::exists(store->ShardedDir(9)));
  EXPECT_FALSE(std::filesystem::exists(store->ShardedDir(2)));
  data.slices = ranks.Write(store->ShardedDir(2));
  ASSERT_TRUE(store->Write(data).ok());
  ASSERT_TRUE(store->RemoveAllBut({5}).ok());
  EXPECT_TRUE(std::filesystem::exists(store->ShardedDir(5)));
  EXPECT_FALSE(std::filesystem::exists(store->ShardedDir(9)));
  EXPECT_FALSE(std::filesystem::exists(store->ShardedDir(2)));
}

TEST(ShardedCheckpoint, TheRunDirectoryNamesOneHomeForThePieces) {
  EXPECT_EQ(TrainingRun::ShardedCheckpointDir("/runs/a", 42), "/runs/a/checkpoints/ckpt-0000000042");
  EXPECT_EQ(TrainingRun::CheckpointsDir("/runs/a"), "/runs/a/checkpoints");
}

}  // namespace
}  // namespace maestro::datalayer
