// SPDX-License-Identifier: Apache-2.0
// The huge-page host allocator (runtime/host_allocator.h). c10 headers only:
// not a whole-torch translation unit.
#include "runtime/host_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>

namespace maestro::runtime {
namespace {

constexpr size_t kSmallAlignment = 64;  // libtorch's own (c10::gAlignment)
constexpr size_t kPageBytes = 4096;

// The live huge-page mappings: data pointer -> mapped length.
std::mutex g_mappings_mutex;
std::unordered_map<void*, size_t> g_mappings;
std::atomic<size_t> g_mapped_bytes{0};

// `bytes` rounded up to pages, in a fresh anonymous mapping that starts on a
// 2 MiB boundary (a larger one is reserved, the slack on both sides
// unmapped), advised for transparent huge pages; nullptr when out of memory.
void* MapHugePages(size_t bytes) {
  const size_t length = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  const size_t reserved = length + kHostHugePageBytes;
  void* raw = mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (begin + kHostHugePageBytes - 1) & ~static_cast<uintptr_t>(kHostHugePageBytes - 1);
  const uintptr_t end = begin + reserved;
  if (start > begin) munmap(raw, start - begin);
  if (end > start + length) munmap(reinterpret_cast<void*>(start + length), end - (start + length));
  void* data = reinterpret_cast<void*>(start);
  // Advice only: where THP is "never" the pages are 4 KiB, still unmapped
  // when freed.
  madvise(data, length, MADV_HUGEPAGE);
  {
    std::lock_guard<std::mutex> lock(g_mappings_mutex);
    g_mappings.emplace(data, length);
  }
  g_mapped_bytes += length;
  return data;
}

// Frees what Allocate returned: a huge-page mapping is unmapped (only such a
// pointer, 2 MiB aligned, is looked up), anything else is free()d.
void FreeHostBytes(void* data) {
  if (data == nullptr) return;
  if ((reinterpret_cast<uintptr_t>(data) & (kHostHugePageBytes - 1)) == 0) {
    size_t length = 0;
    {
      std::lock_guard<std::mutex> lock(g_mappings_mutex);
      auto it = g_mappings.find(data);
      if (it != g_mappings.end()) {
        length = it->second;
        g_mappings.erase(it);
      }
    }
    if (length > 0) {
      munmap(data, length);
      g_mapped_bytes -= length;
      return;
    }
  }
  std::free(data);
}

c10::DataPtr AllocateHostBytes(size_t bytes) {
  void* data = nullptr;
  if (bytes >= kHostHugePageBytes) {
    data = MapHugePages(bytes);
  } else if (bytes > 0 && posix_memalign(&data, kSmallAlignment, bytes) != 0) {
    data = nullptr;
  }
  TORCH_CHECK(data != nullptr || bytes == 0, "maestro host allocator: not enough memory: you tried to allocate ", bytes,
              " bytes.");
  return {data, data, &FreeHostBytes, c10::Device(c10::DeviceType::CPU)};
}

// c10::Allocator's interface differs between libtorch 1.13 and 2.x: 1.13's
// allocate is const and there is no copy_data; 2.3+ made allocate non-const
// and added the pure virtual copy_data. Both are detected, not versioned.
constexpr bool kConstAllocate =
    std::is_same_v<decltype(&c10::Allocator::allocate), c10::DataPtr (c10::Allocator::*)(size_t) const>;

template <typename A, typename = void>
struct HasCopyData : std::false_type {};
template <typename A>
struct HasCopyData<A, std::void_t<decltype(&A::copy_data)>> : std::true_type {};

template <typename Base, bool kHasCopyData>
struct CopyDataLayer : Base {};
template <typename Base>
struct CopyDataLayer<Base, true> : Base {
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count > 0) std::memcpy(dest, src, count);
  }
};

template <typename Base, bool kConst>
struct AllocateLayer;
template <typename Base>
struct AllocateLayer<Base, true> final : Base {
  c10::DataPtr allocate(size_t bytes) const override { return AllocateHostBytes(bytes); }
  c10::DeleterFnPtr raw_deleter() const override { return &FreeHostBytes; }
};
template <typename Base>
struct AllocateLayer<Base, false> final : Base {
  c10::DataPtr allocate(size_t bytes) override { return AllocateHostBytes(bytes); }
  c10::DeleterFnPtr raw_deleter() const override { return &FreeHostBytes; }
};

using HugePageHostAllocator =
    AllocateLayer<CopyDataLayer<c10::Allocator, HasCopyData<c10::Allocator>::value>, kConstAllocate>;

}  // namespace

StatusOr<bool> InstallHostAllocator() {
  const char* env = std::getenv("MAESTRO_HOST_ALLOCATOR");
  const std::string choice = env == nullptr ? "" : env;
  if (choice.empty() || choice == "torch") return false;
  if (choice != "huge-pages") {
    return Status::InvalidArgument(fmt::format(
        "MAESTRO_HOST_ALLOCATOR={}: use torch (libtorch's CPU allocator, the default) or huge-pages", choice));
  }
  static const bool installed = [] {
    static HugePageHostAllocator allocator;
    // Priority 1 outranks libtorch's default CPU allocator (registered at 0).
    c10::SetCPUAllocator(&allocator, 1);
    return true;
  }();
  return installed;
}

size_t HostAllocatorMappedBytes() {
  return g_mapped_bytes.load();
}

}  // namespace maestro::runtime
