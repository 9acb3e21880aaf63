// SPDX-License-Identifier: Apache-2.0
// Sharded checkpoints (format 2, docs/datalayer.md "Sharded checkpoints"):
// every rank writes the pieces of the global tensors it owns into a file of
// its own, and one metadata file, written last, makes the directory a
// checkpoint. Nothing is gathered on one rank, and a checkpoint loads into
// any parallel layout: a reader asks for the box of a global tensor it owns
// and gets the overlapping parts of the pieces (Intersect).
//
//   checkpoints/ckpt-<step>/rank-<r>.safetensors   rank r's pieces (safetensors:
//                                                  any tool opens a shard)
//   checkpoints/ckpt-<step>/metadata.json          the global tensors and
//                                                  their pieces; last, renamed
//                                                  into place (the commit)
//
// A global tensor is named by the runtime ("<component>/model/<parameter>",
// ".../adamw.exp_avg/...": opaque here) and has a global shape and a dtype.
// A piece (SliceRecord) is a box of it: offsets and lengths per dimension,
// stored as one C-order tensor in a rank file, with its CRC-32C. The pieces
// of a tensor tile it exactly once (the runtime writes each replicated
// tensor from one owner); the metadata reader checks they cover it.
//
// Owns: the box arithmetic, a rank's shard file (WriteRankShard, through
// Env: its durable operations are the crash-point tests' seam), the records'
// JSON (what ranks send rank 0), the metadata file's encoding. The commit
// order lives in TrainingRun / CheckpointStore.
// May call: base, hf (safetensors), Env, crc32c, nlohmann-json.
// Thread safety: functions are reentrant; a ShardReader is one thread's.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "datalayer/env.h"
#include "hf/safetensors.h"

namespace maestro::datalayer {

inline constexpr int kShardedCheckpointFormatVersion = 2;
inline constexpr char kShardedCheckpointMetadata[] = "metadata.json";
// A piece is checksummed in blocks of this many bytes (the last one
// shorter): a reader verifies only the blocks it reads, so a load into
// another layout, which reads part of a piece, checks what it reads and no
// more. 256 KiB keeps the metadata small (a 112 GB state: ~430k checksums,
// ~5 MB of JSON) and a part of a piece within a block or two of its bytes.
inline constexpr int64_t kPieceCrcBlockBytes = int64_t{256} << 10;

// A box of a tensor: [offsets[d], offsets[d] + lengths[d]) in every
// dimension d (none for a scalar).
struct Box {
  std::vector<int64_t> offsets;
  std::vector<int64_t> lengths;
  int64_t elements() const;
  bool operator==(const Box& other) const { return offsets == other.offsets && lengths == other.lengths; }
};
// The common part of two boxes of one tensor; nullopt when they do not meet
// (or differ in rank).
std::optional<Box> Intersect(const Box& a, const Box& b);
// The boxes whose C-order elements are exactly [begin, end) of a tensor of
// `shape`, in order, each a contiguous run of that order (at most 2 per
// dimension + 1): how a flat range (a ZeRO-1 shard) becomes pieces.
std::vector<Box> BoxesOfFlatRange(const std::vector<int64_t>& shape, int64_t begin, int64_t end);

// One piece a rank writes: `bytes` holds box.elements() values of `dtype`,
// C order, little-endian.
struct SliceToWrite {
  std::string tensor;
  std::vector<int64_t> global_shape;
  hf::TensorDType dtype = hf::TensorDType::kF32;
  Box box;
  std::string_view bytes;
};

// One piece as the metadata records it.
struct SliceRecord {
  std::string tensor;
  std::vector<int64_t> global_shape;
  hf::TensorDType dtype = hf::TensorDType::kF32;
  Box box;
  std::string file;  // relative to the checkpoint directory
  std::string key;   // the tensor's name in that safetensors file
  // The CRC-32C of each crc_block_bytes block of the piece's bytes (the
  // last one shorter). A checkpoint written before block checksums has
  // none (crc_block_bytes 0): crc32c covers the whole piece.
  int64_t crc_block_bytes = 0;
  std::vector<uint32_t> block_crc32c;
  uint32_t crc32c = 0;
};

// The bytes of a piece's C-order data (box `piece`, elements of
// `element_size` bytes) between the first and the last element of `part`
// (a box inside it): [first, second). What a reader of `part` touches.
std::pair<int64_t, int64_t> ByteSpanOf(const Box& piece, const Box& part, int64_t element_size);

std::string ShardedCheckpointDirName(int64_t step);  // "ckpt-0000000042"
std::string RankShardFileName(int rank);             // "rank-00003.safetensors"

// Writes `slices` as <dir>/RankShardFileName(rank) (dir created if missing;
// tmp, fsync, rename, fsync of dir: each through `env`) and returns their
// records. No file and no record for an empty `slices`. InvalidArgument for
// a box outside its global shape or bytes of the wrong size.
StatusOr<std::vector<SliceRecord>> WriteRankShard(const std::string& dir, int rank,
                                                  const std::vector<SliceToWrite>& slices, Env* env);

// The records as JSON text and back (what a rank sends rank 0).
std::string SliceRecordsToJson(const std::vector<SliceRecord>& records);
StatusOr<std::vector<SliceRecord>> SliceRecordsFromJson(std::string_view text);

// Checks that the records of each global tensor agree on its shape and
// dtype, stay inside it and tile it exactly once (no gap, no overlap):
// Corruption naming the tensor otherwise. `where` names the checkpoint.
Status CheckSlicesTile(const std::vector<SliceRecord>& records, const std::string& where);

class ShardReader;
// The whole global tensor that `pieces` (every piece of one tensor, tiling
// it: CheckSlicesTile) make, as C-order bytes: one tensor in memory at a time
// (what the tests' comparisons and an export stream read).
StatusOr<std::string> ReadWholeTensor(ShardReader& reader, const std::vector<const SliceRecord*>& pieces);

// Reads pieces' bytes from a checkpoint directory's rank files (memory-
// mapped, each opened once), verifying the CRC-32C of each block read the
// first time it is read: Corruption naming the file otherwise.
class ShardReader {
 public:
  explicit ShardReader(std::string dir) : dir_(std::move(dir)) {}
  // The piece's bytes, every block of them verified.
  StatusOr<std::string_view> Bytes(const SliceRecord& record);
  // The piece's bytes, the blocks holding [begin, end) of them verified (a
  // piece with one checksum: all of it). What a reader of part of the piece
  // asks for (ByteSpanOf); it reads nothing outside [begin, end).
  StatusOr<std::string_view> Bytes(const SliceRecord& record, int64_t begin, int64_t end);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::map<std::string, std::unique_ptr<hf::SafetensorsFile>> files_;
  std::map<std::string, std::vector<bool>> verified_;  // file + "/" + key -> its blocks
};

}  // namespace maestro::datalayer
