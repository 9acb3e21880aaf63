// SPDX-License-Identifier: Apache-2.0
#include "compiler/local_gpu_type.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "base/text.h"
#include "compiler/device_profile.h"

namespace maestro::compiler {

namespace {

// Lowercase letters and digits, every other run of characters one '_', no
// '_' at either end, at most 64 characters.
std::string Identifier(std::string_view name) {
  std::string out;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) && u < 0x80) {
      out += static_cast<char>(std::tolower(u));
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  if (out.size() > 64) out.resize(64);
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "gpu" : out;
}

bool Has(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

// The type CUDA's name `id` (an Identifier, "nvidia" dropped) means.
std::string TypeOfCudaName(const std::string& id) {
  if (Has(id, "gh200")) return "gh200";
  if (Has(id, "h200")) return "h200";
  if (Has(id, "h100")) {
    if (Has(id, "pcie")) return "h100_pcie";
    if (Has(id, "nvl")) return "h100_nvl";
    return "h100_sxm";  // "H100 80GB HBM3", "H100 SXM5 ..."
  }
  if (Has(id, "a100")) return Has(id, "pcie") ? "a100_pcie" : "a100_sxm";
  if (Has(id, "l40s")) return "l40s";
  if (Has(id, "b200")) return "b200";
  return id;
}

}  // namespace

LocalGpuType LocalGpuTypeOf(std::string_view gpu_name) {
  const std::vector<std::string> known = BuiltinDeviceProfileNames();
  const auto is_known = [&known](const std::string& t) {
    return std::find(known.begin(), known.end(), t) != known.end();
  };
  LocalGpuType out;
  std::string id = Identifier(gpu_name);
  if (is_known(id)) {
    out.type = id;
    out.has_profile = true;
    return out;
  }
  if (id.rfind("nvidia_", 0) == 0) id = id.substr(7);
  out.type = TypeOfCudaName(id);
  out.has_profile = is_known(out.type);
  if (!out.has_profile) {
    out.note = fmt::format(
        "this machine's GPU '{}' (type {}) has no device profile in compiler/devices (known: {}): priced with the "
        "{} tables at their peak; `maestro profile --kernels -o {}.json` measures it, and a spec's "
        "[cluster.gpu.{}] kernels = \"{}.json\" uses the measurement (docs/step_model.md, \"Unknown GPU types\")",
        PrintableText(gpu_name), out.type, fmt::join(known, ", "), kDefaultDeviceProfile, out.type, out.type, out.type);
  }
  return out;
}

}  // namespace maestro::compiler
