// SPDX-License-Identifier: Apache-2.0
#include "datasets/idx_file.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include "base/checks.h"

namespace maestro::datasets {

namespace {
struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
}  // namespace

StatusOr<std::string> ReadMaybeGzipFile(const std::string& path, const std::string& package_hint) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      return Status::NotFound(fmt::format("{}: no such file ({})", path, package_hint));
    }
    return Status::IOError(fmt::format("{}: cannot stat: {}", path, std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(fmt::format("{}: not a regular file", path));
  std::unique_ptr<gzFile_s, GzCloser> file(gzopen(path.c_str(), "rb"));
  if (!file) {
    return Status::IOError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  gzbuffer(file.get(), 1 << 20);
  std::string out;
  // Reserve for the common case (a compression ratio of ~2x for the images).
  out.reserve(static_cast<size_t>(st.st_size) * 2 + 4096);
  constexpr unsigned kChunk = 1u << 20;
  for (;;) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    const int n = gzread(file.get(), &out[old], kChunk);
    if (n < 0) {
      int zerr = 0;
      const char* msg = gzerror(file.get(), &zerr);
      return Status::Corruption(
          fmt::format("{}: gzip read failed: {} (the file is damaged; reinstall it: {})", path, msg, package_hint));
    }
    out.resize(old + static_cast<size_t>(n));
    if (n == 0) break;
  }
  // A truncated gzip stream is not a read error for gzread: it returns what
  // it could decompress and leaves Z_BUF_ERROR for gzerror.
  int zerr = Z_OK;
  const char* msg = gzerror(file.get(), &zerr);
  if (zerr != Z_OK) {
    return Status::Corruption(
        fmt::format("{}: gzip stream incomplete: {} (the file is damaged; reinstall it: {})", path, msg, package_hint));
  }
  return out;
}

namespace {

struct IdxHeader {
  std::vector<int64_t> dims;
  size_t header_bytes = 0;
};

// The dims of idx bytes p[0, size), checked against their count.
StatusOr<IdxHeader> ParseIdxHeader(const unsigned char* p, size_t size, int expected_rank, const std::string& what) {
  if (size < 4) return Status::Corruption(fmt::format("{}: idx file too short ({} bytes)", what, size));
  if (p[0] != 0 || p[1] != 0 || p[2] != 0x08) {
    return Status::Corruption(fmt::format("{}: not an idx file of unsigned bytes (magic {:02x} {:02x} {:02x} {:02x})",
                                          what, p[0], p[1], p[2], p[3]));
  }
  const int rank = p[3];
  if (rank != expected_rank) {
    return Status::Corruption(fmt::format("{}: idx file has {} dims, expected {}", what, rank, expected_rank));
  }
  IdxHeader out;
  out.header_bytes = 4 + 4 * static_cast<size_t>(rank);
  if (size < out.header_bytes) return Status::Corruption(fmt::format("{}: idx header truncated", what));
  uint64_t count = 1;
  for (int d = 0; d < rank; ++d) {
    const unsigned char* q = p + 4 + 4 * d;
    const uint32_t dim = (uint32_t{q[0]} << 24) | (uint32_t{q[1]} << 16) | (uint32_t{q[2]} << 8) | uint32_t{q[3]};
    out.dims.push_back(dim);
    count *= dim;
    if (count > (uint64_t{1} << 40)) return Status::Corruption(fmt::format("{}: idx dims too large", what));
  }
  if (size - out.header_bytes != count) {
    return Status::Corruption(fmt::format("{}: idx data has {} bytes, the dims say {} (truncated or damaged file)",
                                          what, size - out.header_bytes, count));
  }
  return out;
}

}  // namespace

StatusOr<IdxArray> ParseIdx(const std::string& bytes, int expected_rank, const std::string& what) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  MAESTRO_ASSIGN_OR_RETURN(IdxHeader header, ParseIdxHeader(p, bytes.size(), expected_rank, what));
  IdxArray out;
  out.dims = std::move(header.dims);
  out.data.assign(p + header.header_bytes, p + bytes.size());
  return out;
}

StatusOr<IdxFile> IdxFile::Open(const std::string& path, int expected_rank, const std::string& package_hint) {
  StatusOr<MappedFile> mapped = MappedFile::Open(path);
  if (!mapped.ok()) {
    if (mapped.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(fmt::format("{}: no such file ({})", path, package_hint));
    }
    return mapped.status();
  }
  IdxFile file;
  file.mapped_ = std::move(mapped).value();
  const uint8_t* bytes = file.mapped_.data();
  size_t size = file.mapped_.size();
  constexpr uint8_t kGzipMagic[2] = {0x1f, 0x8b};
  if (size >= 2 && bytes[0] == kGzipMagic[0] && bytes[1] == kGzipMagic[1]) {
    file.mapped_ = MappedFile();
    MAESTRO_ASSIGN_OR_RETURN(file.inflated_, ReadMaybeGzipFile(path, package_hint));
    bytes = reinterpret_cast<const uint8_t*>(file.inflated_.data());
    size = file.inflated_.size();
  }
  MAESTRO_ASSIGN_OR_RETURN(IdxHeader header, ParseIdxHeader(bytes, size, expected_rank, path));
  file.dims_ = std::move(header.dims);
  file.header_ = header.header_bytes;
  file.size_ = size - header.header_bytes;
  return file;
}

const uint8_t* IdxFile::data() const {
  const uint8_t* base = mapped_.data() != nullptr ? mapped_.data() : reinterpret_cast<const uint8_t*>(inflated_.data());
  return base + header_;
}

}  // namespace maestro::datasets
