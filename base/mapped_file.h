// SPDX-License-Identifier: Apache-2.0
// A read-only mapping of a whole regular file, shared with every process that
// maps it (the page cache: no copy, and only the pages read are touched). The
// one home of mmap for inputs read in place: Megatron corpora, idx files.
//
// Owns: MappedFile. May call: POSIX, fmt. Thread safety: a MappedFile is
// immutable once opened; reading it from several threads is safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"

namespace maestro {

class MappedFile {
 public:
  // Maps `path`. NotFound when it does not exist, InvalidArgument when it is
  // not a regular file (a directory, a FIFO), IOError otherwise; each message
  // starts with the path. An empty file maps to nothing (data() is null).
  static StatusOr<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace maestro
