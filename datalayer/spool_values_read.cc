// SPDX-License-Identifier: Apache-2.0
#include "datalayer/spool_values_read.h"

#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "datalayer/crc32c.h"

// H5Dget_chunk_info_by_coord arrived in HDF5 1.10.5.
#if !H5_VERSION_GE(1, 10, 5)
#error "the activation spool needs HDF5 1.10.5 or newer (H5Dget_chunk_info_by_coord); docs/datalayer.md"
#endif

namespace maestro::datalayer {

DirectValues DirectValuesOf(int64_t file, int64_t values, int64_t memory_type) {
  DirectValues out;
  if (file < 0 || values < 0) return out;  // a closed file: H5Dread says why
  const hid_t stored = H5Dget_type(values);
  const bool native = stored >= 0 && H5Tequal(stored, memory_type) > 0;
  if (stored >= 0) H5Tclose(stored);
  const hid_t dcpl = native ? H5Dget_create_plist(values) : H5I_INVALID_HID;
  if (dcpl < 0) return out;
  hsize_t chunk[1] = {0};
  const bool chunked = H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, 1, chunk) == 1 &&
                       H5Pget_nfilters(dcpl) == 0 && chunk[0] > 0;
  H5Pclose(dcpl);
  const hid_t fapl = chunked ? H5Fget_access_plist(file) : H5I_INVALID_HID;
  if (fapl < 0) return out;
  const bool sec2 = H5Pget_driver(fapl) == H5FD_SEC2;
  H5Pclose(fapl);
  void* handle = nullptr;
  if (!sec2 || H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || handle == nullptr) return out;
  out.fd = *static_cast<int*>(handle);
  out.chunk_values = chunk[0];
  return out;
}

namespace {

// The byte address of chunk `index` of `values`, from the cache or HDF5;
// nullopt when HDF5 cannot place it (not allocated, filtered).
std::optional<uint64_t> ChunkAddress(DirectValues& direct, hid_t values, uint64_t index) {
  if (auto it = direct.chunk_address.find(index); it != direct.chunk_address.end()) return it->second;
  const hsize_t start[1] = {index * direct.chunk_values};
  unsigned filter_mask = 0;
  haddr_t address = HADDR_UNDEF;
  hsize_t stored = 0;
  if (H5Dget_chunk_info_by_coord(values, start, &filter_mask, &address, &stored) < 0 || address == HADDR_UNDEF ||
      filter_mask != 0) {
    return std::nullopt;
  }
  direct.chunk_address.emplace(index, address);
  return address;
}

// pread of n bytes at `from` into `into`, zeroing what a short read leaves.
void ReadFully(int fd, std::byte* into, size_t n, off_t from) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, into + got, n - got, from + static_cast<off_t>(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  if (got < n) std::memset(into + got, 0, n - got);
}

}  // namespace

std::optional<uint32_t> ReadValuesDirect(DirectValues& direct, int64_t values, int64_t offset, int64_t count,
                                         size_t element_bytes, std::byte* out) {
  if (direct.fd < 0 || offset < 0 || count < 0 || element_bytes == 0) return std::nullopt;
  const uint64_t chunk = direct.chunk_values;
  const uint64_t piece_values = std::max<uint64_t>(1, kDirectReadPieceBytes / element_bytes);
  uint32_t crc = 0;
  auto at = static_cast<uint64_t>(offset);
  const auto end = static_cast<uint64_t>(offset + count);
  std::byte* into = out;
  while (at < end) {
    const uint64_t index = at / chunk;
    const std::optional<uint64_t> address = ChunkAddress(direct, values, index);
    if (!address) return std::nullopt;
    const uint64_t chunk_end = std::min(end, (index + 1) * chunk);
    while (at < chunk_end) {
      const size_t n = static_cast<size_t>(std::min(piece_values, chunk_end - at) * element_bytes);
      ReadFully(direct.fd, into, n, static_cast<off_t>(*address + (at - index * chunk) * element_bytes));
      crc = Crc32c(into, n, crc);
      into += n;
      at += n / element_bytes;
    }
  }
  return crc;
}

}  // namespace maestro::datalayer
