// SPDX-License-Identifier: Apache-2.0
// The device profile a GPU of this machine is priced with (issue #43): the
// name CUDA gives it ("NVIDIA H100 80GB HBM3") or a fake inventory's type
// ("h100_sxm", launcher/gpu_inventory.h) mapped to a type name, and that
// type's built-in profile (compiler/devices/<type>.json) when there is one.
// A type without a profile is priced the way [cluster.gpu.*] without `type`
// or `kernels` is: the default tables (kDefaultDeviceProfile), with a note
// saying so. `maestro-compile --local N --local-gpu NAME` (what `maestro run`
// passes on a machine with GPUs) and `maestro doctor` call it.
//
// Owns: LocalGpuType, LocalGpuTypeOf.
// May call: compiler/device_profile. Thread safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace maestro::compiler {

struct LocalGpuType {
  std::string type;          // letters, digits and '_' ("h100_sxm", "l40s"); never empty
  bool has_profile = false;  // compiler/devices/<type>.json exists (built in)
  // When !has_profile: how the step model prices it instead and how to
  // measure it ("" otherwise).
  std::string note;
};

// `gpu_name` as CUDA or MAESTRO_FAKE_GPUS names it. A name that is already a
// built-in profile's maps to it; otherwise the name is lowercased, "NVIDIA"
// dropped and matched against the forms CUDA uses (H100 SXM/HBM3, H100 PCIe,
// H100 NVL, H200, GH200, A100 SXM/PCIe, L40S, B200), else turned into an
// identifier ("NVIDIA RTX 6000 Ada" -> "rtx_6000_ada").
LocalGpuType LocalGpuTypeOf(std::string_view gpu_name);

}  // namespace maestro::compiler
