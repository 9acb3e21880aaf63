// SPDX-License-Identifier: Apache-2.0
// A Backend over CUDA buffers for a backend that takes CPU buffers: the MPI
// backend when Open MPI is not CUDA-aware (Debian's and Ubuntu's are not),
// e.g. a section whose tensors live on a GPU but whose groups use MPI, or
// two ranks sharing one GPU, where NCCL refuses to run.
//
// Each operation copies its CUDA input buffers into host buffers it owns
// (cudaMemcpy, synchronous: the data the caller's stream produced is
// there), runs the wrapped backend's operation on them, and the returned
// Work copies the outputs back into the CUDA buffers when it completes
// (WaitFor or IsCompleted), then waits for that copy. CPU buffers pass
// through untouched. Costs: two PCIe copies per operation and one host
// buffer per device buffer while it runs; what NCCL exists for.
// Always staged, even under a CUDA-aware MPI: the MPI backend's bf16/f16
// reductions run user-defined MPI ops on the host.
//
// Built only with MAESTRO_HAVE_NCCL (the CUDA runtime found). Tested by
// launcher_comm_probe's `mpi-cuda` scenario (tests/launcher/nccl_test.cc,
// label gpu: two ranks on one GPU).
// May call: comm.h, CUDA runtime. Thread safety: as the wrapped backend.
#pragma once

#include <memory>

#include "launcher/comm.h"

namespace maestro::launcher {

#ifdef MAESTRO_HAVE_NCCL
// name(): "<inner>+host-staging"; device(): kCuda; group() and timeout():
// the wrapped backend's.
std::unique_ptr<Backend> StageThroughHost(std::unique_ptr<Backend> host_backend);
#endif

}  // namespace maestro::launcher
