// SPDX-License-Identifier: Apache-2.0
#include "runtime/parallel/context_parallel.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "plan/runtime_support.h"
#include "runtime/collectives.h"

namespace maestro::runtime {

namespace {

// A contiguous fp32, bf16 or fp16 tensor as a launcher buffer (the wire
// carries K and V in the activations' dtype, as the cost model prices it).
launcher::Buffer WireBuffer(const torch::Tensor& t) {
  launcher::DType dtype = launcher::DType::kF32;
  switch (t.scalar_type()) {
    case torch::kFloat32: dtype = launcher::DType::kF32; break;
    case torch::kBFloat16: dtype = launcher::DType::kBF16; break;
    case torch::kFloat16: dtype = launcher::DType::kF16; break;
    default: TORCH_CHECK(false, "GatherSequence: fp32, bf16 or fp16 tensors only, got ", t.scalar_type());
  }
  return launcher::Buffer{t.data_ptr(), static_cast<size_t>(t.numel()), dtype,
                          t.is_cuda() ? launcher::Device::kCuda : launcher::Device::kCpu};
}

// `t` contiguous where `group`'s backend takes its buffers (host for MPI),
// in its own dtype.
torch::Tensor OnWire(const torch::Tensor& t, launcher::Backend& group) {
  if (group.device() == launcher::Device::kCpu) return t.to(torch::kCPU).contiguous();
  return (t.is_cuda() ? t : t.to(torch::Device(torch::kCUDA))).contiguous();
}

// x: [n, rest...] contiguous on the backend's device -> [G*n, rest...].
torch::Tensor AllGatherRows(const torch::Tensor& x, launcher::Backend& cp) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] *= cp.group().size();
  auto out = torch::empty(shape, x.options());
  Status s = Wait(cp.AllGather(WireBuffer(x), WireBuffer(out)));
  if (!s.ok()) throw std::runtime_error(s.ToString());
  return out;
}

// x: [G*n, rest...] contiguous on the backend's device -> [n, rest...], the
// sum over the group of block `my_index`.
torch::Tensor ReduceScatterRows(const torch::Tensor& x, launcher::Backend& cp) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape[0] /= cp.group().size();
  auto out = torch::empty(shape, x.options());
  Status s = Wait(cp.ReduceScatter(WireBuffer(x), WireBuffer(out), launcher::ReduceOp::kSum));
  if (!s.ok()) throw std::runtime_error(s.ToString());
  return out;
}

struct GatherSequenceFunction : public torch::autograd::Function<GatherSequenceFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& local, int64_t dim,
                               int64_t cp) {
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["cp"] = cp;
    auto& group = *reinterpret_cast<launcher::Backend*>(cp);
    auto gathered = AllGatherRows(OnWire(local.movedim(dim, 0), group), group);  // [G*n, rest...]
    return gathered.to(local.device()).movedim(0, dim).contiguous();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const int64_t dim = ctx->saved_data["dim"].toInt();
    auto& group = *reinterpret_cast<launcher::Backend*>(ctx->saved_data["cp"].toInt());
    const auto& grad = grads[0];                                                // [..., G*n, ...]
    auto mine = ReduceScatterRows(OnWire(grad.movedim(dim, 0), group), group);  // [n, rest...]
    return {mine.to(grad.device()).movedim(0, dim).contiguous(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor GatherSequence(const torch::Tensor& local, int64_t dim, launcher::Backend& cp) {
  if (cp.group().size() == 1) return local;
  const int64_t d = dim < 0 ? dim + local.dim() : dim;
  TORCH_CHECK(d >= 0 && d < local.dim(), "GatherSequence: dim ", dim, " out of range for a ", local.dim(), "-d tensor");
  return GatherSequenceFunction::apply(local, d, reinterpret_cast<int64_t>(&cp));
}

torch::Tensor GatherWholeSequence(const torch::Tensor& local, int64_t dim, launcher::Backend& cp) {
  const int cp_size = cp.group().size();
  if (cp_size == 1) return local;
  const int64_t d = dim < 0 ? dim + local.dim() : dim;
  auto gathered = GatherSequence(local, d, cp);  // rank order
  auto inverse = torch::argsort(GatheredContextParallelPositions(gathered.size(d), cp_size)).to(local.device());
  return gathered.index_select(d, inverse);
}

torch::Tensor ContextParallelPositions(int64_t seq_len, int cp_size, int cp_rank) {
  const std::string error = plan::ContextParallelSplitError(seq_len, cp_size);
  TORCH_CHECK(error.empty(), error);
  auto opts = torch::TensorOptions().dtype(torch::kInt64);
  if (cp_size == 1) return torch::arange(seq_len, opts);
  const int64_t chunk = seq_len / (2 * cp_size);
  const int64_t first = cp_rank * chunk, second = (2 * cp_size - 1 - cp_rank) * chunk;
  return torch::cat({torch::arange(first, first + chunk, opts), torch::arange(second, second + chunk, opts)});
}

torch::Tensor GatheredContextParallelPositions(int64_t seq_len, int cp_size) {
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < cp_size; ++r) parts.push_back(ContextParallelPositions(seq_len, cp_size, r));
  return torch::cat(parts);
}

torch::Tensor SplitSequenceForContextParallel(const torch::Tensor& full, int64_t dim, int cp_size, int cp_rank) {
  if (cp_size == 1) return full;
  auto index = ContextParallelPositions(full.size(dim), cp_size, cp_rank).to(full.device());
  return full.index_select(dim, index);
}

torch::Tensor JoinContextParallelParts(const std::vector<torch::Tensor>& parts, int64_t dim) {
  const int cp_size = static_cast<int>(parts.size());
  if (cp_size == 1) return parts[0];
  auto gathered = torch::cat(parts, dim);  // rank order: GatheredContextParallelPositions
  const int64_t seq_len = gathered.size(dim);
  // gathered[j] holds position perm[j]; full[perm[j]] = gathered[j] -> full = gathered[argsort(perm)].
  auto inverse = torch::argsort(GatheredContextParallelPositions(seq_len, cp_size)).to(gathered.device());
  return gathered.index_select(dim, inverse);
}

}  // namespace maestro::runtime
