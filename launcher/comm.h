// SPDX-License-Identifier: Apache-2.0
// The communication interface of Maestro, in the shape of PyTorch c10d:
//   Buffer  : a raw tensor view (pointer, element count, dtype, device).
//   Work    : the handle of an asynchronous operation; WaitFor(timeout).
//   Backend : collectives and point-to-point over ONE group of ranks.
// Implementations: MpiBackend (mpi_backend.h; CPU buffers, Open MPI) and
// NcclBackend (nccl_backend.h; CUDA buffers, built with MAESTRO_HAVE_NCCL).
// Communicators (communicators.h) builds one Backend per group of the plan.
//
// Shapes. `n` is a Buffer's element count, `G` the group size:
//   AllReduce(buf)            buf (n) in place, element-wise over the group
//   AllGather(in, out)        in (n) -> out (G*n); rank i's part at [i*n, (i+1)*n)
//   ReduceScatter(in, out)    in (G*n) -> out (n); rank i gets the reduction of block i
//   Broadcast(buf, root)      buf (n) from group rank `root` to everyone
//   AllToAll(in, out)         in (G*n) -> out (G*n); block j of rank i's in
//                             lands in block i of rank j's out (expert parallelism)
//   Send/Recv(buf, peer, tag) buf (n) to/from group rank `peer`
// Group ranks are indices into GroupInfo::ranks, not global ranks.
//
// Timeouts and failures. Every Work is waited on with a deadline. When it
// passes, WaitFor returns kTimeout with a message naming this rank, the
// group ("dp group of section 'llm' (ranks 2,4)"), the operation
// ("all_reduce of 4 MiB") and what the group's other ranks were doing (or
// that they did not answer). After a timeout the group is unusable: the
// caller reports the error and ends the job (failure.h: AbortJob).
//
// Operations a backend lacks. Backend's own implementation of an optional
// operation (AllToAll today) returns kFailedPrecondition "backend X does not
// support Y" (the c10d way), so a new operation does not touch every backend.
//
// Thread safety: a Backend and its Work objects are used by one thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/units.h"

namespace maestro::launcher {

enum class DType : uint8_t { kF32, kBF16, kF16, kF64, kI32, kI64, kU8 };
enum class Device : uint8_t { kCpu, kCuda };

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);
const char* DeviceName(Device device);

// A view of `count` elements of `dtype` at `data`, which lives on `device`.
// It does not own the memory.
struct Buffer {
  void* data = nullptr;
  size_t count = 0;
  DType dtype = DType::kU8;
  Device device = Device::kCpu;

  size_t bytes() const { return count * DTypeSize(dtype); }
  // The part [offset, offset + n) of this buffer, in elements.
  Buffer Slice(size_t offset, size_t n) const;
};

template <typename T>
constexpr DType DTypeOf();
template <>
constexpr DType DTypeOf<float>() {
  return DType::kF32;
}
template <>
constexpr DType DTypeOf<double>() {
  return DType::kF64;
}
template <>
constexpr DType DTypeOf<int32_t>() {
  return DType::kI32;
}
template <>
constexpr DType DTypeOf<int64_t>() {
  return DType::kI64;
}
template <>
constexpr DType DTypeOf<uint8_t>() {
  return DType::kU8;
}

// A CPU Buffer over a vector's elements.
template <typename T>
Buffer CpuBuffer(std::vector<T>& v) {
  return Buffer{v.data(), v.size(), DTypeOf<T>(), Device::kCpu};
}

enum class ReduceOp : uint8_t { kSum, kMax, kMin };
const char* ReduceOpName(ReduceOp op);

// "4 MiB", "1.5 KiB", "12 B": sizes in messages and tables (base/units.h,
// whole units without a decimal).
inline std::string HumanBytes(double bytes) {
  return ::maestro::HumanBytes(bytes, WholeUnits::kTrimDecimal);
}

using Millis = std::chrono::milliseconds;

// Who is in a group and how to name it in messages.
struct GroupInfo {
  std::string description;  // e.g. "dp group of section 'llm' (ranks 2,4)"
  std::vector<int> ranks;   // global ranks; index == rank inside the group
  int my_index = -1;        // this process's index in `ranks`
  int world_rank = -1;      // this process's global rank
  int size() const { return static_cast<int>(ranks.size()); }
};

// The handle of one asynchronous operation.
class Work {
 public:
  virtual ~Work() = default;
  // Waits until the operation completed (OK), failed, or `timeout` passed
  // (kTimeout, see the header comment). Calling it again after success is OK.
  virtual Status WaitFor(Millis timeout) = 0;
  // Non-blocking: true once the operation has completed.
  virtual bool IsCompleted() = 0;
  // WaitFor(the backend's default timeout).
  Status Wait() { return WaitFor(default_timeout_); }

 protected:
  explicit Work(Millis default_timeout) : default_timeout_(default_timeout) {}

 private:
  Millis default_timeout_;
};
using WorkPtr = std::unique_ptr<Work>;

// Collectives and point-to-point over one group. Buffers must live until the
// Work completes. REQUIRES: every rank of the group issues the same sequence
// of collectives (same op, count, dtype; shapes in the header comment).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;  // "mpi" or "nccl"
  virtual Device device() const = 0;     // where its buffers must live
  virtual const GroupInfo& group() const = 0;
  virtual Millis timeout() const = 0;  // default for Work::Wait()

  virtual StatusOr<WorkPtr> AllReduce(Buffer buf, ReduceOp op) = 0;
  virtual StatusOr<WorkPtr> AllGather(Buffer in, Buffer out) = 0;
  virtual StatusOr<WorkPtr> ReduceScatter(Buffer in, Buffer out, ReduceOp op) = 0;
  virtual StatusOr<WorkPtr> Broadcast(Buffer buf, int root) = 0;
  // `tag` in [0, 2^30): matches a Send with the Recv of the same tag (MPI);
  // NCCL ignores it and matches in issue order.
  virtual StatusOr<WorkPtr> Send(Buffer buf, int peer, int tag) = 0;
  virtual StatusOr<WorkPtr> Recv(Buffer buf, int peer, int tag) = 0;
  virtual StatusOr<WorkPtr> Barrier() = 0;
  // Optional operations: the default says this backend does not support them.
  virtual StatusOr<WorkPtr> AllToAll(Buffer in, Buffer out);

 protected:
  // "backend mpi does not support all_to_all (group ...)": kFailedPrecondition.
  Status Unsupported(const char* op) const;
};

// The shape rules of the block collectives (header comment), one home for
// every backend: `small` (n) and `big` (G*n) of one dtype (AllGather: in is
// small; ReduceScatter: out is small); AllToAll: in and out of G*n elements.
Status CheckBlockShapes(const char* op, const GroupInfo& group, const Buffer& small, const Buffer& big);
Status CheckAllToAllShapes(const GroupInfo& group, const Buffer& in, const Buffer& out);

// Issues and waits with the backend's timeout: `Complete(backend.AllReduce(b, op))`.
Status Complete(StatusOr<WorkPtr> work);

}  // namespace maestro::launcher
