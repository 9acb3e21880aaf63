// SPDX-License-Identifier: Apache-2.0
#include "runtime/parallel/distributed_optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "base/checks.h"
#include "runtime/collectives.h"
#include "runtime/parallel/data_parallel.h"
#include "runtime/parallel/gradient_norm.h"
#include "runtime/tensor_buffer.h"
#include "runtime/torch_call.h"

namespace maestro::runtime {

namespace {

// AdamW's epsilon: SectionRunner's replicated torch::optim::AdamW uses 1e-8.
constexpr double kAdamEps = 1e-8;
// Shard sizes are multiples of this many elements (64 B of fp32).
constexpr int64_t kShardAlign = 16;

launcher::Buffer DoubleBuffer(std::vector<double>& v) {
  return launcher::CpuBuffer(v);
}

}  // namespace

StatusOr<std::unique_ptr<DistributedOptimizer>> DistributedOptimizer::Create(
    std::vector<torch::Tensor> params, std::vector<bool> tp_sharded, launcher::Backend& dp, launcher::Backend* tp,
    const plan::OptimizerDesc& desc, std::string what, launcher::Backend* pp, std::vector<bool> counted_in_norm) {
  if (params.size() != tp_sharded.size()) {
    return Status::InvalidArgument(
        fmt::format("{}: {} parameters but {} TP-shard flags", what, params.size(), tp_sharded.size()));
  }
  if (counted_in_norm.empty()) counted_in_norm.assign(params.size(), true);
  if (params.size() != counted_in_norm.size()) {
    return Status::InvalidArgument(
        fmt::format("{}: {} parameters but {} norm flags", what, params.size(), counted_in_norm.size()));
  }
  std::unique_ptr<DistributedOptimizer> opt(new DistributedOptimizer());
  opt->what_ = std::move(what);
  opt->dp_ = &dp;
  opt->tp_ = tp != nullptr && tp->group().size() > 1 ? tp : nullptr;
  opt->pp_ = pp != nullptr && pp->group().size() > 1 ? pp : nullptr;
  opt->counted_in_norm_ = std::move(counted_in_norm);
  opt->desc_ = desc;
  opt->tp_sharded_ = std::move(tp_sharded);
  opt->dp_size_ = std::max(1, dp.group().size());
  opt->dp_rank_ = std::max(0, dp.group().my_index);
  opt->bucket_bytes_ = GradientBucketBytes();
  int64_t n = 0;
  // The flat buffers live where the parameters do (they become views into
  // them); the collectives stage through the backend's device (MPI: host).
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  for (const auto& p : params) {
    if (p.scalar_type() != torch::kFloat32 || p.device() != device) {
      return Status::FailedPrecondition(
          fmt::format("{}: ZeRO-1 shards fp32 parameters on one device (the fp32 masters, also under bf16), got {} "
                      "on {} beside {} (set zero_stage = 0 for this section)",
                      opt->what_, c10::toString(p.scalar_type()), p.device().str(), device.str()));
    }
    opt->offsets_.push_back(n);
    opt->param_index_.push_back(opt->param_index_.size());
    n += p.numel();
  }
  opt->params_ = std::move(params);
  opt->numel_ = n;
  const int64_t g = opt->dp_size_;
  const int64_t per_rank = (n + g - 1) / g;
  opt->shard_ = std::max<int64_t>(kShardAlign, (per_rank + kShardAlign - 1) / kShardAlign * kShardAlign);
  MAESTRO_RETURN_IF_ERROR(TorchCall(opt->what_ + ": building the ZeRO-1 buffers", [&] {
    const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
    opt->flat_params_ = torch::zeros({g * opt->shard_}, f32);
    opt->flat_grads_ = torch::zeros({g * opt->shard_}, f32);
    opt->exp_avg_ = torch::zeros({opt->shard_}, f32);
    opt->exp_avg_sq_ = torch::zeros({opt->shard_}, f32);
    opt->Bind();
    opt->flat_grads_.zero_();
  }));
  return opt;
}

StatusOr<std::unique_ptr<DistributedOptimizer>> DistributedOptimizer::CreateWithExperts(
    std::vector<torch::Tensor> params, std::vector<bool> tp_sharded, std::vector<bool> routed_expert,
    launcher::Backend& dp, launcher::Backend& expert_dp, launcher::Backend& ep, launcher::Backend* tp,
    const plan::OptimizerDesc& desc, std::string what, launcher::Backend* pp, std::vector<bool> counted_in_norm) {
  if (counted_in_norm.empty()) counted_in_norm.assign(params.size(), true);
  if (routed_expert.size() != params.size() || tp_sharded.size() != params.size() ||
      counted_in_norm.size() != params.size()) {
    return Status::InvalidArgument(
        fmt::format("{}: {} parameters but {} expert flags", what, params.size(), routed_expert.size()));
  }
  std::vector<torch::Tensor> dense, expert;
  std::vector<bool> dense_tp, expert_tp, dense_norm, expert_norm;
  std::vector<size_t> dense_index, expert_index;
  for (size_t i = 0; i < params.size(); ++i) {
    (routed_expert[i] ? expert_index : dense_index).push_back(i);
    (routed_expert[i] ? expert : dense).push_back(params[i]);
    (routed_expert[i] ? expert_tp : dense_tp).push_back(tp_sharded[i]);
    (routed_expert[i] ? expert_norm : dense_norm).push_back(counted_in_norm[i]);
  }
  MAESTRO_ASSIGN_OR_RETURN(
      auto opt, Create(std::move(dense), std::move(dense_tp), dp, tp, desc, what, pp, std::move(dense_norm)));
  MAESTRO_ASSIGN_OR_RETURN(opt->experts_, Create(std::move(expert), std::move(expert_tp), expert_dp, tp, desc,
                                                 what + " (routed experts)", pp, std::move(expert_norm)));
  opt->experts_->ep_ = ep.group().size() > 1 ? &ep : nullptr;
  opt->param_index_ = std::move(dense_index);
  opt->experts_->param_index_ = std::move(expert_index);
  return opt;
}

void DistributedOptimizer::Bind() {
  torch::NoGradGuard guard;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i];
    const int64_t n = p.numel();
    auto param_slot = flat_params_.narrow(0, offsets_[i], n);
    if (p.data_ptr() != param_slot.data_ptr()) {
      param_slot.copy_(p.reshape({-1}));
      p.set_data(param_slot.view(p.sizes()));
    }
    auto grad_slot = flat_grads_.narrow(0, offsets_[i], n);
    const auto& grad = p.grad();
    if (!grad.defined() || grad.data_ptr() != grad_slot.data_ptr()) {
      if (grad.defined()) {
        grad_slot.copy_(grad.reshape({-1}));
      } else {
        grad_slot.zero_();
      }
      p.mutable_grad() = grad_slot.view(p.sizes());
    }
  }
}

