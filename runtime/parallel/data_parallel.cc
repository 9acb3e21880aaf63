// SPDX-License-Identifier: Apache-2.0
// The bucketed gradient all-reduce (data_parallel.h). May call: launcher,
// plan, runtime/collectives, runtime/tensor_buffer, libtorch.
#include "runtime/parallel/data_parallel.h"

#include <algorithm>
#include <cstdlib>

#include "base/checks.h"
#include "runtime/collectives.h"
#include "runtime/tensor_buffer.h"
#include "runtime/torch_call.h"

namespace maestro::runtime {

int64_t GradientBucketBytes() {
  if (const char* v = std::getenv("MAESTRO_GRADIENT_BUCKET_BYTES")) {
    const long long n = std::atoll(v);
    if (n > 0) return static_cast<int64_t>(n);
  }
  return plan::kGradientBucketBytes;
}

int64_t GradientBucketCount(int64_t elements, int64_t bucket_bytes) {
  const int64_t capacity = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)));
  return (elements + capacity - 1) / capacity;
}

Status AllReduceGradients(launcher::Backend& group, const std::vector<torch::Tensor>& params, double* blocked_seconds,
                          int64_t bucket_bytes) {
  if (group.group().size() <= 1 || params.empty()) return Status::Ok();
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  if (total == 0) return Status::Ok();
  const int64_t capacity = std::clamp<int64_t>(bucket_bytes / static_cast<int64_t>(sizeof(float)), 1, total);
  // One slice of one gradient in the bucket: params[param] elements
  // [from, from + count) at bucket offset `at`.
  struct Slice {
    size_t param;
    int64_t from, count, at;
  };
  torch::NoGradGuard no_grad;
  // fp32 (the gradients of fp32 master weights, also under bf16), on the
  // backend's device: host memory for MPI when the gradients live on a GPU.
  torch::Tensor bucket;
  MAESTRO_RETURN_IF_ERROR(TorchCall("the gradient all-reduce's bucket", [&] {
    auto options = torch::TensorOptions().dtype(torch::kFloat32);
    if (group.device() == launcher::Device::kCuda) {
      options = options.device(params.front().grad().is_cuda() ? params.front().grad().device()
                                                               : torch::Device(torch::kCUDA));
    }
    bucket = torch::empty({capacity}, options);
  }));
  std::vector<Slice> slices;
  int64_t filled = 0;
  const auto flush = [&]() -> Status {
    if (filled == 0) return Status::Ok();
    auto used = bucket.narrow(0, 0, filled);
    MAESTRO_RETURN_IF_ERROR(TimedWait(group.AllReduce(FloatBuffer(used), launcher::ReduceOp::kSum), blocked_seconds));
    MAESTRO_RETURN_IF_ERROR(TorchCall("the gradient all-reduce's copy back", [&] {
      for (const Slice& s : slices) {
        params[s.param].grad().view({-1}).narrow(0, s.from, s.count).copy_(used.narrow(0, s.at, s.count));
      }
    }));
    slices.clear();
    filled = 0;
    return Status::Ok();
  };
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor param = params[i];
    if (!param.grad().is_contiguous()) param.mutable_grad() = param.grad().contiguous();  // written back through views
    const torch::Tensor& grad = param.grad();
    const int64_t n = grad.numel();
    for (int64_t from = 0; from < n;) {
      const int64_t count = std::min(n - from, capacity - filled);
      MAESTRO_RETURN_IF_ERROR(TorchCall("the gradient all-reduce's packing", [&] {
        bucket.narrow(0, filled, count).copy_(grad.view({-1}).narrow(0, from, count));
      }));
      slices.push_back(Slice{i, from, count, filled});
      filled += count;
      from += count;
      if (filled == capacity) MAESTRO_RETURN_IF_ERROR(flush());
    }
  }
  return flush();
}

}  // namespace maestro::runtime
