// SPDX-License-Identifier: Apache-2.0
// runtime/torch_compat.h's libtorch 2.x branch, compiled (-fsyntax-only) by
// ctest Build.TorchCompat2xCompiles against Debian 13's libtorch-dev
// headers (2.6), which scripts/setup.sh unpacks: CI builds and links against
// Debian 12's 1.13, so this is where the 2.x side of every #if is compiled.
// Each function uses one piece of the compatibility layer.
#include <torch/version.h>

#include "runtime/torch_compat.h"

static_assert(TORCH_VERSION_MAJOR >= 2, "this check must compile against libtorch 2.x headers");
static_assert(maestro::runtime::compat::kTorch2, "kTorch2 must be true on libtorch 2.x");

namespace maestro::runtime::compat {

torch::Tensor CheckAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  return ScaledDotProductAttention(q, k, v, /*causal=*/true) + ScaledDotProductAttention(q, k, v, false);
}

torch::Tensor CheckGelu(const torch::Tensor& x) {
  return Gelu(x);
}

torch::Tensor CheckGqa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  static_assert(kSdpaGqa, "Debian 13's libtorch 2.6 has enable_gqa");
  return GqaAttention(q, k, v, /*causal=*/true);
}

torch::Tensor CheckAutocast(const torch::Tensor& x, const torch::Tensor& w) {
  AutocastGuard cuda(torch::Device(torch::kCUDA, 0), true);
  AutocastGuard cpu(torch::kCPU, true);
  auto y = torch::linear(x, w);
  ClearAutocastCache();
  return y;
}

void CheckFusedAdamW(torch::optim::AdamW& optimizer) {
  if (FusedAdamWAvailable(torch::kCPU)) FusedAdamWStep(optimizer);
}

Optional<int64_t> CheckOptional(bool some) {
  if (!some) return std::nullopt;
  return int64_t{7};
}

}  // namespace maestro::runtime::compat
