// SPDX-License-Identifier: Apache-2.0
// The safetensors format (Hugging Face's weight files), read through a
// read-only memory map and written atomically. Torch-free: the runtime turns
// a TensorView into a torch tensor (and each TP rank copies only its slice
// of the mapped bytes).
//
// The format (github.com/huggingface/safetensors, README "Format" and the
// reference reader's validation):
//   8 bytes    N, little-endian u64: the header's size
//   N bytes    a UTF-8 JSON object: {"__metadata__": {str: str} (optional),
//              "<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...};
//              it starts with '{' and may be padded with trailing spaces
//   the rest   the byte buffer; [b, e) are offsets into it, little-endian, C order
// Checked on open, each a Corruption naming the file and the fix:
//   N within [2, 100,000,000] (the reference reader's limit) and inside the file;
//   the header is a JSON object of objects with exactly those keys; no name twice;
//   a known dtype; dimensions >= 0; e - b == elements x dtype size (no overflow);
//   the tensors, sorted by offset, tile the buffer exactly: the first begins at 0,
//   each begins where the previous ends, and the last ends at the file's end
//   (no hole, no overlap, no trailing bytes: no polyglot files).
//
// Owns: SafetensorsFile (open + validate + views), ParseSafetensorsHeader
// (the same checks on bytes in memory; the fuzz target's entry),
// WriteSafetensors (what `maestro export` and the test fixtures write).
// May call: base, nlohmann-json, POSIX (mmap).
// Thread safety: a SafetensorsFile is immutable after Open(); its views may
// be read from many threads while it lives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace maestro::hf {

// Every dtype the format defines.
enum class TensorDType {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64
};

const char* TensorDTypeName(TensorDType dtype);  // the format's spelling: "BF16", "F8_E4M3", ...
size_t TensorDTypeSize(TensorDType dtype);       // bytes per element
// "BF16" -> kBF16; anything else is InvalidArgument listing the names.
StatusOr<TensorDType> TensorDTypeFromName(std::string_view name);

struct TensorInfo {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;  // [] is a scalar
  uint64_t begin = 0;          // offsets into the byte buffer
  uint64_t end = 0;
  int64_t elements() const;
  std::string ShapeText() const;  // "[4096, 1024]"
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by offset
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + N: where the byte buffer begins in the file
};

// Parses and checks the header of a whole file's bytes (see the top).
// `file_name` names the file in errors.
StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file_bytes, const std::string& file_name);

// A tensor's bytes inside a mapped file.
struct TensorView {
  const TensorInfo* info = nullptr;
  const std::byte* data = nullptr;  // info->end - info->begin bytes, little-endian, C order
  size_t bytes = 0;
};

class SafetensorsFile {
 public:
  // Maps `path` read-only and checks it. NotFound for a missing file;
  // Corruption (naming the file) for anything the checks refuse.
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // nullptr when the file has no tensor of that name.
  const TensorInfo* Find(std::string_view name) const;
  TensorView View(const TensorInfo& info) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> by_name_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
};

// What a header declares of one tensor: its name, dtype and shape.
struct TensorSpec {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
  // Elements x dtype size; InvalidArgument for a negative dim or an overflow.
  StatusOr<uint64_t> Bytes() const;
};

// One tensor to write: `bytes` must hold elements x dtype size bytes.
struct TensorToWrite {
  std::string name;
  TensorDType dtype = TensorDType::kF32;
  std::vector<int64_t> shape;
  std::string_view bytes;
};

// Writes a safetensors file atomically (tmp + fsync + rename): tensors in the
// given order, back to back; the header padded with spaces to a multiple of
// 8 bytes (as Hugging Face's writer does, so the buffer stays aligned).
// InvalidArgument for a name given twice, "__metadata__" as a name, or bytes
// that do not match the shape.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata = {});
// The bytes a safetensors file of `tensors` begins with (the 8-byte size and
// the padded header; the tensors' bytes follow, in order), with the checks
// above (`path` names the file in errors): for writers that write the file
// their own way (datalayer's sharded checkpoints go through its Env).
StatusOr<std::string> EncodeSafetensorsHead(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                            const std::map<std::string, std::string>& metadata = {});
// The same head from the tensors' specs alone, for a writer that streams
// their bytes afterwards, in this order (hf::HfCheckpointWriter).
StatusOr<std::string> EncodeSafetensorsHead(const std::string& path, const std::vector<TensorSpec>& tensors,
                                            const std::map<std::string, std::string>& metadata = {});

}  // namespace maestro::hf
