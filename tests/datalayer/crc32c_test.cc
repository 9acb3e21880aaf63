// SPDX-License-Identifier: Apache-2.0
#include "datalayer/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace maestro::datalayer {
namespace {

// Bitwise CRC-32C, the definition.
uint32_t Reference(const unsigned char* p, size_t n) {
  uint32_t crc = ~0u;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : crc >> 1;
  }
  return ~crc;
}

TEST(Crc32c, KnownVector) {
  const std::string s = "123456789";
  EXPECT_EQ(Crc32c(s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(Crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, MatchesTheDefinitionAtEveryLengthAndWhenExtended) {
  std::mt19937 rng(5);
  std::vector<unsigned char> buf(3 * 3 * 4096 + 77);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{63}, size_t{64}, size_t{255}, size_t{256},
                   size_t{257}, size_t{1023}, size_t{4095}, size_t{3 * 4096 - 1}, size_t{3 * 4096},
                   size_t{3 * 4096 + 9}, size_t{2 * 3 * 4096}, buf.size()}) {
    EXPECT_EQ(Crc32c(buf.data(), n), Reference(buf.data(), n)) << n;
    // Extending a CRC over a split equals the CRC of the whole.
    const size_t cut = n / 3;
    EXPECT_EQ(Crc32c(buf.data() + cut, n - cut, Crc32c(buf.data(), cut)), Reference(buf.data(), n)) << n;
  }
}

}  // namespace
}  // namespace maestro::datalayer
