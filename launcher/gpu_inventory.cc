// SPDX-License-Identifier: Apache-2.0
#include "launcher/gpu_inventory.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>

#include "base/checks.h"

#ifdef MAESTRO_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

namespace maestro::launcher {

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int kMostFakeGpus = 1024;

Status BadFake(std::string_view text, std::string_view part, std::string_view why) {
  return Status::InvalidArgument(
      fmt::format("{}='{}': '{}' {}; expected <count>x<type>[:<GiB>], comma-separated (e.g. 8xh100_sxm or "
                  "2xh200:141,1xl40s), or 0",
                  kFakeGpusEnv, text, part, why));
}

// A non-negative decimal number, all of `s`.
bool ParseCount(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 9) return false;
  int64_t v = 0;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

bool IsTypeName(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

#ifdef MAESTRO_HAVE_NCCL
GpuInventory CudaGpus() {
  GpuInventory out;
  out.source = "CUDA";
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    out.why_none = fmt::format("the CUDA runtime finds no device: {}", cudaGetErrorString(err));
    (void)cudaGetLastError();  // clear the sticky error
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    out.gpus.push_back(LocalGpu{i, prop.name, static_cast<int64_t>(prop.totalGlobalMem)});
  }
  if (out.gpus.empty()) out.why_none = "the CUDA runtime lists no device";
  return out;
}
#endif

}  // namespace

StatusOr<std::vector<LocalGpu>> ParseFakeGpus(std::string_view text) {
  std::vector<LocalGpu> gpus;
  if (text == "0") return gpus;
  size_t at = 0;
  while (true) {
    const size_t comma = text.find(',', at);
    const std::string_view part =
        text.substr(at, comma == std::string_view::npos ? std::string_view::npos : comma - at);
    const size_t x = part.find('x');
    int64_t count = 0;
    if (x == std::string_view::npos || !ParseCount(part.substr(0, x), &count) || count < 1) {
      return BadFake(text, part, "does not start with a count of 1 or more and 'x'");
    }
    std::string_view type = part.substr(x + 1);
    int64_t gib = 0;
    if (const size_t colon = type.find(':'); colon != std::string_view::npos) {
      if (!ParseCount(type.substr(colon + 1), &gib) || gib < 1) {
        return BadFake(text, part, "has a memory that is not a whole number of GiB of 1 or more");
      }
      type = type.substr(0, colon);
    }
    if (!IsTypeName(type)) return BadFake(text, part, "names no type (letters, digits, '_' and '-')");
    if (static_cast<int64_t>(gpus.size()) + count > kMostFakeGpus) {
      return BadFake(text, part, fmt::format("makes more than {} GPUs", kMostFakeGpus));
    }
    for (int64_t i = 0; i < count; ++i) {
      gpus.push_back(LocalGpu{static_cast<int>(gpus.size()), std::string(type), gib * kGiB});
    }
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return gpus;
}

StatusOr<GpuInventory> DiscoverLocalGpus() {
  if (const char* fake = std::getenv(kFakeGpusEnv); fake != nullptr) {
    GpuInventory out;
    out.source = fmt::format("{}={}", kFakeGpusEnv, fake);
    MAESTRO_ASSIGN_OR_RETURN(out.gpus, ParseFakeGpus(fake));
    if (out.gpus.empty()) out.why_none = fmt::format("{} says none", kFakeGpusEnv);
    return out;
  }
#ifdef MAESTRO_HAVE_NCCL
  return CudaGpus();
#else
  GpuInventory out;
  out.why_none = "this build has no CUDA (MAESTRO_HAVE_NCCL is off)";
  return out;
#endif
}

std::string DescribeGpus(const GpuInventory& inventory) {
  if (inventory.gpus.empty()) return fmt::format("none ({})", inventory.why_none);
  std::string out;
  for (size_t i = 0; i < inventory.gpus.size();) {
    size_t j = i;
    while (j < inventory.gpus.size() && inventory.gpus[j].name == inventory.gpus[i].name &&
           inventory.gpus[j].memory_bytes == inventory.gpus[i].memory_bytes) {
      ++j;
    }
    if (!out.empty()) out += ", ";
    out += fmt::format("{} x {}", j - i, inventory.gpus[i].name);
    if (inventory.gpus[i].memory_bytes > 0) {
      out += fmt::format(" ({} GiB)", (inventory.gpus[i].memory_bytes + kGiB / 2) / kGiB);
    }
    i = j;
  }
  return out + " (" + inventory.source + ")";
}

}  // namespace maestro::launcher
