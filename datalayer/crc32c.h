// SPDX-License-Identifier: Apache-2.0
// CRC-32C (Castagnoli), the checksum of spool rows and checkpoint blobs.
// Uses the SSE4.2 crc32 instruction when the CPU has it, else a table.
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace maestro::datalayer {
// Extends `crc` (0 to start) over n bytes at data.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
}  // namespace maestro::datalayer
