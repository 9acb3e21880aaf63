// SPDX-License-Identifier: Apache-2.0
// Reading gzip files (zlib) and parsing the idx format of (Fashion-)MNIST:
//   magic: 0x00 0x00 <type=0x08 unsigned byte> <number of dims>
//   then one big-endian uint32 per dim, then the data (row-major uint8).
// May call: zlib, base/mapped_file.h. Thread safety: pure functions; an
// IdxFile is immutable once opened.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"

namespace maestro::datasets {

// The whole decompressed content of `path` (a gzip file; a plain file is read
// as is). NotFound names the file and `package_hint` (e.g. "install the Debian
// package dataset-fashion-mnist") when the file does not exist.
StatusOr<std::string> ReadMaybeGzipFile(const std::string& path, const std::string& package_hint);

// An idx array of unsigned bytes: dims (e.g. {60000, 28, 28}) and the data.
struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // product(dims) bytes, row-major
};

// Parses idx bytes; `expected_rank` dims are required (1 for labels, 3 for
// images). `what` names the source in errors (a file path). Corruption on a
// bad magic, a wrong rank or a size that does not match the dims.
StatusOr<IdxArray> ParseIdx(const std::string& bytes, int expected_rank, const std::string& what);

// An idx file of unsigned bytes read in place: a plain file is mapped (shared
// with every rank that maps it, and only the pages of the samples read are
// touched), a gzip file is inflated into memory. The checks are ParseIdx's.
class IdxFile {
 public:
  // NotFound names `path` and `package_hint` when it does not exist.
  static StatusOr<IdxFile> Open(const std::string& path, int expected_rank, const std::string& package_hint);

  const std::vector<int64_t>& dims() const { return dims_; }
  // product(dims) bytes, row-major.
  const uint8_t* data() const;
  size_t size() const { return size_; }

 private:
  MappedFile mapped_;     // a plain file
  std::string inflated_;  // a gzip file's content
  size_t header_ = 0;     // bytes before the data
  size_t size_ = 0;
  std::vector<int64_t> dims_;
};

}  // namespace maestro::datasets
