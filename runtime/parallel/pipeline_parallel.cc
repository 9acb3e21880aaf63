// SPDX-License-Identifier: Apache-2.0
#include "runtime/parallel/pipeline_parallel.h"

#include <fmt/format.h>

#include <stdexcept>

#include "base/checks.h"
#include "runtime/collectives.h"
#include "runtime/tensor_buffer.h"

namespace maestro::runtime {

namespace {

int Tag(int micro_batch, PipelineGroup::Part part) {
  return 4 * micro_batch + static_cast<int>(part);
}

launcher::Buffer DoubleBuffer(std::vector<double>& v) {
  return launcher::Buffer{v.data(), v.size(), launcher::DType::kF64, launcher::Device::kCpu};
}

}  // namespace

Status PipelineGroup::Send(int peer, int tag, const torch::Tensor& t) {
  torch::Tensor wire = OnBackendDevice(t.detach(), group_.device());
  if (wire.data_ptr() == t.data_ptr()) wire = wire.clone();  // the caller may change t before the send ends
  auto work = group_.Send(FloatBuffer(wire), peer, tag);
  if (!work.ok()) return work.status();
  pending_.push_back({wire, std::move(*work)});
  return Status::Ok();
}

StatusOr<torch::Tensor> PipelineGroup::Receive(int peer, int tag, at::IntArrayRef shape, torch::Device device) {
  auto options = torch::TensorOptions().dtype(torch::kFloat32);
  if (group_.device() == launcher::Device::kCuda) options = options.device(device);
  torch::Tensor wire = torch::empty(shape, options);
  MAESTRO_RETURN_IF_ERROR(TimedWait(group_.Recv(FloatBuffer(wire), peer, tag), blocked_));
  return wire.to(device);
}

Status PipelineGroup::SendDown(int micro_batch, Part part, const torch::Tensor& t) {
  return Send(stage() + 1, Tag(micro_batch, part), t);
}

StatusOr<torch::Tensor> PipelineGroup::ReceiveFromAbove(int micro_batch, Part part, at::IntArrayRef shape,
                                                        torch::Device device) {
  return Receive(stage() - 1, Tag(micro_batch, part), shape, device);
}

Status PipelineGroup::SendGradientUp(int micro_batch, const torch::Tensor& grad) {
  return Send(stage() - 1, Tag(micro_batch, Part::kGradient), grad);
}

StatusOr<torch::Tensor> PipelineGroup::ReceiveGradientFromBelow(int micro_batch, at::IntArrayRef shape,
                                                                torch::Device device) {
  return Receive(stage() + 1, Tag(micro_batch, Part::kGradient), shape, device);
}

Status PipelineGroup::Drain() {
  Status first_error;
  for (auto& p : pending_) {
    Status s = TimedWait(std::move(p.work), blocked_);
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  pending_.clear();
  return first_error;
}

Status PipelineGroup::SumOverStages(std::vector<double>& values) {
  if (stages() == 1) return Status::Ok();
  return TimedWait(group_.AllReduce(DoubleBuffer(values), launcher::ReduceOp::kSum), blocked_);
}

void PipelineGroup::SumOverStages(torch::Tensor& t) {
  if (stages() == 1) return;
  torch::Tensor wire = OnBackendDevice(t, group_.device());
  Status s = TimedWait(group_.AllReduce(FloatBuffer(wire), launcher::ReduceOp::kSum), blocked_);
  if (!s.ok()) throw std::runtime_error(s.ToString());
  CopyBackFromBackend(t, wire);
}

// First <-> last: each sends its gradient and adds the other's.
Status PipelineGroup::SumTiedGradient(torch::Tensor& grad) {
  if (stages() == 1 || !(first() || last())) return Status::Ok();
  const int peer = first() ? stages() - 1 : 0;
  constexpr int kTiedTag = (1 << 30) - 1;  // above every 4 * micro-batch + part of a step
  MAESTRO_RETURN_IF_ERROR(Send(peer, kTiedTag, grad));
  MAESTRO_ASSIGN_OR_RETURN(auto other, Receive(peer, kTiedTag, grad.sizes(), grad.device()));
  MAESTRO_RETURN_IF_ERROR(Drain());
  torch::NoGradGuard no_grad;
  grad.add_(other.to(grad.scalar_type()));
  return Status::Ok();
}

}  // namespace maestro::runtime
