// SPDX-License-Identifier: Apache-2.0
#include "base/process_memory.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace maestro {

StatusOr<int64_t> ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) {
    return Status::Unavailable(fmt::format("cannot open /proc/self/statm: {}", std::strerror(errno)));
  }
  long long size_pages = 0, resident_pages = 0;
  const int read = std::fscanf(f, "%lld %lld", &size_pages, &resident_pages);
  std::fclose(f);
  if (read != 2) return Status::Internal("/proc/self/statm: expected 'size resident ...' pages");
  return static_cast<int64_t>(resident_pages) * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

StatusOr<int64_t> PeakResidentBytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) {
    return Status::Internal(fmt::format("getrusage: {}", std::strerror(errno)));
  }
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux: KiB
}

Status ResetPeakResident() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (f == nullptr) {
    return Status::Unavailable(fmt::format("cannot open /proc/self/clear_refs: {}", std::strerror(errno)));
  }
  const bool written = std::fputs("5", f) >= 0;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    return Status::Unavailable(
        fmt::format("resetting the peak resident set (/proc/self/clear_refs): {}", std::strerror(errno)));
  }
  return Status::Ok();
}

}  // namespace maestro
