// SPDX-License-Identifier: Apache-2.0
#include "datalayer/crc32c.h"

#include <isa-l/crc.h>

#include <algorithm>

namespace maestro::datalayer {

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  // ISA-L's crc32_iscsi takes the register as it stands (no pre- or
  // post-inversion) and an int length: invert around it, and feed it at
  // most 1 GiB at a time.
  constexpr size_t kMaxPiece = size_t{1} << 30;
  auto* p = const_cast<unsigned char*>(static_cast<const unsigned char*>(data));  // ISA-L only reads it
  uint32_t reg = ~crc;
  while (n > 0) {
    const size_t piece = std::min(n, kMaxPiece);
    reg = crc32_iscsi(p, static_cast<int>(piece), reg);
    p += piece;
    n -= piece;
  }
  return ~reg;
}

}  // namespace maestro::datalayer
