// SPDX-License-Identifier: Apache-2.0
// SplitMix64 (Steele, Lea, Flood 2014): the one integer mixer every module
// uses for seeds, tie-breaks and shuffles, so the same inputs give the same
// bits on every platform; and the one hash of a byte string (HashBytes).
// May call: nothing. Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

namespace maestro {

inline constexpr uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ull;

// The mix of x + gamma (a stateless hash of x).
inline constexpr uint64_t SplitMix64(uint64_t x) {
  x += kSplitMixGamma;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The generator form: the next value of the stream `state`, advancing it.
inline uint64_t SplitMix64Next(uint64_t& state) {
  const uint64_t value = SplitMix64(state);
  state += kSplitMixGamma;
  return value;
}

// A 64-bit hash of `bytes`: FNV-1a's xor-then-multiply by the FNV prime
// 1099511628211, from the offset 1469598103934665603 (FNV's published basis
// is 14695981039346656037, a digit longer). The offset stays: section seeds
// (hence every run's initial weights) and spool folder names come from it.
inline constexpr uint64_t HashBytes(std::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

}  // namespace maestro
