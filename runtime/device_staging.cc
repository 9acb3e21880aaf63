// SPDX-License-Identifier: Apache-2.0
#include "runtime/device_staging.h"

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

namespace maestro::runtime {

int CudaDeviceCount() {
  return static_cast<int>(torch::cuda::device_count());
}

torch::Device TorchDevice(const ComputePlacement& placement) {
  if (!placement.cuda()) return torch::Device(torch::kCPU);
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(placement.cuda_device));
}

void UseDevice(const ComputePlacement& placement) {
  if (!placement.cuda()) return;
  c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(TorchDevice(placement));
}

struct TransferStaging::Streams {
  c10::Stream transfer;  // copies between the device and pinned host memory
};

TransferStaging::TransferStaging(torch::Device compute) : compute_(compute) {
  if (!compute_.is_cuda()) return;
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  stream_ = std::make_unique<Streams>(Streams{impl.getStreamFromGlobalPool(compute_)});
}

TransferStaging::~TransferStaging() = default;

torch::Tensor TransferStaging::WireBuffer(at::IntArrayRef shape, launcher::Device where) const {
  auto options = torch::TensorOptions().dtype(torch::kFloat32);
  if (where == launcher::Device::kCuda) {
    TORCH_CHECK(compute_.is_cuda(), "a CUDA backend on a rank that computes on the CPU (use --device auto or cuda)");
    return torch::empty(shape, options.device(compute_));
  }
  return torch::empty(shape, options.pinned_memory(streamed()));
}

torch::Tensor TransferStaging::WireZeros(at::IntArrayRef shape, launcher::Device where) const {
  return WireBuffer(shape, where).zero_();
}

torch::Tensor TransferStaging::ToWire(const torch::Tensor& t, launcher::Device where) {
  auto src = t.detach();
  if (where == launcher::Device::kCuda) {
    TORCH_CHECK(src.is_cuda(), "a CUDA backend needs the tensor on a CUDA device");
    return src.to(torch::kFloat32).contiguous();  // on the compute stream, as the backend expects
  }
  if (!src.is_cuda() || !streamed()) return src.to(torch::kCPU, torch::kFloat32).contiguous();
  // Device -> pinned host on the transfer stream, after what the compute
  // stream has queued so far; the host waits for this copy only.
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Stream compute_stream = impl.getStream(src.device());
  c10::Event ready(c10::DeviceType::CUDA);
  ready.record(compute_stream);
  ready.block(stream_->transfer);
  auto host = WireBuffer(src.sizes(), launcher::Device::kCpu);
  {
    c10::StreamGuard on_transfer(stream_->transfer);
    host.copy_(src, /*non_blocking=*/true);
  }
  stream_->transfer.synchronize();  // src may be freed by the caller after this
  return host;
}

torch::Tensor TransferStaging::ToCompute(const torch::Tensor& t) {
  if (!streamed() || t.is_cuda()) return t.to(compute_, torch::kFloat32);
  // Pinned host -> device on the transfer stream; the compute stream waits
  // on an event before its next kernel, the host not at all.
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  const c10::Stream compute_stream = impl.getStream(compute_);
  auto device = torch::empty(t.sizes(), torch::TensorOptions().dtype(torch::kFloat32).device(compute_));
  c10::Event reusable(c10::DeviceType::CUDA);  // the new buffer's earlier users on the compute stream are done
  reusable.record(compute_stream);
  reusable.block(stream_->transfer);
  {
    c10::StreamGuard on_transfer(stream_->transfer);
    device.copy_(t.to(torch::kFloat32), /*non_blocking=*/t.is_pinned());
  }
  c10::Event done(c10::DeviceType::CUDA);
  done.record(stream_->transfer);
  done.block(compute_stream);
  return device;
}

}  // namespace maestro::runtime
