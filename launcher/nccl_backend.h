// SPDX-License-Identifier: Apache-2.0
// The NCCL backend: CUDA buffers, one CUDA stream per group; a Work is a CUDA
// event recorded after the operation, waited on by polling cudaEventQuery
// and ncclCommGetAsyncError against the deadline (on expiry the communicator
// is aborted with ncclCommAbort and WaitFor returns kTimeout naming the rank,
// group and operation). The group's unique id is published by its first rank
// in the PMIx store and read by the others (Get waits for it).
//
// Built only with MAESTRO_HAVE_NCCL (CUDA + NCCL found). NCCL refuses two
// ranks of one communicator on one GPU, so multi-rank NCCL needs one GPU
// per rank; Tags are ignored (sends and receives match in issue order).
//
// May call: NCCL, CUDA runtime, pmix_store. Thread safety: one thread.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "launcher/comm.h"
#include "launcher/pmix_store.h"

namespace maestro::launcher {

// Number of CUDA devices this process sees (0 without NCCL support or GPU).
int CudaDeviceCount();

#ifdef MAESTRO_HAVE_NCCL
// Collective over info.ranks. `store_key` must be unique per group in the job.
StatusOr<std::unique_ptr<Backend>> CreateNcclBackend(GroupInfo info, PmixStore& store, const std::string& store_key,
                                                     int cuda_device, Millis timeout);

// `bytes` of device memory on the current device (RAII), for tests and the self-test.
class CudaMemory {
 public:
  static StatusOr<std::unique_ptr<CudaMemory>> Allocate(size_t bytes);
  ~CudaMemory();
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Returns once the bytes are in device memory (a synchronous copy).
  Status CopyFromHost(const void* host, size_t bytes);
  Status CopyToHost(void* host, size_t bytes) const;

 private:
  CudaMemory() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};
#endif

}  // namespace maestro::launcher
