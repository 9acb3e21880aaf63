// SPDX-License-Identifier: Apache-2.0
// What `maestro run` and `maestro profile` compile for on this machine
// (issue #43): its GPUs, one rank each, or CPU slots. The GPUs come from
// launcher/gpu_inventory.h (DiscoverLocalGpus: CUDA, or MAESTRO_FAKE_GPUS in
// tests); which device profile a GPU is priced with is the compiler's
// (compiler/local_gpu_type.h). Rules (ChooseLocalDevices):
//   --device cpu   CPU slots, as before GPUs were discovered; nothing asked.
//   --device auto  (default) the GPUs when there are any, else CPU slots with
//                  the reason said once.
//   --device cuda  the GPUs; none is an error naming why and --device cpu.
// One GPU type per plan: on a machine with several, the type with the most
// GPUs (the first on a tie); the others stay idle, each with its reason
// (`maestro doctor` prints them). --ranks N uses the first N of them; more
// ranks than GPUs is refused (GPUs are not shared). When the GPUs used are
// not CUDA's first ones, the ranks get CUDA_VISIBLE_DEVICES naming them, so
// rank r binds cuda:r (launcher/launch_env.h PlaceRank).
//
// Owns: DeviceChoice, LocalDevices, ChooseLocalDevices, GpuUseLines.
// May call: base, launcher (gpu_inventory), compiler (local_gpu_type).
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/local_gpu_type.h"
#include "launcher/gpu_inventory.h"

namespace maestro::cli {

enum class DeviceChoice { kAuto, kCpu, kCuda };
// "auto" | "cpu" | "cuda"; anything else is kInvalidArgument.
StatusOr<DeviceChoice> ParseDeviceChoice(const std::string& text);

struct LocalDevices {
  bool gpus = false;  // compile for GPUs (maestro-compile --local-gpu)
  // With gpus: the GPUs used, in rank order (CUDA ordinals as discovered),
  // their name (CUDA's or the fake's: --local-gpu), type and memory per GPU.
  std::vector<int> used;
  std::string gpu_name;
  compiler::LocalGpuType type;
  int64_t memory_bytes = 0;  // 0: not known (the type's default)
  std::string source;        // launcher::GpuInventory::source
  // GPUs found but not used, one line each: "GPU 2 (l40s): not used: ...".
  std::vector<std::string> idle;
  // With gpus: the CUDA_VISIBLE_DEVICES the ranks get ("" = left as it is).
  std::string cuda_visible_devices;
  // Without gpus: why CPU slots ("--device cpu", "no GPUs: <why>").
  std::string cpu_reason;
};

// `ranks`: --ranks (0: every GPU of the chosen type). `visible`: this
// process's CUDA_VISIBLE_DEVICES (nullptr: unset). Errors are
// kInvalidArgument naming the option and the fix.
StatusOr<LocalDevices> ChooseLocalDevices(DeviceChoice choice, const launcher::GpuInventory& inventory, int ranks,
                                          const char* visible);

// `maestro doctor`'s lines: each group of equal GPUs, the device profile it
// maps to (or the default tables' note), and why any would not be used.
std::vector<std::string> GpuUseLines(const launcher::GpuInventory& inventory);

}  // namespace maestro::cli
