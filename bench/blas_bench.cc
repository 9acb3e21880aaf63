// SPDX-License-Identifier: Apache-2.0
// blas: libtorch's fp32 matmul throughput, the number that says whether the
// optimized BLAS (libopenblas0-openmp) is in use. Baseline: the same product
// at n=128 (cache-resident), so the ratio shows how well large sizes scale.
#include "bench/registry.h"
#include "runtime/runtime_info.h"

MAESTRO_BENCHMARK(blas, "libtorch fp32 matmul GFLOP/s (is an optimized BLAS in use?)") {
  const int n = options.quick ? 256 : 1024;
  nlohmann::json out;
  const double big = maestro::runtime::MeasureMatmulGflops(n);
  const double small = maestro::runtime::MeasureMatmulGflops(128);
  out["matmul_gflops"] = big;
  out["matmul_n"] = n;
  out["large_over_small"] = big / small;
  out["parallel_info"] = maestro::runtime::GetRuntimeInfo().parallel_info;
  return out;
}