int64_t DistributedOptimizer::reduce_scatter_buckets() const {
  if (dp_size_ == 1) return 0;
  const int64_t per_shard =
      std::clamp<int64_t>(bucket_bytes_ / static_cast<int64_t>(sizeof(float)) / dp_size_, 1, shard_);
  return (shard_ + per_shard - 1) / per_shard;
}

Status DistributedOptimizer::ReduceScatterGradients(double* blocked_seconds) {
  MAESTRO_RETURN_IF_ERROR(TorchCall(what_ + ": ZeRO-1 gradients", [&] {
    Bind();  // a gradient someone replaced (set_to_none) comes back into the buffer
    grad_shard_ = torch::empty({shard_}, flat_grads_.options());
  }));
  if (experts_) MAESTRO_RETURN_IF_ERROR(experts_->ReduceScatterGradients(blocked_seconds));
  if (dp_size_ == 1) {
    grad_shard_.copy_(flat_grads_);
    return Status::Ok();
  }
  // Buckets (docs/gradient_sync.md): bucket k reduce-scatters elements
  // [k b, k b + n) of every rank's shard, packed rank after rank into one
  // (G, n) buffer of at most bucket_bytes_, into the same elements of this
  // rank's gradient shard. One bucket covering the shards is the flat buffer
  // itself, reduce-scattered without a copy.
  const int64_t g = dp_size_;
  const int64_t per_shard = std::clamp<int64_t>(bucket_bytes_ / static_cast<int64_t>(sizeof(float)) / g, 1, shard_);
  if (per_shard == shard_) return ReduceScatterOnBackend(flat_grads_, grad_shard_, blocked_seconds);
  torch::Tensor bucket;
  MAESTRO_RETURN_IF_ERROR(TorchCall(what_ + ": ZeRO-1 gradient bucket",
                                    [&] { bucket = torch::empty({g * per_shard}, flat_grads_.options()); }));
  const auto by_rank = flat_grads_.view({g, shard_});
  for (int64_t at = 0; at < shard_; at += per_shard) {
    const int64_t n = std::min(per_shard, shard_ - at);
    auto packed = bucket.narrow(0, 0, g * n);
    MAESTRO_RETURN_IF_ERROR(TorchCall(what_ + ": ZeRO-1 gradient bucket", [&] {
      packed.view({g, n}).copy_(by_rank.narrow(1, at, n));
    }));
    auto out = grad_shard_.narrow(0, at, n);
    MAESTRO_RETURN_IF_ERROR(ReduceScatterOnBackend(packed, out, blocked_seconds));
  }
  return Status::Ok();
}

