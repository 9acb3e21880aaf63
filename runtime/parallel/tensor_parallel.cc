// SPDX-License-Identifier: Apache-2.0
#include "runtime/parallel/tensor_parallel.h"

#include <stdexcept>
#include <vector>

#include "runtime/collectives.h"
#include "runtime/tensor_buffer.h"

namespace maestro::runtime {

namespace {

struct EnterTp : public torch::autograd::Function<EnterTp> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int64_t tp) {
    ctx->saved_data["tp"] = tp;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* tp = reinterpret_cast<TensorParallelReducer*>(ctx->saved_data["tp"].toInt());
    // Summed in fp32 (bf16 activations under autocast), returned in their dtype.
    auto g = grads[0].to(torch::kFloat32).contiguous().clone();
    tp->AllReduceSum(g);
    return {g.to(grads[0].scalar_type()), torch::Tensor()};
  }
};

struct LeaveTp : public torch::autograd::Function<LeaveTp> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& y, int64_t tp) {
    auto out = y.to(torch::kFloat32).contiguous().clone();  // partial sums added in fp32
    reinterpret_cast<TensorParallelReducer*>(tp)->AllReduceSum(out);
    return out.to(y.scalar_type());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

}  // namespace

torch::Tensor EnterTensorParallel(const torch::Tensor& x, TensorParallelReducer* tp) {
  if (tp == nullptr || tp->size() == 1) return x;
  return EnterTp::apply(x, reinterpret_cast<int64_t>(tp));
}

torch::Tensor LeaveTensorParallel(const torch::Tensor& y, TensorParallelReducer* tp) {
  if (tp == nullptr || tp->size() == 1) return y;
  return LeaveTp::apply(y, reinterpret_cast<int64_t>(tp));
}

torch::Tensor TensorParallelShardOf(const torch::Tensor& full, TensorParallelSplit split, int rank, int size) {
  if (!split.sharded() || size == 1) return full;
  const int64_t block = full.size(split.dim) / split.parts, slice = block / size;
  if (split.parts == 1) return full.narrow(split.dim, rank * slice, slice);
  std::vector<torch::Tensor> slices;
  for (int p = 0; p < split.parts; ++p) slices.push_back(full.narrow(split.dim, p * block + rank * slice, slice));
  return torch::cat(slices, split.dim);
}

void PlaceTensorParallelShard(torch::Tensor& whole, const torch::Tensor& shard, TensorParallelSplit split, int rank) {
  const int64_t block = whole.size(split.dim) / split.parts, slice = shard.size(split.dim) / split.parts;
  for (int p = 0; p < split.parts; ++p) {
    whole.narrow(split.dim, p * block + rank * slice, slice).copy_(shard.narrow(split.dim, p * slice, slice));
  }
}

void GroupReducer::AllReduceSum(torch::Tensor& t) {
  TORCH_CHECK(t.is_contiguous() && t.scalar_type() == torch::kFloat32, "TP all-reduce needs contiguous fp32");
  auto wire = OnBackendDevice(t, group_.device());  // t itself unless a GPU tensor meets an MPI group
  Status s = Wait(group_.AllReduce(FloatBuffer(wire), launcher::ReduceOp::kSum));
  if (!s.ok()) throw std::runtime_error(s.ToString());
  CopyBackFromBackend(t, wire);
}

}  // namespace maestro::runtime
