// SPDX-License-Identifier: Apache-2.0
// A sliding window's attention as the runtime computes it (issue #40): the
// queries in chunks of W, each chunk over its band of keys [s - W + 1, e)
// under the window's mask, instead of the whole T x T scores. Every key a
// query of [s, e) may see (kv_idx > q_idx - W, causal) lies in that band, so
// the result is the masked square's; the work is about 2W keys per query.
// The runtime (runtime/models/decoder.cc) decides by BandedAttention; the
// step and memory models price by BandedKeysPerQuery. Context parallelism
// keeps the masked square over the gathered keys.
// May call: the standard library. Header-only, pure functions.
#pragma once

#include <algorithm>
#include <cstdint>

namespace maestro::plan {

// Whether a window of W over T tokens runs banded: the band (<= 2W - 1
// keys) is shorter than the sequence by at least a chunk.
inline bool BandedAttention(int64_t tokens, int64_t window) {
  return window > 0 && tokens > 2 * window;
}

// The keys per query, on average over the T queries, that the attention
// computes scores for: the band of each chunk when BandedAttention, else T.
inline double BandedKeysPerQuery(int64_t tokens, int64_t window) {
  if (!BandedAttention(tokens, window)) return static_cast<double>(tokens);
  double scores = 0;
  for (int64_t start = 0; start < tokens; start += window) {
    const int64_t end = std::min(tokens, start + window);
    scores += static_cast<double>(end - start) * static_cast<double>(end - std::max<int64_t>(0, start - window + 1));
  }
  return scores / static_cast<double>(tokens);
}

}  // namespace maestro::plan
