// SPDX-License-Identifier: Apache-2.0
#include "datalayer/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace maestro::datalayer {
namespace {

std::array<std::array<uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
  return t;
}

uint32_t Crc32cTable(const unsigned char* p, size_t n, uint32_t crc) {
  static const auto t = MakeTables();
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    v ^= crc;
    crc = t[7][v & 0xFF] ^ t[6][(v >> 8) & 0xFF] ^ t[5][(v >> 16) & 0xFF] ^ t[4][(v >> 24) & 0xFF] ^
          t[3][(v >> 32) & 0xFF] ^ t[2][(v >> 40) & 0xFF] ^ t[1][(v >> 48) & 0xFF] ^ t[0][v >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFF];
  return crc;
}

// GF(2) polynomial arithmetic modulo the (reflected) CRC-32C polynomial, as
// in zlib's crc32_combine: used to join CRCs of three lanes computed in
// parallel.
constexpr uint32_t kPoly = 0x82F63B78u;

uint32_t MultModP(uint32_t a, uint32_t b) {
  uint32_t m = 1u << 31, p = 0;
  for (;;) {
    if (a & m) {
      p ^= b;
      if ((a & (m - 1)) == 0) break;
    }
    m >>= 1;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
  }
  return p;
}

// x^(8 * n) mod P: the operator that shifts a CRC register over n zero bytes.
uint32_t ShiftBytesOperator(uint64_t n) {
  uint32_t x2n[64];
  uint32_t p = 1u << 30;  // x^1
  x2n[0] = p;
  for (int k = 1; k < 64; ++k) x2n[k] = p = MultModP(p, p);
  uint32_t result = 1u << 31;  // x^0
  unsigned k = 3;              // 8 * n = n * 2^3
  while (n != 0) {
    if (n & 1) result = MultModP(x2n[k & 63], result);
    n >>= 1;
    ++k;
  }
  return result;
}

#if defined(__x86_64__)
constexpr size_t kLane = 4096;  // bytes per lane per round

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(const unsigned char* p, size_t n, uint32_t crc) {
  uint64_t c = crc;
  if (n >= 3 * kLane) {
    // Three independent dependency chains hide the crc32 instruction's
    // latency (3 cycles, throughput 1): ~3x faster on long rows.
    static const uint32_t shift1 = ShiftBytesOperator(kLane);
    static const uint32_t shift2 = ShiftBytesOperator(2 * kLane);
    while (n >= 3 * kLane) {
      uint64_t a = c, b = 0, d = 0;
      for (size_t i = 0; i < kLane; i += 8) {
        uint64_t va, vb, vd;
        std::memcpy(&va, p + i, 8);
        std::memcpy(&vb, p + kLane + i, 8);
        std::memcpy(&vd, p + 2 * kLane + i, 8);
        a = _mm_crc32_u64(a, va);
        b = _mm_crc32_u64(b, vb);
        d = _mm_crc32_u64(d, vd);
      }
      c = MultModP(shift2, static_cast<uint32_t>(a)) ^ MultModP(shift1, static_cast<uint32_t>(b)) ^
          static_cast<uint32_t>(d);
      p += 3 * kLane;
      n -= 3 * kLane;
    }
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}
bool HaveSse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t Crc32c(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  if (HaveSse42()) return ~Crc32cHardware(p, n, crc);
#endif
  return ~Crc32cTable(p, n, crc);
}

}  // namespace maestro::datalayer
