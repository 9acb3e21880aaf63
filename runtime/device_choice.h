// SPDX-License-Identifier: Apache-2.0
// Where a rank computes and in which precision: the worker's --device and
// --precision requests, the plan's placement and what this libtorch sees,
// turned into one ComputePlacement. Pure functions (no torch), unit-tested in
// tests/runtime/precision_test.cc.
//
// Rules (ChooseCompute):
//   --device cpu   the CPU, whatever the plan says.
//   --device cuda  CUDA device (local_rank mod the visible devices): ranks on
//                  one machine share its GPUs round robin (tests, one-GPU
//                  boxes); an error when this libtorch sees no CUDA device.
//   --device auto  (default) CUDA device RankPlace::local_gpu when the plan
//                  gives the rank's section GPUs (placement.gpus_per_task > 0)
//                  and this libtorch sees that device; otherwise the CPU, with
//                  the reason in ComputePlacement::note (a CPU libtorch on a
//                  GPU plan still runs, on the CPU, as the launcher's MPI
//                  fallback does).
//   --precision auto (default) bf16 on CUDA, fp32 on the CPU; fp32 and bf16
//                  are taken as asked, on either device.
// What bf16 means (runtime/section_runner.h "Precision"): the forward under
// autocast to bf16 with fp32 master weights, fp32 gradients (the DP
// all-reduce stays fp32) and fp32 AdamW moments; a forward-only section
// holds its weights in bf16. compiler/memory_model.h kMixedBf16 counts it.
//
// May call: base. Thread safety: pure functions.
#pragma once

#include <string>

#include "base/status.h"

namespace maestro::runtime {

enum class DeviceRequest { kAuto, kCpu, kCuda };
enum class PrecisionRequest { kAuto, kFp32, kBf16 };
enum class Precision { kFp32, kBf16 };

// "auto" | "cpu" | "cuda"; anything else is kInvalidArgument naming the choices.
StatusOr<DeviceRequest> ParseDeviceRequest(const std::string& text);
// "auto" | "fp32" | "bf16".
StatusOr<PrecisionRequest> ParsePrecisionRequest(const std::string& text);
const char* PrecisionName(Precision precision);  // "fp32" | "bf16"

struct ComputePlacement {
  int cuda_device = -1;  // -1: the CPU; else the CUDA device index
  Precision precision = Precision::kFp32;
  std::string note;  // why the CPU was chosen on a GPU plan ("" otherwise)
  bool cuda() const { return cuda_device >= 0; }
  // "cuda:1 bf16", "cpu fp32"
  std::string ToString() const;
};

// What ChooseCompute needs to know about the rank.
struct ComputeFacts {
  int gpus_per_task = 0;  // the rank's section's plan placement (0: a CPU plan)
  int local_gpu = -1;     // launcher::RankPlace::local_gpu (-1: none assigned)
  int local_rank = 0;     // launcher::RankPlace::local_rank
  int cuda_devices = 0;   // CUDA devices this libtorch sees (0: a CPU build or none visible)
};

StatusOr<ComputePlacement> ChooseCompute(DeviceRequest device, PrecisionRequest precision, const ComputeFacts& facts);

// CUDA devices this libtorch sees (0 on a CPU build). Defined in
// runtime/device_staging.cc, the torch side; declared here for torch-free callers.
int CudaDeviceCount();

}  // namespace maestro::runtime
