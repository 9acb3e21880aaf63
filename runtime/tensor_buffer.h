// SPDX-License-Identifier: Apache-2.0
// fp32 tensors as launcher buffers: what activations, gradients and the TP
// and DP all-reduces hand to a launcher Backend or LinkChannel.
// Runtime-internal (torch). May call: launcher, libtorch.
#pragma once

#include <torch/torch.h>

#include "launcher/comm.h"

namespace maestro::runtime {

// A CPU buffer over a contiguous fp32 tensor `t` (any shape).
inline launcher::Buffer FloatBuffer(const torch::Tensor& t) {
  return launcher::Buffer{t.data_ptr(), static_cast<size_t>(t.numel()), launcher::DType::kF32, launcher::Device::kCpu};
}

}  // namespace maestro::runtime
