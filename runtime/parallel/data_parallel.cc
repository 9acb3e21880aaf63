// SPDX-License-Identifier: Apache-2.0
#include "runtime/parallel/data_parallel.h"

#include "base/checks.h"
#include "runtime/collectives.h"
#include "runtime/tensor_buffer.h"

namespace maestro::runtime {

Status AllReduceGradients(launcher::Backend& dp, const std::vector<torch::Tensor>& params, double* blocked_seconds) {
  if (dp.group().size() <= 1) return Status::Ok();
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad().reshape({-1}));
  // fp32 (the gradients of fp32 master weights, also under bf16), on the
  // backend's device: staged through the host for MPI when they live on a GPU.
  auto flat = OnBackendDevice(torch::cat(grads), dp.device());
  MAESTRO_RETURN_IF_ERROR(TimedWait(dp.AllReduce(FloatBuffer(flat), launcher::ReduceOp::kSum), blocked_seconds));
  int64_t offset = 0;
  for (auto p : params) {
    const int64_t n = p.numel();
    p.mutable_grad().copy_(flat.slice(0, offset, offset + n).view_as(p));
    offset += n;
  }
  return Status::Ok();
}

}  // namespace maestro::runtime
