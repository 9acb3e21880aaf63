// SPDX-License-Identifier: Apache-2.0
// Activation recomputation: the autograd function (runtime/recompute.h).
#include "runtime/recompute.h"

#include <utility>

#include "runtime/torch_compat.h"

namespace maestro::runtime {

namespace {

// What backward needs besides the saved inputs: the function and the
// forward's autocast state on the inputs' device.
struct RecomputeClosure : torch::CustomClassHolder {
  RecomputedForward forward;
  torch::Device device = torch::kCPU;
  compat::AutocastState autocast;
};

// Sets one device type's autocast state for a scope and restores the
// previous one.
class ScopedAutocastState {
 public:
  ScopedAutocastState(const torch::Device& device, const compat::AutocastState& state)
      : device_(device), previous_(compat::GetAutocastState(device)) {
    compat::SetAutocastState(device_, state);
  }
  ~ScopedAutocastState() { compat::SetAutocastState(device_, previous_); }
  ScopedAutocastState(const ScopedAutocastState&) = delete;
  ScopedAutocastState& operator=(const ScopedAutocastState&) = delete;

 private:
  torch::Device device_;
  compat::AutocastState previous_;
};

class RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
 public:
  // inputs: the recomputed function's; returns its output (grad-free inside).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                               const c10::intrusive_ptr<RecomputeClosure>& closure) {
    compat::AutocastState no_cache = closure->autocast;
    no_cache.cache_enabled = false;  // no grad-free weight cast may enter the cache (recompute.h)
    torch::Tensor out;
    {
      ScopedAutocastState autocast(closure->device, no_cache);
      torch::NoGradGuard no_grad;
      out = closure->forward(inputs.vec());
    }
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["closure"] = c10::IValue::make_capsule(closure);
    return out;
  }

  // grad_outputs: (1) the output's gradient -> one gradient per input, then
  // none for the closure.
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto closure = ctx->saved_data["closure"].toCapsule();
    auto* c = static_cast<RecomputeClosure*>(closure.get());
    const auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> inputs;
    inputs.reserve(saved.size());
    for (size_t i = 0; i < saved.size(); ++i) {
      inputs.push_back(saved[i].detach().requires_grad_(ctx->needs_input_grad(i)));
    }
    torch::Tensor out;
    {
      torch::AutoGradMode grad(true);
      ScopedAutocastState autocast(c->device, c->autocast);
      out = c->forward(inputs);
    }
    if (out.requires_grad() && grad_outputs[0].defined()) {
      torch::autograd::backward({out}, {grad_outputs[0]});
    }
    torch::autograd::variable_list grads;
    for (auto& input : inputs) grads.push_back(input.requires_grad() ? input.grad() : torch::Tensor());
    grads.emplace_back();  // the closure
    return grads;
  }
};

}  // namespace

torch::Tensor RunRecomputed(RecomputedForward forward, const std::vector<torch::Tensor>& inputs) {
  TORCH_CHECK(!inputs.empty(), "RunRecomputed: no inputs");
  bool any_grad = false;
  for (const auto& t : inputs) any_grad = any_grad || t.requires_grad();
  if (!torch::GradMode::is_enabled() || !any_grad) return forward(inputs);
  auto closure = c10::make_intrusive<RecomputeClosure>();
  closure->forward = std::move(forward);
  closure->device = inputs.front().device();
  closure->autocast = compat::GetAutocastState(closure->device);
  return RecomputeFunction::apply(at::TensorList(inputs), closure);
}

}  // namespace maestro::runtime
