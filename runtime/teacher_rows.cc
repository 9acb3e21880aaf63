// SPDX-License-Identifier: Apache-2.0
#include "runtime/teacher_rows.h"

#include <algorithm>

#include "plan/loss_chunk.h"
#include "runtime/kd_rows.h"
#include "runtime/parallel/context_parallel.h"

namespace maestro::runtime {

namespace {

// The rows of `hidden`'s positions first_position, first_position + 1, ...
// (B, L, C) -> (B, L, W) fp32, over chunks of positions.
torch::Tensor RowsOfSpan(DecoderLMImpl* lm, const torch::Tensor& hidden, const plan::TeacherRowsSent& sent,
                         const TeacherRowsContext& context, int64_t first_position) {
  const int64_t b = hidden.size(0), l = hidden.size(1);
  const int64_t chunk = plan::LossChunkPositions(b, l);
  std::vector<torch::Tensor> parts;
  torch::NoGradGuard no_grad;
  for (int64_t start = 0; start < l; start += chunk) {
    const int64_t len = std::min(chunk, l - start);
    const auto logits = lm->Logits(hidden.narrow(1, start, len));  // (B, len, V)
    if (sent.form == plan::TeacherRowsForm::kTopK) {
      parts.push_back(TopKTeacherRows(logits, sent.loss.top_k, context.values_dtype));
    } else {
      parts.push_back(SampledTeacherRows(logits, plan::SampledDraws(sent.loss), sent.loss.temperature, context.seed,
                                         context.sample_ids, first_position + start));
    }
  }
  return parts.size() == 1 ? parts[0] : torch::cat(parts, 1);
}

}  // namespace

torch::Tensor TeacherRowsFromHidden(DecoderLMImpl* lm, const torch::Tensor& hidden, const plan::TeacherRowsSent& sent,
                                    const TeacherRowsContext& context) {
  if (sent.form == plan::TeacherRowsForm::kHidden) {
    return context.cp > 1 ? GatherWholeSequence(hidden, 1, *context.cp_group) : hidden;
  }
  if (context.cp <= 1) return RowsOfSpan(lm, hidden, sent, context, 0);
  // This rank holds chunks r and 2cp-1-r of 2cp (ContextParallelPositions).
  const int64_t piece = hidden.size(1) / 2;
  const int64_t chunk_len = context.seq_len / (2 * context.cp);
  auto first = RowsOfSpan(lm, hidden.narrow(1, 0, piece), sent, context, context.cp_rank * chunk_len);
  auto second = RowsOfSpan(lm, hidden.narrow(1, piece, hidden.size(1) - piece), sent, context,
                           (2 * context.cp - 1 - context.cp_rank) * chunk_len);
  return GatherWholeSequence(torch::cat({first, second}, 1), 1, *context.cp_group);
}

torch::ScalarType SpoolValuesType(const std::string& spool_dtype) {
  if (spool_dtype == "f32") return torch::kFloat32;
  if (spool_dtype == "f16") return torch::kHalf;
  return torch::kBFloat16;
}

}  // namespace maestro::runtime