Status DistributedOptimizer::ReduceScatterOnBackend(const torch::Tensor& in, torch::Tensor out,
                                                    double* blocked_seconds) {
  torch::Tensor wire_in, wire_out;
  MAESTRO_RETURN_IF_ERROR(TorchCall(what_ + ": ZeRO-1 gradients to the DP backend", [&] {
    wire_in = OnBackendDevice(in, dp_->device());
    wire_out = OnBackendDevice(out, dp_->device());
  }));
  MAESTRO_RETURN_IF_ERROR(TimedWait(
      dp_->ReduceScatter(FloatBuffer(wire_in), FloatBuffer(wire_out), launcher::ReduceOp::kSum), blocked_seconds));
  return TorchCall(what_ + ": ZeRO-1 gradient shard from the DP backend", [&] { CopyBackFromBackend(out, wire_out); });
}

namespace {

// `values` summed over `group` in fp64, its wait counted in *blocked_seconds.
SumOverGroup SumOver(launcher::Backend* group, double* blocked_seconds) {
  return [group, blocked_seconds](std::vector<double>& values) {
    return TimedWait(group->AllReduce(DoubleBuffer(values), launcher::ReduceOp::kSum), blocked_seconds);
  };
}

}  // namespace

StatusOr<double> DistributedOptimizer::StepShard(double lr, double* blocked_seconds) {
  if (!grad_shard_.defined()) {
    return Status::Internal(fmt::format("{}: StepShard before ReduceScatterGradients", what_));
  }
  // The one rule of the global norm (gradient_norm.h): the shards' squares
  // summed over DP (the routed experts' over expert-DP and EP), TP slices
  // over TP, every stage's over PP.
  MAESTRO_ASSIGN_OR_RETURN(const GradientSquares dense, SquaresOfShard());
  GradientSquares routed;
  GradientNormGroups groups;
  if (dp_size_ > 1) groups.shards = SumOver(dp_, blocked_seconds);
  if (experts_) {
    MAESTRO_ASSIGN_OR_RETURN(routed, experts_->SquaresOfShard());
    if (experts_->dp_size_ > 1) groups.expert_shards = SumOver(experts_->dp_, blocked_seconds);
    if (experts_->ep_ != nullptr) groups.experts = SumOver(experts_->ep_, blocked_seconds);
  }
  if (tp_ != nullptr) groups.tensor_parallel = SumOver(tp_, blocked_seconds);
  if (pp_ != nullptr) groups.stages = SumOver(pp_, blocked_seconds);
  MAESTRO_ASSIGN_OR_RETURN(const double norm, GlobalGradientNorm(dense, routed, groups));
  MAESTRO_RETURN_IF_ERROR(UpdateShard(lr, norm));
  if (experts_) MAESTRO_RETURN_IF_ERROR(experts_->UpdateShard(lr, norm));
  return norm;
}

