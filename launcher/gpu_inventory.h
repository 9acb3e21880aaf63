// SPDX-License-Identifier: Apache-2.0
// The GPUs of this machine as `maestro run`, `maestro profile` and
// `maestro doctor` see them (issue #43): one seam, DiscoverLocalGpus, that a
// test replaces with a fake inventory through the environment:
//   MAESTRO_FAKE_GPUS=8xh100_sxm          eight GPUs of device profile h100_sxm
//   MAESTRO_FAKE_GPUS=2xh200:141,1xl40s   counts, types, memory in GiB (optional)
//   MAESTRO_FAKE_GPUS=0                   none (a machine without GPUs)
// Without it the CUDA runtime answers (when this build has CUDA): each
// device's name and memory. The type a GPU maps to (a device profile of
// compiler/devices) is the compiler's business, not this file's.
//
// Owns: LocalGpu, GpuInventory, ParseFakeGpus, DiscoverLocalGpus.
// May call: base, the CUDA runtime (optional). Thread safety: pure functions
// (DiscoverLocalGpus reads the environment and asks CUDA).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace maestro::launcher {

inline constexpr char kFakeGpusEnv[] = "MAESTRO_FAKE_GPUS";

struct LocalGpu {
  int index = 0;             // the CUDA device ordinal
  std::string name;          // CUDA's name ("NVIDIA H100 80GB HBM3"), or the fake's type ("h100_sxm")
  int64_t memory_bytes = 0;  // 0: not known (a fake without ":<GiB>")
};

struct GpuInventory {
  std::vector<LocalGpu> gpus;
  std::string source;    // "CUDA", or "MAESTRO_FAKE_GPUS=<text>"
  std::string why_none;  // when gpus is empty: why (no CUDA in this build, CUDA's error, the fake says 0)
};

// The fake inventory `text` (the grammar above): InvalidArgument naming the
// part that does not parse and the form expected.
StatusOr<std::vector<LocalGpu>> ParseFakeGpus(std::string_view text);

// $MAESTRO_FAKE_GPUS when set (its parse error is this call's), else the
// CUDA runtime's devices.
StatusOr<GpuInventory> DiscoverLocalGpus();

// "8 x h100_sxm (80 GiB)" / "1 x NVIDIA H200 (141 GiB), 1 x ...": the
// inventory in one line, equal GPUs grouped in their order; "none (<why>)".
std::string DescribeGpus(const GpuInventory& inventory);

}  // namespace maestro::launcher
