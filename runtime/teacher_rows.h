// SPDX-License-Identifier: Apache-2.0
// The rows a KD teacher section sends its student (plan/teacher_rows.h):
// its final hidden states as they are, or its head's top-K or sampled rows
// (runtime/kd_rows.h) made over chunks of positions, so that one chunk's
// fp32 logits exist at a time (plan::LossChunkPositions, the student's rule).
// Under context parallelism each CP rank makes the rows of its own two
// chunks of the sequence (the draws keyed by their absolute positions), then
// the ranks gather the whole sequence: the head runs once per position.
// Runtime-internal (torch). May call: runtime/kd_rows, runtime/models/decoder,
// runtime/parallel/context_parallel, plan, libtorch. Thread safety: one
// thread per model.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/comm.h"
#include "plan/teacher_rows.h"
#include "runtime/models/decoder.h"

namespace maestro::runtime {

struct TeacherRowsContext {
  std::vector<int64_t> sample_ids;  // (B): the draws' keys
  uint64_t seed = 0;                // the draws' seed (the teacher section's)
  int64_t seq_len = 0;              // the whole sequence
  int cp = 1, cp_rank = 0;
  launcher::Backend* cp_group = nullptr;              // cp > 1
  torch::ScalarType values_dtype = torch::kBFloat16;  // top-K values (plan::Plan::spool_dtype)
};

// hidden: (B, T_local, C), the teacher's final hidden states (this CP rank's
// part, as SplitSequenceForContextParallel cut it). Returns (B, T, W) on
// hidden's device, the whole sequence: W = C and hidden's dtype for hidden
// rows; fp32 with W = 2K or draws + 1 for top-K or sampled rows.
torch::Tensor TeacherRowsFromHidden(DecoderLMImpl* lm, const torch::Tensor& hidden, const plan::TeacherRowsSent& sent,
                                    const TeacherRowsContext& context);

// The torch dtype of a spool dtype name ("bf16", "f16", "f32").
torch::ScalarType SpoolValuesType(const std::string& spool_dtype);

}  // namespace maestro::runtime
