// SPDX-License-Identifier: Apache-2.0
#include "launcher/nccl_backend.h"

#ifdef MAESTRO_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>
#include <time.h>

#include <climits>
#include <cstring>

#include "launcher/checks.h"
#include "launcher/failure.h"
#endif

namespace maestro::launcher {

#ifndef MAESTRO_HAVE_NCCL
int CudaDeviceCount() {
  return 0;
}
#else
int CudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

namespace {

ncclDataType_t NcclTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kF16: return ncclFloat16;
    case DType::kF64: return ncclFloat64;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kU8: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t NcclOpOf(ReduceOp op) {
  return op == ReduceOp::kSum ? ncclSum : op == ReduceOp::kMax ? ncclMax : ncclMin;
}

class NcclBackend;

class NcclWork final : public Work {
 public:
  NcclWork(NcclBackend* backend, cudaEvent_t event, InFlightOp record, Millis default_timeout)
      : Work(default_timeout), backend_(backend), event_(event), record_(record) {}
  ~NcclWork() override {
    if (!done_ && !failed_) (void)Wait();
    cudaEventDestroy(event_);
  }
  bool IsCompleted() override {
    if (!done_ && cudaEventQuery(event_) == cudaSuccess) done_ = true;
    return done_;
  }
  Status WaitFor(Millis timeout) override;

 private:
  NcclBackend* backend_;
  cudaEvent_t event_;
  InFlightOp record_;
  bool done_ = false;
  bool failed_ = false;
  Status failure_;
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(GroupInfo info, ncclComm_t comm, cudaStream_t stream, int device, Millis timeout)
      : group_(std::move(info)), comm_(comm), stream_(stream), device_(device), timeout_(timeout) {}
  ~NcclBackend() override {
    if (comm_ != nullptr) {
      if (aborted_) {
        ncclCommAbort(comm_);
      } else {
        ncclCommDestroy(comm_);
      }
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  const char* name() const override { return "nccl"; }
  Device device() const override { return Device::kCuda; }
  const GroupInfo& group() const override { return group_; }
  Millis timeout() const override { return timeout_; }
  ncclComm_t comm() const { return comm_; }
  void MarkAborted() {
    if (!aborted_) ncclCommAbort(comm_);
    aborted_ = true;
    comm_ = nullptr;
  }

  StatusOr<WorkPtr> AllReduce(Buffer buf, ReduceOp op) override {
    MAESTRO_RETURN_IF_ERROR(Check(buf, "all_reduce"));
    NCCL_CHECK(ncclAllReduce(buf.data, buf.data, buf.count, NcclTypeOf(buf.dtype), NcclOpOf(op), comm_, stream_));
    return Record("all_reduce", buf.bytes(), -1);
  }
  StatusOr<WorkPtr> AllGather(Buffer in, Buffer out) override {
    MAESTRO_RETURN_IF_ERROR(Check(in, "all_gather"));
    MAESTRO_RETURN_IF_ERROR(Check(out, "all_gather"));
    MAESTRO_RETURN_IF_ERROR(CheckBlockShapes("all_gather", group_, in, out));
    NCCL_CHECK(ncclAllGather(in.data, out.data, in.count, NcclTypeOf(in.dtype), comm_, stream_));
    return Record("all_gather", out.bytes(), -1);
  }
  StatusOr<WorkPtr> ReduceScatter(Buffer in, Buffer out, ReduceOp op) override {
    MAESTRO_RETURN_IF_ERROR(Check(in, "reduce_scatter"));
    MAESTRO_RETURN_IF_ERROR(Check(out, "reduce_scatter"));
    MAESTRO_RETURN_IF_ERROR(CheckBlockShapes("reduce_scatter", group_, out, in));
    NCCL_CHECK(ncclReduceScatter(in.data, out.data, out.count, NcclTypeOf(in.dtype), NcclOpOf(op), comm_, stream_));
    return Record("reduce_scatter", in.bytes(), -1);
  }
  // One grouped send and receive per peer (NCCL has no all-to-all of its own).
  StatusOr<WorkPtr> AllToAll(Buffer in, Buffer out) override {
    MAESTRO_RETURN_IF_ERROR(Check(in, "all_to_all"));
    MAESTRO_RETURN_IF_ERROR(Check(out, "all_to_all"));
    MAESTRO_RETURN_IF_ERROR(CheckAllToAllShapes(group_, in, out));
    const size_t g = static_cast<size_t>(group_.size());
    const size_t block = in.count / g;
    NCCL_CHECK(ncclGroupStart());
    for (size_t peer = 0; peer < g; ++peer) {
      NCCL_CHECK(ncclSend(in.Slice(peer * block, block).data, block, NcclTypeOf(in.dtype), static_cast<int>(peer),
                          comm_, stream_));
      NCCL_CHECK(ncclRecv(out.Slice(peer * block, block).data, block, NcclTypeOf(out.dtype), static_cast<int>(peer),
                          comm_, stream_));
    }
    NCCL_CHECK(ncclGroupEnd());
    return Record("all_to_all", in.bytes(), -1);
  }
  StatusOr<WorkPtr> Broadcast(Buffer buf, int root) override {
    MAESTRO_RETURN_IF_ERROR(Check(buf, "broadcast"));
    MAESTRO_RETURN_IF_ERROR(CheckPeer(root, "broadcast"));
    NCCL_CHECK(ncclBroadcast(buf.data, buf.data, buf.count, NcclTypeOf(buf.dtype), root, comm_, stream_));
    return Record("broadcast", buf.bytes(), group_.ranks[static_cast<size_t>(root)]);
  }
  StatusOr<WorkPtr> Send(Buffer buf, int peer, int /*tag*/) override {
    MAESTRO_RETURN_IF_ERROR(Check(buf, "send"));
    MAESTRO_RETURN_IF_ERROR(CheckPeer(peer, "send"));
    NCCL_CHECK(ncclSend(buf.data, buf.count, NcclTypeOf(buf.dtype), peer, comm_, stream_));
    return Record("send", buf.bytes(), group_.ranks[static_cast<size_t>(peer)]);
  }
  StatusOr<WorkPtr> Recv(Buffer buf, int peer, int /*tag*/) override {
    MAESTRO_RETURN_IF_ERROR(Check(buf, "recv"));
    MAESTRO_RETURN_IF_ERROR(CheckPeer(peer, "recv"));
    NCCL_CHECK(ncclRecv(buf.data, buf.count, NcclTypeOf(buf.dtype), peer, comm_, stream_));
    return Record("recv", buf.bytes(), group_.ranks[static_cast<size_t>(peer)]);
  }
  StatusOr<WorkPtr> Barrier() override {
    // A 1-element all-reduce on the group's stream: NCCL has no barrier.
    if (scratch_ == nullptr) CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
    NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_));
    return Record("barrier", 0, -1);
  }