StatusOr<GradientSquares> DistributedOptimizer::SquaresOfShard() {
  torch::NoGradGuard guard;
  GradientSquares squares;
  const int64_t lo = static_cast<int64_t>(dp_rank_) * shard_, hi = lo + shard_;
  MAESTRO_RETURN_IF_ERROR(TorchCall(what_ + ": ZeRO-1 gradient norm", [&] {
    for (size_t i = 0; i < params_.size(); ++i) {
      const int64_t a = std::max(lo, offsets_[i]), b = std::min(hi, offsets_[i] + params_[i].numel());
      if (a >= b || !counted_in_norm_[i]) continue;
      squares.Add(grad_shard_.narrow(0, a - lo, b - a).to(torch::kFloat64).pow(2).sum().item<double>(), tp_sharded_[i]);
    }
  }));
  return squares;
}

Status DistributedOptimizer::UpdateShard(double lr, double norm) {
  torch::NoGradGuard guard;
  const int64_t lo = static_cast<int64_t>(dp_rank_) * shard_;
  return TorchCall(what_ + ": ZeRO-1 AdamW step", [&] {
    if (const double scale = ClipScale(norm, desc_.grad_clip); scale != 1.0) grad_shard_.mul_(scale);
    // torch::optim::AdamW::step (libtorch 1.13), on the shard.
    auto p = flat_params_.narrow(0, lo, shard_);
    const auto& g = grad_shard_;
    if (desc_.weight_decay != 0) p.mul_(1 - lr * desc_.weight_decay);
    ++step_;
    const double bias_correction1 = 1 - std::pow(desc_.beta1, step_);
    const double bias_correction2 = 1 - std::pow(desc_.beta2, step_);
    exp_avg_.mul_(desc_.beta1).add_(g, 1 - desc_.beta1);
    exp_avg_sq_.mul_(desc_.beta2).addcmul_(g, g, 1 - desc_.beta2);
    grad_shard_ = torch::Tensor();  // freed before the denominator is made
    auto denom = exp_avg_sq_.sqrt();
    denom.div_(std::sqrt(bias_correction2)).add_(kAdamEps);
    p.addcdiv_(exp_avg_, denom, -lr / bias_correction1);
  });
}

Status DistributedOptimizer::GatherParameters(double* blocked_seconds) {
  if (experts_) MAESTRO_RETURN_IF_ERROR(experts_->GatherParameters(blocked_seconds));
  if (dp_size_ > 1) {
    // The send buffer is a copy: MPI forbids in and out to overlap. (bf16:
    // the master shard converted to the parameters' dtype here.)
    // On a GPU with a host backend (MPI) both travel through host copies.
    torch::Tensor send, wire;
    MAESTRO_RETURN_IF_ERROR(TorchCall(what_ + ": ZeRO-1 all-gather", [&] {
      send = OnBackendDevice(flat_params_.narrow(0, dp_rank_ * shard_, shard_), dp_->device()).clone();
      wire = OnBackendDevice(flat_params_, dp_->device());
    }));
    MAESTRO_RETURN_IF_ERROR(TimedWait(dp_->AllGather(FloatBuffer(send), FloatBuffer(wire)), blocked_seconds));
    MAESTRO_RETURN_IF_ERROR(
        TorchCall(what_ + ": ZeRO-1 parameters from the DP backend", [&] { CopyBackFromBackend(flat_params_, wire); }));
  }
  flat_grads_.zero_();
  return Status::Ok();
}

