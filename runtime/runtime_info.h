// SPDX-License-Identifier: Apache-2.0
// What the runtime was built with and can use here. No torch types in this
// header: other modules include it without paying for torch's headers.
#pragma once
#include <string>
namespace maestro::runtime {
struct RuntimeInfo {
  std::string torch_version;  // e.g. "1.13.1"
  int intra_op_threads = 0;   // at::get_num_threads()
  bool cuda_available = false;
  int cuda_devices = 0;
  std::string parallel_info;  // at::get_parallel_info(): OpenMP/BLAS backends
};
RuntimeInfo GetRuntimeInfo();
// Multiplies two n x n fp32 matrices once and returns GFLOP/s measured, so
// `maestro doctor` can tell whether libtorch found an optimized BLAS.
double MeasureMatmulGflops(int n);
}  // namespace maestro::runtime