 private:
  Status Check(const Buffer& buf, const char* op) const {
    if (comm_ == nullptr) {
      return Status::Aborted(
          fmt::format("{} on {}: the communicator was aborted after a failure", op, group_.description));
    }
    if (buf.device != Device::kCuda) {
      return Status::InvalidArgument(fmt::format("{} on {}: the NCCL backend takes CUDA buffers, got a {} buffer", op,
                                                 group_.description, DeviceName(buf.device)));
    }
    return Status::Ok();
  }
  Status CheckPeer(int peer, const char* op) const {
    if (peer < 0 || peer >= group_.size()) {
      return Status::InvalidArgument(
          fmt::format("{} on {}: group rank {} is not in [0, {})", op, group_.description, peer, group_.size()));
    }
    return Status::Ok();
  }
  StatusOr<WorkPtr> Record(const char* op, size_t bytes, int peer) {
    cudaEvent_t event = nullptr;
    CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(event, stream_));
    InFlightOp rec;
    rec.op = op;
    rec.bytes = bytes;
    rec.peer = peer;
    rec.group = &group_;
    rec.seq = ++seq_;
    return WorkPtr(std::make_unique<NcclWork>(this, event, rec, timeout_));
  }

  GroupInfo group_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  int device_;
  Millis timeout_;
  uint64_t seq_ = 0;
  bool aborted_ = false;
  void* scratch_ = nullptr;
};

Status NcclWork::WaitFor(Millis timeout) {
  if (done_) return Status::Ok();
  if (failed_) return failure_;
  record_.start_ns = MonotonicNanos();
  InFlightScope scope(&record_);
  const int64_t deadline = record_.start_ns + static_cast<int64_t>(timeout.count()) * 1000000;
  for (;;) {
    const cudaError_t q = cudaEventQuery(event_);
    if (q == cudaSuccess) {
      done_ = true;
      return Status::Ok();
    }
    if (q != cudaErrorNotReady) {
      failed_ = true;
      failure_ = Status::Internal(fmt::format("rank {}: {} failed: CUDA {}", record_.group->world_rank,
                                              DescribeOp(record_), cudaGetErrorString(q)));
      return failure_;
    }
    ncclResult_t async = ncclSuccess;
    if (backend_->comm() != nullptr && ncclCommGetAsyncError(backend_->comm(), &async) == ncclSuccess &&
        async != ncclSuccess && async != ncclInProgress) {
      failed_ = true;
      backend_->MarkAborted();
      failure_ =
          Status::Aborted(fmt::format("rank {}: {} failed: NCCL {} (a peer died or its network failed)",
                                      record_.group->world_rank, DescribeOp(record_), ncclGetErrorString(async)));
      return failure_;
    }
    const int64_t now = MonotonicNanos();
    if (now >= deadline) break;
    if (now - record_.start_ns > 2000000) {
      timespec ts{0, 50000};
      nanosleep(&ts, nullptr);
    }
  }
  failed_ = true;
  backend_->MarkAborted();  // unblocks the stream; the group is unusable now
  failure_ = Status::Timeout(fmt::format("rank {}: {} did not complete within {:.1f} s (NCCL communicator aborted)",
                                         record_.group->world_rank, DescribeOp(record_),
                                         static_cast<double>(timeout.count()) / 1000.0));
  return failure_;
}

}  // namespace

