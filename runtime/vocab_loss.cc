// SPDX-License-Identifier: Apache-2.0
#include "runtime/vocab_loss.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "datasets/demo_data.h"
#include "runtime/kd_rows.h"
#include "runtime/recompute.h"

namespace maestro::runtime {

torch::Tensor MaskedPositionLoss(const torch::Tensor& logits, const torch::Tensor& targets,
                                 const torch::Tensor& teacher_logits, const plan::LossDesc& loss) {
  const auto v = logits.size(2);
  auto mask = targets.ne(datasets::kIgnoreTarget);  // (B, L)
  auto safe_targets = targets.masked_fill(~mask, 0);
  auto log_probs = torch::log_softmax(logits.to(torch::kFloat32), -1);      // (B, L, V)
  auto ce = -log_probs.gather(-1, safe_targets.unsqueeze(-1)).squeeze(-1);  // (B, L)
  torch::Tensor per_position = ce;
  if (teacher_logits.defined()) {
    const double temp = loss.temperature;
    auto s_scaled = torch::log_softmax(logits.to(torch::kFloat32) / temp, -1);  // (B, L, V)
    auto t_scaled = teacher_logits.to(torch::kFloat32) / temp;
    torch::Tensor kl;
    if (loss.top_k > 0 && loss.top_k < v) {
      auto top = t_scaled.topk(loss.top_k, -1);                // values, indices (B, L, k)
      auto t_logp = torch::log_softmax(std::get<0>(top), -1);  // teacher renormalized over its top-k
      auto s_logp = s_scaled.gather(-1, std::get<1>(top));     // student log-probs at those tokens
      kl = (t_logp.exp() * (t_logp - s_logp)).sum(-1);         // (B, L)
    } else {
      auto t_logp = torch::log_softmax(t_scaled, -1);
      kl = (t_logp.exp() * (t_logp - s_scaled)).sum(-1);
    }
    per_position = (1.0 - loss.kd_alpha) * ce + loss.kd_alpha * temp * temp * kl;
  }
  return per_position * mask.to(torch::kFloat32);
}

torch::Tensor MaskedPositionLossOfRows(const torch::Tensor& logits, const torch::Tensor& targets,
                                       const TeacherRows& teacher, const plan::LossDesc& loss) {
  if (!teacher.rows.defined()) return MaskedPositionLoss(logits, targets, {}, loss);
  if (teacher.form == plan::TeacherRowsForm::kHidden) {
    const auto teacher_logits = torch::matmul(teacher.rows, teacher.head.t()).detach();  // (B, L, V)
    return MaskedPositionLoss(logits, targets, teacher_logits, loss);
  }
  auto mask = targets.ne(datasets::kIgnoreTarget);  // (B, L)
  auto safe_targets = targets.masked_fill(~mask, 0);
  auto log_probs = torch::log_softmax(logits.to(torch::kFloat32), -1);      // (B, L, V)
  auto ce = -log_probs.gather(-1, safe_targets.unsqueeze(-1)).squeeze(-1);  // (B, L)
  const double temp = loss.temperature;
  auto kl = teacher.form == plan::TeacherRowsForm::kTopK ? TopKRowsKl(logits, teacher.rows, temp)
                                                         : SampledRowsKl(logits, teacher.rows, temp);  // (B, L)
  auto per_position = (1.0 - loss.kd_alpha) * ce + loss.kd_alpha * temp * temp * kl;
  return per_position * mask.to(torch::kFloat32);
}

torch::Tensor PerSampleLoss(DecoderLMImpl* lm, const torch::Tensor& hidden, const torch::Tensor& targets,
                            const TeacherRows& teacher, const plan::LossDesc& loss, const torch::Tensor& target_counts,
                            int64_t chunk_positions, torch::Tensor* logits) {
  auto counts = target_counts.defined()
                    ? target_counts
                    : targets.ne(datasets::kIgnoreTarget).to(torch::kFloat32).sum(-1).clamp_min(1.0);
  const int64_t t = hidden.size(1);
  const int64_t chunk = std::max<int64_t>(chunk_positions, 1);
  if (chunk >= t) {
    *logits = lm->Logits(hidden);  // (B, T, V)
    return MaskedPositionLossOfRows(*logits, targets, teacher, loss).sum(-1) / counts;
  }
  torch::Tensor sums;  // (B)
  for (int64_t start = 0; start < t; start += chunk) {
    const int64_t len = std::min(chunk, t - start);
    const auto chunk_targets = targets.narrow(1, start, len);
    TeacherRows chunk_teacher = teacher;
    if (teacher.rows.defined()) chunk_teacher.rows = teacher.rows.narrow(1, start, len);
    auto part = RunRecomputed(
        [lm, chunk_targets, chunk_teacher, loss](const std::vector<torch::Tensor>& in) {
          return MaskedPositionLossOfRows(lm->Logits(in[0]), chunk_targets, chunk_teacher, loss).sum(-1);
        },
        {hidden.narrow(1, start, len)});
    sums = sums.defined() ? sums + part : part;
  }
  return sums / counts;
}

}  // namespace maestro::runtime
