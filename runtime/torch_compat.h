// SPDX-License-Identifier: Apache-2.0
// The thin layer that lets the runtime build on Debian's libtorch 1.13 (CPU)
// and on libtorch 2.x with CUDA (what an installed PyTorch 2.x carries).
//
// Owns: the few spots where the two APIs differ. Everything else in runtime/
// uses the plain torch API that both versions share.
//   - compat::Optional<T>: c10::optional before 2.3, std::optional after
//     (c10::optional became an alias of std::optional in 2.3).
//   - compat::ScaledDotProductAttention: at::scaled_dot_product_attention on
//     2.x (flash / memory-efficient kernels on GPU); on 1.13, where only the
//     private at::_scaled_dot_product_attention exists, an explicit
//     matmul + softmax + causal mask, which is what that op computes anyway.
//   - compat::Gelu: exact GELU whose backward first makes the incoming
//     gradient contiguous. Debian's libtorch 1.13 returns wrong fp32 CPU
//     GELU gradients when the input is contiguous and the gradient is not
//     (e.g. GELU followed by a transpose, as in the audio conv stem); fp64
//     and the other activations are fine. Measured, see runtime/README.md.
//   - Not used anywhere: torch::nn::TransformerEncoder (no batch_first in
//     1.13) and torch::nn::MultiheadAttention ((T, B, C) layout in 1.13); the
//     models build their blocks from linear / layer_norm / attention instead.
// May call: libtorch. Included ONLY from runtime/*.cc and runtime-internal
// headers (it pulls in <torch/torch.h>). Thread-safety: stateless functions.
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <optional>

namespace maestro::runtime::compat {

inline constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
template <typename T>
using Optional = std::optional<T>;
#else
template <typename T>
using Optional = c10::optional<T>;
#endif

// Softmax attention over heads.
// q: (B, H, T, D); k, v: (B, H, S, D), same dtype and device; returns
// (B, H, T, D). Scale 1/sqrt(D). causal: query t attends to keys
// s <= t + (S - T) (the usual lower-triangular mask when S == T).
// No dropout (the models here train without attention dropout).
inline torch::Tensor ScaledDotProductAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                               bool causal) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal);
#else
  const int64_t t = q.size(-2);
  const int64_t s = k.size(-2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto scores = torch::matmul(q, k.transpose(-2, -1)) * scale;  // (B, H, T, S)
  if (causal) {
    auto future = torch::ones({t, s}, torch::TensorOptions().dtype(torch::kBool).device(q.device()))
                      .triu(s - t + 1);  // (T, S): true where the key lies in the future
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  }
  auto probs = torch::softmax(scores, -1);  // (B, H, T, S)
  return torch::matmul(probs, v);           // (B, H, T, D)
#endif
}

namespace internal {
struct GeluWithContiguousGrad : public torch::autograd::Function<GeluWithContiguousGrad> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    ctx->save_for_backward({x});
    return at::gelu(x);
  }
  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {at::gelu_backward(grads[0].contiguous(), saved[0])};
  }
};
}  // namespace internal

// x: any shape -> same shape, exact (erf) GELU. Same values as torch::gelu;
// the gradient is right whatever the layout of the incoming gradient.
inline torch::Tensor Gelu(const torch::Tensor& x) {
  if (!x.requires_grad() || !torch::GradMode::is_enabled()) return at::gelu(x);
  return internal::GeluWithContiguousGrad::apply(x);
}

}  // namespace maestro::runtime::compat
