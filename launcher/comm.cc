// SPDX-License-Identifier: Apache-2.0
#include "launcher/comm.h"

#include <fmt/format.h>

namespace maestro::launcher {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kF64: return 8;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 1;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

const char* DeviceName(Device device) {
  return device == Device::kCpu ? "cpu" : "cuda";
}

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

Buffer Buffer::Slice(size_t offset, size_t n) const {
  Buffer b = *this;
  b.data = static_cast<char*>(data) + offset * DTypeSize(dtype);
  b.count = n;
  return b;
}

StatusOr<WorkPtr> Backend::AllToAll(Buffer /*in*/, Buffer /*out*/) {
  return Unsupported("all_to_all");
}

Status Backend::Unsupported(const char* op) const {
  return Status::FailedPrecondition(
      fmt::format("backend {} does not support {} (on {})", name(), op, group().description));
}

Status CheckBlockShapes(const char* op, const GroupInfo& group, const Buffer& small, const Buffer& big) {
  if (big.count != small.count * static_cast<size_t>(group.size()) || big.dtype != small.dtype) {
    return Status::InvalidArgument(fmt::format("{} on {}: the larger buffer must be {} x {} {} elements, got {} {}", op,
                                               group.description, group.size(), small.count, DTypeName(small.dtype),
                                               big.count, DTypeName(big.dtype)));
  }
  return Status::Ok();
}

Status CheckAllToAllShapes(const GroupInfo& group, const Buffer& in, const Buffer& out) {
  const size_t g = static_cast<size_t>(group.size());
  if (in.count != out.count || in.dtype != out.dtype || in.count % g != 0) {
    return Status::InvalidArgument(
        fmt::format("all_to_all on {}: in and out must both be {} blocks of one size and dtype, got {} {} and {} {}",
                    group.description, g, in.count, DTypeName(in.dtype), out.count, DTypeName(out.dtype)));
  }
  return Status::Ok();
}

Status Complete(StatusOr<WorkPtr> work) {
  if (!work.ok()) return work.status();
  return (*work)->Wait();
}

}  // namespace maestro::launcher
