// SPDX-License-Identifier: Apache-2.0
// Error checks for the foreign APIs the launcher calls (MPI, PMIx, NCCL,
// CUDA), on top of base/checks.h's MAESTRO_FOREIGN_CHECK: each turns a failed
// call into a Status that names the API, the call, the return code, the
// library's own error string and file:line, and returns it from the enclosing
// function (which must return Status or StatusOr<T>).
//
//   MPI_CHECK(MPI_Comm_split(world, color, key, &comm));
//   PMIX_CHECK(PMIx_Commit());
//   NCCL_CHECK(ncclAllReduce(...));   // only in files that include <nccl.h>
//   CUDA_CHECK(cudaMalloc(&p, n));    // only in files that include CUDA
//
// The headers of the APIs are NOT included here: include <mpi.h> / <pmix.h>
// / <nccl.h> / <cuda_runtime_api.h> where the macro is used.
#pragma once

#include <string>

#include "base/checks.h"

namespace maestro::launcher::internal {
// MPI_Error_string of `code` (declared here so that this header needs no mpi.h).
std::string MpiErrorString(int code);
// PMIx_Error_string of `code`.
std::string PmixErrorString(int code);
}  // namespace maestro::launcher::internal

#define MPI_CHECK(expr)                                                                           \
  MAESTRO_FOREIGN_CHECK("MPI", expr, rc == 0 /* MPI_SUCCESS */, ::maestro::StatusCode::kInternal, \
                        ::maestro::launcher::internal::MpiErrorString(static_cast<int>(rc)))

#define PMIX_CHECK(expr)                                                                               \
  MAESTRO_FOREIGN_CHECK("PMIx", expr, rc == 0 /* PMIX_SUCCESS */, ::maestro::StatusCode::kUnavailable, \
                        ::maestro::launcher::internal::PmixErrorString(static_cast<int>(rc)))

#define NCCL_CHECK(expr)                                                                   \
  MAESTRO_FOREIGN_CHECK("NCCL", expr, rc == ncclSuccess, ::maestro::StatusCode::kInternal, \
                        std::string(ncclGetErrorString(rc)))

#define CUDA_CHECK(expr)                                                                      \
  MAESTRO_FOREIGN_CHECK("CUDA", expr, rc == cudaSuccess, ::maestro::StatusCode::kUnavailable, \
                        std::string(cudaGetErrorString(rc)))
