// SPDX-License-Identifier: Apache-2.0
// A training decoder sink's loss over the vocabulary: the LM head, the
// cross-entropy and, for a KD student, the frozen teacher head and the
// temperature-scaled KL (top-k or full vocabulary; or from the teacher's
// top-K or sampled rows: runtime/kd_rows.h), per sample. Past
// plan::kLossWholeTokens tokens a micro-batch runs head and loss over chunks
// of positions, each recomputed in backward (plan/loss_chunk.h,
// docs/loss_chunking.md), so autograd keeps one chunk's fp32 logits chain
// instead of every token's.
//
// Owns: MaskedPositionLoss, PerSampleLoss.
// Runtime-internal: includes torch; only runtime/*.cc and tests/runtime
// include it. May call: runtime/models/decoder.h, runtime/recompute.h, runtime/kd_rows.h,
// datasets (kIgnoreTarget), plan, libtorch. Thread safety: one thread per
// model, as the models.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "plan/plan.h"
#include "plan/teacher_rows.h"
#include "runtime/models/decoder.h"

namespace maestro::runtime {

// A KD student's teacher side of the loss (plan/teacher_rows.h): the form
// of the rows on its KD edge, the rows (B, T, W) (this rank's positions
// under context parallelism; undefined: no KD term) and, for hidden rows,
// the teacher's head (V, C_teacher) fp32 that makes its logits here.
struct TeacherRows {
  plan::TeacherRowsForm form = plan::TeacherRowsForm::kHidden;
  torch::Tensor rows;
  torch::Tensor head;
};

// Per position: (1 - a) CE + a T^2 KL (a = loss.kd_alpha, 0 without a
// teacher), zero where the target is datasets::kIgnoreTarget.
// logits: (B, L, V); targets: (B, L) int64; teacher_logits: (B, L, V) or
// undefined. Returns (B, L) fp32.
torch::Tensor MaskedPositionLoss(const torch::Tensor& logits, const torch::Tensor& targets,
                                 const torch::Tensor& teacher_logits, const plan::LossDesc& loss);
// The same with the teacher's rows of these L positions: hidden rows
// through teacher.head (MaskedPositionLoss), top-K or sampled rows through
// their KL (runtime/kd_rows.h). teacher.rows: (B, L, W) or undefined.
torch::Tensor MaskedPositionLossOfRows(const torch::Tensor& logits, const torch::Tensor& targets,
                                       const TeacherRows& teacher, const plan::LossDesc& loss);

// Per sample: the mean over the sample's target positions of
// MaskedPositionLoss, with `lm`'s head (and a KD student's frozen teacher
// head) applied here, over chunks of `chunk_positions` positions (the
// runner passes plan::LossChunkPositions(B, T)). One chunk (chunk_positions
// >= T) runs whole and sets *logits to its (B, T, V) logits (the caption
// answers read them); more chunks each run under RunRecomputed and leave
// *logits undefined. Differentiable through `hidden` and the head.
// hidden: (B, T, C); targets: (B, T) int64; teacher: its rows (B, T, W) or
// undefined (TeacherRows); target_counts: (B)
// fp32, each sample's target count over its whole sequence (context
// parallelism: T is this rank's part, and the CP ranks' results sum to the
// whole mean), or undefined: counted in `targets`. Returns (B) fp32.
torch::Tensor PerSampleLoss(DecoderLMImpl* lm, const torch::Tensor& hidden, const torch::Tensor& targets,
                            const TeacherRows& teacher, const plan::LossDesc& loss, const torch::Tensor& target_counts,
                            int64_t chunk_positions, torch::Tensor* logits);

}  // namespace maestro::runtime
