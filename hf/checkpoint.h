// SPDX-License-Identifier: Apache-2.0
// A Hugging Face checkpoint directory: config.json beside one
// model.safetensors, or beside shards model-0000i-of-0000n.safetensors named
// by model.safetensors.index.json ({"metadata": {...}, "weight_map":
// {"<tensor>": "<shard file>"}}). Reading maps every file (no tensor is read
// until asked for); writing produces a whole directory atomically.
//
// Owns: HfCheckpoint (open, look up a tensor across shards),
// CheckCheckpointMatches (a directory against a model's name table, without
// reading any tensor data), WriteHfCheckpoint.
// May call: hf/safetensors, hf/name_map, base, nlohmann-json.
// Thread safety: an HfCheckpoint is immutable after Open().
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "hf/name_map.h"
#include "hf/safetensors.h"

namespace maestro::hf {

inline constexpr const char* kSingleFileName = "model.safetensors";
inline constexpr const char* kIndexFileName = "model.safetensors.index.json";
inline constexpr const char* kConfigFileName = "config.json";

class HfCheckpoint {
 public:
  // Opens `dir`. NotFound names the directory and what is missing (config.json,
  // or both model.safetensors and the index); Corruption names the file when
  // the index and the shards disagree (a tensor the index maps to a shard that
  // lacks it, a shard tensor the index does not name, a name in two shards).
  static StatusOr<std::unique_ptr<HfCheckpoint>> Open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const std::string& config_json() const { return config_json_; }  // config.json's text
  // Every tensor name, sorted.
  std::vector<std::string> TensorNames() const;
  struct Located {
    const SafetensorsFile* file = nullptr;
    const TensorInfo* info = nullptr;
  };
  // NotFound naming the tensor and the directory when it has none of that name.
  StatusOr<Located> Find(std::string_view name) const;
  TensorView View(const Located& t) const { return t.file->View(*t.info); }

 private:
  std::string dir_;
  std::string config_json_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located, std::less<>> tensors_;
};

// Whether `ckpt` holds exactly the tensors of `names` (a model's table,
// hf::ExpandWeightNames): every tensor present with its full shape and a
// floating-point dtype (BF16, F16, F32, F64), and no tensor under the model's
// own prefixes that the table does not name (tensors of other towers are
// passed over). Only the headers are read. Errors name the tensors, the file
// and both shapes, at most 8 per list; `desc_source` names the model's config.
//   NotFound         tensors the model needs are missing;
//   InvalidArgument  unexpected tensors, a wrong shape, a non-float dtype.
Status CheckCheckpointMatches(const HfCheckpoint& ckpt, const WeightNames& names, const std::string& desc_source);

// Writes a checkpoint directory one tensor at a time, so that an export of
// a model larger than memory holds one tensor (its caller's) and nothing
// else: the tensors' specs are known first (they fix the shards and every
// header), then each tensor's bytes are given in that order and go straight
// to their shard's file. The layout, the shard rule and the atomicity are
// WriteHfCheckpoint's (below). Usage: Start, Append x N, Finish; a writer
// destroyed before Finish removes its partial directory.
class HfCheckpointWriter {
 public:
  static StatusOr<std::unique_ptr<HfCheckpointWriter>> Start(
      const std::string& dir, std::string_view config_json, const std::vector<TensorSpec>& tensors,
      uint64_t max_shard_bytes = 5ull << 30, const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
  ~HfCheckpointWriter();
  HfCheckpointWriter(const HfCheckpointWriter&) = delete;
  HfCheckpointWriter& operator=(const HfCheckpointWriter&) = delete;

  // The next tensor's bytes (its spec's name and size; InvalidArgument
  // naming it otherwise, or when every tensor has been given).
  Status Append(std::string_view name, std::string_view bytes);
  // Every tensor given: closes the last shard, writes the index, fsyncs and
  // renames the directory into place.
  Status Finish();
  // The shard files, in order (their names in `dir`).
  const std::vector<std::string>& files() const { return file_names_; }

 private:
  HfCheckpointWriter() = default;
  Status OpenShard(size_t shard);
  Status CloseShard();
  std::string dir_, partial_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorSpec> tensors_;
  std::vector<uint64_t> bytes_;   // per tensor
  std::vector<size_t> shard_of_;  // per tensor
  std::vector<std::string> file_names_;
  size_t next_ = 0;  // the next tensor to append
  int fd_ = -1;      // the open shard's file
  size_t open_shard_ = 0;
  bool finished_ = false;
};

// Writes `dir` as a checkpoint: config.json, and the tensors in order into
// shards of at most `max_shard_bytes` each (a tensor larger than that gets a
// shard of its own); one shard is model.safetensors, more are
// model-0000i-of-0000n.safetensors with the index (metadata.total_size = the
// tensors' bytes). Atomic: everything goes to a fresh "<dir>.partial-<pid>"
// directory first, each file fsync'ed, then the directory is renamed to
// `dir`; an interrupted write never leaves a `dir` that looks complete.
// FailedPrecondition when `dir` already exists (the caller decides to remove it).
Status WriteHfCheckpoint(const std::string& dir, std::string_view config_json,
                         const std::vector<TensorToWrite>& tensors, uint64_t max_shard_bytes = 5ull << 30,
                         const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace maestro::hf
