// SPDX-License-Identifier: Apache-2.0
// The chunked vocabulary loss (docs/loss_chunking.md): a training decoder's
// LM head and loss (cross-entropy, KD's KL with the teacher head) run over
// the sequence in chunks of positions, each chunk's logits chain recomputed
// in backward (runtime/recompute.h), so a micro-batch holds one chunk's
// fp32 logits chain instead of every token's (past kLossWholeTokens). One
// rule that the runtime
// (runtime/section_forward.cc) chunks by and the memory and step models
// (compiler/memory_model.cc, step_model.cc) price. Torch-free, header-only.
// May call: nothing. Thread safety: pure functions.
#pragma once

#include <algorithm>
#include <cstdint>

namespace maestro::plan {

// A micro-batch of at most kLossWholeTokens tokens runs its loss whole, as
// before chunking existed: no recomputation, the same numbers (every tiny
// spec and test plan, and an 8K-token micro-batch, whose chain a plan can
// hold beside a 7B student: compiling the KD specs with the chunks from
// 2048 tokens made their students' steps 6-8% slower for memory they did
// not need). A larger one runs in chunks of kLossChunkTokens tokens: 2048
// tokens of a 152K vocabulary hold 3.7 GB of fp32 cross-entropy chain
// (3 x 4 x V bytes a token; 7.5 GB for KD's 6 x 4 x V) against 60 GB for a
// 32K-token sequence. The chunk's head GEMM (2048 x hidden x V) still runs
// near the GEMM's full rate: compiler/devices/h100_sxm.json's measured rows
// with k >= 896 and n >= 4864 reach 571-766 TFLOP/s at m = 2048, within
// 22% of their rate at m = 32768 (the step model prices each chunk's GEMM
// at its own m).
inline constexpr int64_t kLossWholeTokens = 8192;
inline constexpr int64_t kLossChunkTokens = 2048;

// Positions per chunk for a micro-batch of `samples` x `positions` (this
// rank's positions under CP): every position when samples x positions <=
// kLossWholeTokens, else kLossChunkTokens / samples (at least one).
inline int64_t LossChunkPositions(int64_t samples, int64_t positions) {
  samples = std::max<int64_t>(samples, 1);
  positions = std::max<int64_t>(positions, 1);
  if (samples * positions <= kLossWholeTokens) return positions;
  return std::clamp<int64_t>(kLossChunkTokens / samples, 1, positions);
}

// True when the micro-batch's loss runs in more than one chunk (the head and
// loss forwards then run again in backward).
inline bool LossIsChunked(int64_t samples, int64_t positions) {
  return LossChunkPositions(samples, positions) < std::max<int64_t>(positions, 1);
}

}  // namespace maestro::plan
