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
//   - compat::AutocastGuard: autocast to bf16 on a device (CUDA or CPU) for
//     a scope: 1.13's per-device setters (set_enabled / set_cpu_enabled,
//     set_autocast_gpu_dtype / _cpu_dtype) or 2.x's set_autocast_enabled /
//     set_autocast_dtype(device_type, ...) (the old names are deprecated in
//     2.4+, warnings are errors here). The weight-cast cache is kept across
//     scopes until ClearAutocastCache (the optimizer step, a model load).
//   - compat::AutocastState / GetAutocastState / SetAutocastState: one
//     device type's autocast state (on, dtype, weight-cast cache) captured
//     and replayed (activation recomputation, runtime/recompute.h).
//   - compat::GqaAttention: SDPA with fewer kv heads than query heads;
//     `enable_gqa` inside at::scaled_dot_product_attention from 2.5 (no
//     repeat_interleave copies; kSdpaGqa), else repeat_interleave + SDPA.
//   - compat::FusedAdamWStep: torch::optim::AdamW's step as one
//     at::_fused_adamw_ over all parameters (CUDA from 2.1, CPU from 2.4:
//     FusedAdamWAvailable), on the optimizer's own state, so checkpoints are
//     the same archives. Not on 1.13 (no such op).
//   - Not used anywhere: torch::nn::TransformerEncoder (no batch_first in
//     1.13) and torch::nn::MultiheadAttention ((T, B, C) layout in 1.13); the
//     models build their blocks from linear / layer_norm / attention instead.
// May call: libtorch. Included ONLY from runtime/*.cc and runtime-internal
// headers (it pulls in <torch/torch.h>). Thread-safety: stateless functions.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace maestro::runtime::compat {

inline constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;
#define MAESTRO_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))
// enable_gqa in at::scaled_dot_product_attention (2.5+).
inline constexpr bool kSdpaGqa = MAESTRO_TORCH_AT_LEAST(2, 5);

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

// q: (B, H, T, D); k, v: (B, K, S, D) with H a multiple of K: kv head j
// serves query heads j*H/K .. (j+1)*H/K - 1 (Llama's repeat_kv). Returns
// (B, H, T, D), as ScaledDotProductAttention on k, v repeated to H heads.
inline torch::Tensor GqaAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
  const int64_t heads = q.size(1), kv_heads = k.size(1);
  if (heads == kv_heads) return ScaledDotProductAttention(q, k, v, causal);
#if MAESTRO_TORCH_AT_LEAST(2, 5)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal, /*scale=*/{},
                                          /*enable_gqa=*/true);
#else
  return ScaledDotProductAttention(q, k.repeat_interleave(heads / kv_heads, 1),
                                   v.repeat_interleave(heads / kv_heads, 1), causal);
#endif
}

