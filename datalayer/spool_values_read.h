// SPDX-License-Identifier: Apache-2.0
// Owns: reading a run of a spool file's /values straight from the file, in
// pieces, each checked as it arrives (ActivationSpool::GetInto's path).
// May call: HDF5 (the chunks' places, the file's descriptor), POSIX pread,
// datalayer/crc32c.h.
//
// Why not H5Dread: a row is checked piece by piece while each piece is still
// in the core's L2 cache (a 3 MiB top-128 row read whole is checked from
// memory: 0.77 of fread), and HDF5 costs a few microseconds a call, so pieces
// through H5Dread lose what they win (256 KiB pieces: 0.73-0.76). HDF5 still
// says where each chunk is (H5Dget_chunk_info_by_coord, once a chunk: an
// unfiltered chunk never moves while its file is open); /values is
// unfiltered, so a chunk's bytes are the values themselves.
#ifndef MAESTRO_DATALAYER_SPOOL_VALUES_READ_H_
#define MAESTRO_DATALAYER_SPOOL_VALUES_READ_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>

namespace maestro::datalayer {

// Bytes of a piece: an eighth of a core's 2 MiB L2.
constexpr size_t kDirectReadPieceBytes = size_t{256} << 10;

// What direct reads of one open spool file need: its descriptor and its
// /values chunk length, and the chunks' places as they are looked up.
struct DirectValues {
  int fd = -1;                // -1: no direct reads (another file driver, a filtered or unchunked /values)
  uint64_t chunk_values = 0;  // /values' chunk, in values
  std::unordered_map<uint64_t, uint64_t> chunk_address;  // chunk index -> byte address in the file
};

// The direct-read state of the open file `file` and its /values `values`
// (hid_t each) read as `memory_type` (a hid_t: the native type the caller
// reads into): fd -1 unless the file is under the sec2 driver and /values is
// 1-D, chunked, unfiltered and stored as `memory_type` itself (so its bytes
// need no conversion: a file of another byte order goes through H5Dread).
DirectValues DirectValuesOf(int64_t file, int64_t values, int64_t memory_type);

// Reads values [offset, offset + count) of /values (`values`, a hid_t) into
// `out` (count * element_bytes bytes) and returns the CRC-32C of those bytes;
// nullopt when the direct path cannot serve it (direct.fd < 0, a chunk HDF5
// cannot place): the caller reads through H5Dread. A short read (a torn
// file) zeroes what it did not read, and the caller's check rejects the row.
std::optional<uint32_t> ReadValuesDirect(DirectValues& direct, int64_t values, int64_t offset, int64_t count,
                                         size_t element_bytes, std::byte* out);

}  // namespace maestro::datalayer

#endif  // MAESTRO_DATALAYER_SPOOL_VALUES_READ_H_
