// SPDX-License-Identifier: Apache-2.0
// The costs the runtime schedules with (scheduler::SectionCostModel): the
// plan's per-section micro-batch costs when the compiler wrote them, else a
// proxy from parameter counts that only ranks sections. Only the order of
// work depends on the costs, never the result. The timeline (timeline.h)
// also predicts a measured step with costs fitted to it.
// May call: scheduler, plan, plan/model_desc, runtime/plan_data (torch-free). Torch-free.
#pragma once

#include <memory>
#include <vector>

#include "plan/plan.h"
#include "scheduler/problem.h"

namespace maestro::runtime {

// The costs the compiler planned with (plan.json's per-section MicroBatchCost
// and per-edge seconds_per_sample): a micro-batch of n samples costs
// fixed + n * per_sample, split forward : backward by the measured (or
// modelled) share. The schedule and the predicted timeline use them.
// A ViT (audio encoder) section that activates on a modality encodes only a
// sample's own images (clips) while the compiler planned for
// max_images_per_sample (max_audios_per_sample) = K of them: each sample
// counts as (its tokens of that modality) / (K * rows per item), e.g. 1/3 of
// a planned sample for one image of K = 3.
class PlannedCostModel : public scheduler::SectionCostModel {
 public:
  explicit PlannedCostModel(const plan::Plan& plan);
  double ForwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const override;
  double BackwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const override;
  double TransferSeconds(int edge, const scheduler::Sample& sample) const override;
  double OptimizerSeconds(int section) const override;

 private:
  double Total(int section, const std::vector<const scheduler::Sample*>& samples) const;
  std::vector<plan::MicroBatchCost> costs_;
  // Per section: the modality whose tokens scale a sample (-1: every sample
  // counts 1) and the tokens of a sample that counts 1.
  std::vector<int> scale_modality_;
  std::vector<double> full_tokens_;
  std::vector<bool> trains_;
  std::vector<double> edges_;
};

// The scheduler's costs: the plan's when the compiler wrote them, else a
// proxy — 2 (forward) or 4 (backward) x parameters x tokens seen, at 1
// TFLOP/s — that only ranks sections.
std::shared_ptr<const scheduler::SectionCostModel> RuntimeCostModel(const plan::Plan& plan);

}  // namespace maestro::runtime
