// SPDX-License-Identifier: Apache-2.0
// fp32 tensors as launcher buffers: what activations, gradients and the TP
// and DP all-reduces hand to a launcher Backend or LinkChannel.
// Runtime-internal (torch). May call: launcher, libtorch.
#pragma once

#include <torch/torch.h>

#include "launcher/comm.h"

namespace maestro::runtime {

// A buffer over a contiguous fp32 tensor `t` (any shape), on the CPU or on
// a CUDA device as `t` is.
inline launcher::Buffer FloatBuffer(const torch::Tensor& t) {
  TORCH_CHECK(t.is_contiguous() && t.scalar_type() == torch::kFloat32, "a launcher buffer needs contiguous fp32, got ",
              t.scalar_type());
  return launcher::Buffer{t.data_ptr(), static_cast<size_t>(t.numel()), launcher::DType::kF32,
                          t.is_cuda() ? launcher::Device::kCuda : launcher::Device::kCpu};
}

// `t` as a contiguous fp32 tensor where a backend takes its buffers:
// `where` = kCpu: host memory; kCuda: `t`'s CUDA device, or the current one
// (runtime/device_staging.h UseDevice) for a CPU tensor. `t` itself when it
// already is one (then the backend works in place); otherwise a copy,
// complete when this returns (synchronous), for the caller to copy back
// after the operation (CopyBackFromBackend).
inline torch::Tensor OnBackendDevice(const torch::Tensor& t, launcher::Device where) {
  if (where == launcher::Device::kCpu) return t.to(torch::kCPU, torch::kFloat32).contiguous();
  return (t.is_cuda() ? t.to(torch::kFloat32) : t.to(torch::Device(torch::kCUDA), torch::kFloat32)).contiguous();
}

// After an in-place operation on `wire` = OnBackendDevice(t, ...): its
// result into `t` (nothing when they share their memory).
inline void CopyBackFromBackend(torch::Tensor& t, const torch::Tensor& wire) {
  if (wire.data_ptr() != t.data_ptr() || wire.device() != t.device()) {
    torch::NoGradGuard no_grad;
    t.copy_(wire);
  }
}

}  // namespace maestro::runtime
