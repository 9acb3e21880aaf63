// SPDX-License-Identifier: Apache-2.0
// A ModelRunner's optimizer (runtime/model_runner.h): its trainable
// parameters and their flags, the gradient norm (the one rule of
// runtime/parallel/gradient_norm.h) and clipping, the learning rate and
// AdamW; and the learning-rate schedule (section_optimizer.h).
#include "runtime/section_optimizer.h"

#include <algorithm>
#include <cmath>

#include "base/checks.h"
#include "runtime/model_runner.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "runtime/parallel/expert_parallel.h"
#include "runtime/parallel/gradient_norm.h"
#include "runtime/parallel/pipeline_parallel.h"
#include "runtime/parallel/tensor_parallel.h"
#include "runtime/torch_compat.h"

namespace maestro::runtime {

namespace {

// AdamW's step: one fused kernel over all parameters where this libtorch has
// one for the device (compat::FusedAdamWStep: CUDA on 2.1+, CPU on 2.4+),
// else torch::optim::AdamW's per-parameter loop; the same state either way.
void StepAdamW(torch::optim::AdamW& optimizer, const torch::Device& device) {
  if (compat::FusedAdamWAvailable(device)) {
    compat::FusedAdamWStep(optimizer);
  } else {
    optimizer.step();
  }
  compat::ClearAutocastCache();  // the weights changed: drop their cached bf16 casts
}

// `values` summed over a group whose all-reduce takes an fp32 tensor (the TP
// reducer, the EP exchange).
template <typename Group>
SumOverGroup Fp32Sum(Group* group) {
  return [group](std::vector<double>& values) {
    std::vector<float> narrow(values.begin(), values.end());
    auto t = torch::tensor(narrow, torch::kFloat32);
    group->AllReduceSum(t);
    for (size_t i = 0; i < values.size(); ++i) values[i] = t[static_cast<int64_t>(i)].item<double>();
    return Status::Ok();
  };
}

}  // namespace

double LearningRate(const plan::OptimizerDesc& opt, int64_t step, int64_t total_steps) {
  if (opt.warmup_steps > 0 && step < opt.warmup_steps) {
    return opt.lr * static_cast<double>(step + 1) / static_cast<double>(opt.warmup_steps);
  }
  if (opt.schedule != "cosine" || total_steps <= 0) return opt.lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - opt.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - opt.warmup_steps) / span);
  const double min_lr = opt.lr / 10.0;
  return min_lr + (opt.lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

bool ModelRunner::IsTiedCopy(const std::string& parameter_name) const {
  return Staged() && !options().pipeline->first() && parameter_name == "embed_tokens.weight";
}

std::vector<torch::Tensor> ModelRunner::Parameters() {
  std::vector<torch::Tensor> params;
  for (auto& p : module_->parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  return params;
}

std::vector<bool> ModelRunner::ParametersShardedOverTp() {
  std::vector<bool> sharded;
  for (const auto& item : module_->named_parameters()) {
    if (item.value().requires_grad()) sharded.push_back(Sharded() && TensorParallelSplitOf(item.key()).sharded());
  }
  return sharded;
}

std::vector<bool> ModelRunner::ParametersCountedInNorm() {
  std::vector<bool> counted;
  for (const auto& item : module_->named_parameters()) {
    if (item.value().requires_grad()) counted.push_back(!IsTiedCopy(item.key()));
  }
  return counted;
}

std::vector<bool> ModelRunner::ParametersOfRoutedExperts() {
  std::vector<bool> routed;
  for (const auto& item : module_->named_parameters()) {
    if (item.value().requires_grad()) routed.push_back(ExpertSharded() && IsRoutedExpertParameter(item.key()));
  }
  return routed;
}

std::vector<torch::Tensor> ModelRunner::ForwardNoTokens() {
  if (!ExpertSharded()) return {};
  return module_->as<DecoderLMImpl>()->ForwardNoTokens();
}

torch::Tensor ModelRunner::TiedEmbedding() {
  if (!Staged() || !section_plan().model.tie_embeddings) return {};
  const auto& pp = *options().pipeline;
  if (!pp.first() && !pp.last()) return {};
  return module_->as<DecoderLMImpl>()->embed_tokens->weight;
}

double ModelRunner::OptimizerStep(int64_t step) {
  if (!optimizer_) return 0.0;
  EnsureGradients();
  auto params = Parameters();
  double norm = 0.0;
  {
    torch::NoGradGuard guard;
    GradientSquares dense, routed;
    for (const auto& item : module_->named_parameters()) {
      if (!item.value().requires_grad() || IsTiedCopy(item.key())) continue;
      const double sq = item.value().grad().to(torch::kFloat64).pow(2).sum().item<double>();
      const bool sharded = Sharded() && TensorParallelSplitOf(item.key()).sharded();
      (ExpertSharded() && IsRoutedExpertParameter(item.key()) ? routed : dense).Add(sq, sharded);
    }
    GradientNormGroups groups;
    if (ExpertSharded()) groups.experts = Fp32Sum(options().expert_parallel);
    if (Sharded()) groups.tensor_parallel = Fp32Sum(options().tensor_parallel);
    if (Staged()) {
      groups.stages = [pp = options().pipeline](std::vector<double>& values) { return pp->SumOverStages(values); };
    }
    auto global = GlobalGradientNorm(dense, routed, groups);
    TORCH_CHECK(global.ok(), "section '", section_plan().name, "': gradient norm: ", global.status().ToString());
    norm = *global;
    if (const double scale = ClipScale(norm, section_plan().optimizer.grad_clip); scale != 1.0) {
      for (auto& p : params) p.mutable_grad().mul_(scale);
    }
  }
  const double lr = LearningRate(section_plan().optimizer, step, plan().data.steps);
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  StepAdamW(*optimizer_, options().device);
  optimizer_->zero_grad();
  return norm;
}

}  // namespace maestro::runtime