StatusOr<std::string> DistributedOptimizer::Save() const {
  std::string expert_bytes;
  if (experts_) {
    MAESTRO_ASSIGN_OR_RETURN(expert_bytes, experts_->Save());
  }
  std::string bytes;
  MAESTRO_RETURN_IF_ERROR(TorchCall(what_ + ": saving the ZeRO-1 optimizer shard", [&] {
    torch::serialize::OutputArchive archive;
    archive.write("exp_avg", exp_avg_.cpu());  // host copies: a checkpoint loads on any device
    archive.write("exp_avg_sq", exp_avg_sq_.cpu());
    archive.write("step", torch::tensor(step_, torch::kInt64));
    archive.write("layout", torch::tensor(std::vector<int64_t>{numel_, shard_, dp_size_, dp_rank_}, torch::kInt64));
    if (experts_) {
      auto raw = torch::empty({static_cast<int64_t>(expert_bytes.size())}, torch::kUInt8);
      std::copy(expert_bytes.begin(), expert_bytes.end(), reinterpret_cast<char*>(raw.data_ptr<uint8_t>()));
      archive.write("routed_experts", raw);
    }
    std::ostringstream os;
    archive.save_to(os);
    bytes = os.str();
  }));
  return bytes;
}

Status DistributedOptimizer::Load(const std::string& bytes) {
  torch::Tensor layout, step, m, v, expert_raw;
  MAESTRO_RETURN_IF_ERROR(TorchCall(
      what_ + ": loading the ZeRO-1 optimizer shard (a checkpoint written with zero_stage = 1 and this DP size?)", [&] {
        torch::serialize::InputArchive archive;
        std::istringstream in(bytes);
        archive.load_from(in);
        archive.read("layout", layout);
        archive.read("step", step);
        archive.read("exp_avg", m);
        archive.read("exp_avg_sq", v);
        if (experts_) archive.read("routed_experts", expert_raw);
      }));
  if (experts_) {
    const auto* raw = reinterpret_cast<const char*>(expert_raw.data_ptr<uint8_t>());
    MAESTRO_RETURN_IF_ERROR(experts_->Load(std::string(raw, raw + expert_raw.numel())));
  }
  const std::vector<int64_t> want{numel_, shard_, dp_size_, dp_rank_};
  std::vector<int64_t> got;
  if (layout.defined() && layout.numel() == 4) {
    for (int64_t i = 0; i < 4; ++i) got.push_back(layout[i].item<int64_t>());
  }
  if (got != want) {
    return Status::FailedPrecondition(fmt::format(
        "{}: the checkpoint's ZeRO-1 optimizer shard is of another layout ({} parameters, DP {}, rank {}) than this "
        "run's ({} parameters, DP {}, rank {}): resume with the plan that wrote the checkpoint (same model, DP and "
        "zero_stage)",
        what_, got.size() == 4 ? got[0] : -1, got.size() == 4 ? got[2] : -1, got.size() == 4 ? got[3] : -1, numel_,
        dp_size_, dp_rank_));
  }
  return TorchCall(what_ + ": loading the ZeRO-1 optimizer shard", [&] {
    torch::NoGradGuard guard;
    exp_avg_.copy_(m);
    exp_avg_sq_.copy_(v);
    step_ = step.item<int64_t>();
    Bind();
  });
}

std::vector<DistributedOptimizer::ShardPiece> DistributedOptimizer::ShardPieces() {
  std::vector<ShardPiece> pieces;
  const int64_t lo = static_cast<int64_t>(dp_rank_) * shard_, hi = lo + shard_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t begin = std::max(lo, offsets_[i]), end = std::min(hi, offsets_[i] + params_[i].numel());
    if (begin >= end) continue;
    pieces.push_back(ShardPiece{param_index_[i], begin - offsets_[i], end - offsets_[i],
                                exp_avg_.narrow(0, begin - lo, end - begin),
                                exp_avg_sq_.narrow(0, begin - lo, end - begin)});
  }
  if (experts_) {
    for (ShardPiece& piece : experts_->ShardPieces()) pieces.push_back(std::move(piece));
  }
  return pieces;
}

void DistributedOptimizer::SetStepCount(int64_t step) {
  step_ = step;
  if (experts_) experts_->SetStepCount(step);
}

}  // namespace maestro::runtime
