// SPDX-License-Identifier: Apache-2.0
// Activation recomputation (plan::RecomputeGranularity; Korthikanti et al.
// 2022, "Reducing Activation Recomputation in Large Transformer Models"):
// a piece of a model's forward run without keeping its autograd graph and
// run again, with grad, right before its backward.
//
// Owns: RunRecomputed, a custom torch::autograd::Function. Forward runs
// `forward` with grad off (autograd keeps nothing inside it) and saves only
// its inputs; backward re-runs `forward` on detached copies of the inputs
// with grad on and the forward's autocast state (enabled, dtype), calls
// backward on the result with the incoming gradient (reentrant, as
// torch.utils.checkpoint's reentrant variant): parameter gradients
// accumulate as usual, the inputs' gradients are returned. The models wrap
// their block calls with it (full: DecoderLM / VitEncoder / AudioEncoder
// SetRecompute) or their attention core (selective).
//
// Composes with:
//   - TP: a decoder block's forward calls EnterTensorParallel /
//     LeaveTensorParallel (runtime/parallel/tensor_parallel.h); the
//     recomputation runs its all-reduces again, in backward, in the same
//     order on every TP rank (autograd's order is the same on each).
//   - bf16 autocast: the first, grad-free forward runs with autocast's weight
//     cache off, so that it never caches a bf16 weight cast without a
//     gradient path back to the fp32 master (the recomputation would then read
//     it and drop the weight's gradient); the recomputation caches as usual.
//   - Randomness: the models have none (no dropout; MoE routing is a
//     deterministic top-k), so no RNG state is saved or restored.
// When grad mode is off or no input requires grad, `forward` is simply
// called (nothing to save: a forward-only section, an evaluation).
// `forward` must outlive the backward (it captures the model's modules by
// pointer and non-differentiable tables by value).
// May call: libtorch, runtime/torch_compat.h. Runtime-internal: includes
// torch; only runtime/*.cc and tests/runtime include it.
// Thread safety: one thread per model, as the models.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

namespace maestro::runtime {

// The recomputed function: its inputs (the tensors RunRecomputed saves) ->
// one output tensor that is not a view of an input.
using RecomputedForward = std::function<torch::Tensor(const std::vector<torch::Tensor>& inputs)>;

// inputs: any shapes, at least one; returns forward(inputs) (its shape),
// whose backward recomputes `forward` as above.
torch::Tensor RunRecomputed(RecomputedForward forward, const std::vector<torch::Tensor>& inputs);

}  // namespace maestro::runtime