// Autocast to bf16 on `device` (CUDA or CPU) while alive, when `enabled`;
// restores the previous state. Ops in autocast's lower-precision list
// (linear, matmul, conv...) run in bf16, the rest as their inputs say.
// Casts of weights (leaves that require grad) are cached until
// ClearAutocastCache(): callers clear it whenever weights change.
class AutocastGuard {
 public:
  AutocastGuard(const torch::Device& device, bool enabled) : cuda_(device.is_cuda()), enabled_(enabled) {
    if (!enabled_) return;
    was_enabled_ = IsEnabled();
    was_dtype_ = Dtype();
    Set(true, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (!enabled_) return;
    at::autocast::decrement_nesting();  // the cache stays until ClearAutocastCache
    Set(was_enabled_, was_dtype_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
#if MAESTRO_TORCH_AT_LEAST(2, 4)
  at::DeviceType Type() const {
    return cuda_ ? at::kCUDA : at::kCPU;
  }
  bool IsEnabled() const {
    return at::autocast::is_autocast_enabled(Type());
  }
  at::ScalarType Dtype() const {
    return at::autocast::get_autocast_dtype(Type());
  }
  void Set(bool on, at::ScalarType dtype) const {
    at::autocast::set_autocast_dtype(Type(), dtype);
    at::autocast::set_autocast_enabled(Type(), on);
  }
#else
  bool IsEnabled() const {
    return cuda_ ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
  }
  at::ScalarType Dtype() const {
    return cuda_ ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
  }
  void Set(bool on, at::ScalarType dtype) const {
    if (cuda_) {
      at::autocast::set_autocast_gpu_dtype(dtype);
      at::autocast::set_enabled(on);
    } else {
      at::autocast::set_autocast_cpu_dtype(dtype);
      at::autocast::set_cpu_enabled(on);
    }
  }
#endif
  bool cuda_;
  bool enabled_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

// The autocast state of one device type (CUDA or CPU): whether it is on,
// its lower-precision dtype and whether weight casts are cached. Activation
// recomputation (runtime/recompute.cc) replays a forward's state in backward.
struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kBFloat16;
  bool cache_enabled = true;
};
inline AutocastState GetAutocastState(const torch::Device& device) {
  AutocastState s;
#if MAESTRO_TORCH_AT_LEAST(2, 4)
  const at::DeviceType type = device.is_cuda() ? at::kCUDA : at::kCPU;
  s.enabled = at::autocast::is_autocast_enabled(type);
  s.dtype = at::autocast::get_autocast_dtype(type);
#else
  s.enabled = device.is_cuda() ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
  s.dtype = device.is_cuda() ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
#endif
  s.cache_enabled = at::autocast::is_autocast_cache_enabled();
  return s;
}
inline void SetAutocastState(const torch::Device& device, const AutocastState& s) {
#if MAESTRO_TORCH_AT_LEAST(2, 4)
  const at::DeviceType type = device.is_cuda() ? at::kCUDA : at::kCPU;
  at::autocast::set_autocast_dtype(type, s.dtype);
  at::autocast::set_autocast_enabled(type, s.enabled);
#else
  if (device.is_cuda()) {
    at::autocast::set_autocast_gpu_dtype(s.dtype);
    at::autocast::set_enabled(s.enabled);
  } else {
    at::autocast::set_autocast_cpu_dtype(s.dtype);
    at::autocast::set_cpu_enabled(s.enabled);
  }
#endif
  at::autocast::set_autocast_cache_enabled(s.cache_enabled);
}

// Drops autocast's cached bf16 casts of weights (after an optimizer step or
// a load changed them). Cheap when empty.
inline void ClearAutocastCache() {
  at::autocast::clear_cache();
}

namespace internal {
// The key of a parameter's state in torch::optim: its TensorImpl's address,
// as a string before 2.x (c10::guts::to_string) and as a pointer since.
template <typename Optim>
auto StateKey(Optim& optimizer, const torch::Tensor& p) {
  using Key = typename std::decay_t<decltype(optimizer.state())>::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream os;
    os << p.unsafeGetTensorImpl();
    return os.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}
}  // namespace internal

// The AdamW state of parameter `p`: nullptr when it has none (never stepped).
inline torch::optim::AdamWParamState* FindAdamWState(torch::optim::AdamW& optimizer, const torch::Tensor& p) {
  auto it = optimizer.state().find(internal::StateKey(optimizer, p));
  if (it == optimizer.state().end() || !it->second) return nullptr;
  return static_cast<torch::optim::AdamWParamState*>(it->second.get());
}
// ... created as AdamW's step() creates it (zero moments, step 0) when missing.
inline torch::optim::AdamWParamState& AdamWStateOf(torch::optim::AdamW& optimizer, const torch::Tensor& p) {
  auto& slot = optimizer.state()[internal::StateKey(optimizer, p)];
  if (!slot) {
    auto state = std::make_unique<torch::optim::AdamWParamState>();
    state->step(0);
    state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    slot = std::move(state);
  }
  return static_cast<torch::optim::AdamWParamState&>(*slot);
}

// True when FusedAdamWStep runs on parameters on `device`.
inline bool FusedAdamWAvailable(const torch::Device& device) {
#if MAESTRO_TORCH_AT_LEAST(2, 4)
  return device.is_cuda() || device.is_cpu();
#elif MAESTRO_TORCH_AT_LEAST(2, 1)
  return device.is_cuda();
#else
  (void)device;
  return false;
#endif
}

// One step of `optimizer` (betas, eps, weight decay and lr of each group,
// no amsgrad) as at::_fused_adamw_ over every parameter with a gradient:
// the same update as optimizer.step() (decoupled weight decay, bias
// corrections), on the optimizer's state (created as its step() would), so
// SaveOptimizer / LoadOptimizer are unchanged. Parameters, gradients and
// moments: fp32 on one device. REQUIRES: FusedAdamWAvailable(that device).
inline void FusedAdamWStep(torch::optim::AdamW& optimizer) {
#if MAESTRO_TORCH_AT_LEAST(2, 1)
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!o.amsgrad(), "FusedAdamWStep: amsgrad is not used here");
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs;
    std::vector<int64_t> steps;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      torch::optim::AdamWParamState& state = AdamWStateOf(optimizer, p);
      state.step(state.step() + 1);
      params.push_back(p);
      grads.push_back(p.grad());
      exp_avgs.push_back(state.exp_avg());
      exp_avg_sqs.push_back(state.exp_avg_sq());
      steps.push_back(state.step());
    }
    if (params.empty()) continue;
    // The kernel reads each parameter's step count (already incremented) from
    // an fp32 scalar on the parameters' device; equal counts share one tensor.
    std::map<int64_t, torch::Tensor> step_tensors;
    std::vector<torch::Tensor> state_steps;
    for (int64_t s : steps) {
      auto& t = step_tensors[s];
      if (!t.defined()) {
        t = torch::full({}, static_cast<double>(s),
                        torch::TensorOptions().dtype(torch::kFloat32).device(params[0].device()));
      }
      state_steps.push_back(t);
    }
    at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/at::TensorList(), state_steps, o.lr(),
                      std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(), /*amsgrad=*/false,
                      /*maximize=*/false);
  }
#else
  (void)optimizer;
  TORCH_CHECK(false, "FusedAdamWStep needs libtorch 2.1 or later");
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
