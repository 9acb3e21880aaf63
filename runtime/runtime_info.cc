// SPDX-License-Identifier: Apache-2.0
#include "runtime/runtime_info.h"

#include <torch/torch.h>

#include <chrono>

namespace maestro::runtime {

RuntimeInfo GetRuntimeInfo() {
  RuntimeInfo info;
  info.torch_version = std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
                       std::to_string(TORCH_VERSION_PATCH);
  info.intra_op_threads = at::get_num_threads();
  info.cuda_available = torch::cuda::is_available();
  info.cuda_devices = info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  info.parallel_info = at::get_parallel_info();
  return info;
}

double MeasureMatmulGflops(int n) {
  torch::NoGradGuard no_grad;
  auto a = torch::randn({n, n});  // (n, n) fp32
  auto b = torch::randn({n, n});  // (n, n) fp32
  (void)torch::mm(a, b);          // warm-up
  const auto t0 = std::chrono::steady_clock::now();
  auto c = torch::mm(a, b);  // (n, n)
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  (void)c.sum().item<float>();
  return 2.0 * n * n * static_cast<double>(n) / s / 1e9;
}

}  // namespace maestro::runtime