StatusOr<std::unique_ptr<Backend> > CreateNcclBackend(GroupInfo info, PmixStore& store, const std::string& store_key,
                                                      int cuda_device, Millis timeout) {
  if (cuda_device < 0) {
    return Status::FailedPrecondition(fmt::format("{}: this rank has no GPU assigned", info.description));
  }
  CUDA_CHECK(cudaSetDevice(cuda_device));
  ncclUniqueId id;
  if (info.my_index == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    MAESTRO_RETURN_IF_ERROR(store.Put(store_key, std::string(id.internal, sizeof(id.internal))));
    MAESTRO_RETURN_IF_ERROR(store.Commit());
  } else {
    MAESTRO_ASSIGN_OR_RETURN(const std::string bytes, store.Get(info.ranks.front(), store_key, timeout));
    if (bytes.size() != sizeof(id.internal)) {
      return Status::Corruption(fmt::format("{}: NCCL unique id under '{}' has {} bytes, expected {}", info.description,
                                            store_key, bytes.size(), sizeof(id.internal)));
    }
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, info.size(), id, info.my_index));
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return std::unique_ptr<Backend>(std::make_unique<NcclBackend>(std::move(info), comm, stream, cuda_device, timeout));
}

StatusOr<std::unique_ptr<CudaMemory> > CudaMemory::Allocate(size_t bytes) {
  std::unique_ptr<CudaMemory> m(new CudaMemory());
  CUDA_CHECK(cudaMalloc(&m->data_, bytes));
  m->bytes_ = bytes;
  return m;
}
CudaMemory::~CudaMemory() {
  if (data_ != nullptr) cudaFree(data_);
}
Status CudaMemory::CopyFromHost(const void* host, size_t bytes) {
  CUDA_CHECK(cudaMemcpy(data_, host, bytes, cudaMemcpyHostToDevice));
  // From pageable memory cudaMemcpy may return before the DMA landed, and a
  // backend's non-blocking stream does not wait for it: wait here.
  CUDA_CHECK(cudaDeviceSynchronize());
  return Status::Ok();
}
Status CudaMemory::CopyToHost(void* host, size_t bytes) const {
  CUDA_CHECK(cudaMemcpy(host, data_, bytes, cudaMemcpyDeviceToHost));
  return Status::Ok();
}
#endif

}  // namespace maestro::launcher
