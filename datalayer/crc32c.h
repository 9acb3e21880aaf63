// SPDX-License-Identifier: Apache-2.0
// CRC-32C (Castagnoli), the checksum of spool rows and checkpoint blobs.
// Computed by Intel's ISA-L (libisal), which picks the CPU's fastest kernel
// at run time (PCLMUL / AVX-512 folding on x86, a table elsewhere).
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace maestro::datalayer {
// Extends `crc` (0 to start) over n bytes at data: Crc32c(b, m, Crc32c(a, k))
// equals the CRC-32C of a's k bytes followed by b's m.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
}  // namespace maestro::datalayer
