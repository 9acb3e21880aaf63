// SPDX-License-Identifier: Apache-2.0
// base/splitmix.h against values computed outside it: SplitMix64's first
// output from state 0 (the reference generator of Steele, Lea and Flood;
// 0xE220A8397B1DCDAF) and HashBytes as a python3 loop of the stated
// xor-multiply gives it.
#include "base/splitmix.h"

#include <gtest/gtest.h>

namespace maestro {
namespace {

TEST(SplitMix, TheStreamFromZeroStartsAtTheReferenceValue) {
  uint64_t state = 0;
  EXPECT_EQ(SplitMix64Next(state), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(state, kSplitMixGamma);
}

TEST(HashBytes, EqualsTheXorMultiplyLoopComputedInPython) {
  // python3: h = 1469598103934665603; for c in b"student": h = ((h ^ c) * 1099511628211) % 2**64
  EXPECT_EQ(HashBytes(""), 1469598103934665603ull);
  EXPECT_EQ(HashBytes("student"), 4127226576064223490ull);
  EXPECT_NE(HashBytes("student"), HashBytes("studenu"));
}

}  // namespace
}  // namespace maestro
