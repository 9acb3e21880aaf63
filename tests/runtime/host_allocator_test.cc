// SPDX-License-Identifier: Apache-2.0
// The huge-page host allocator (runtime/host_allocator.h), installed in this
// process as the worker installs it under MAESTRO_HOST_ALLOCATOR=huge-pages:
// large CPU tensors on 2 MiB-aligned
// mappings that leave the resident set when freed, small ones as before, the
// transparent huge pages taken where the kernel offers them, and a clear
// refusal of an unknown MAESTRO_HOST_ALLOCATOR. Its own binary: the allocator
// is the whole process's.
#include "runtime/host_allocator.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace maestro::runtime {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// This process's resident set, bytes (/proc/self/statm).
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// A /proc/self/smaps_rollup field, bytes (-1 when absent).
int64_t SmapsRollupBytes(const std::string& field) {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) != 0) continue;
    std::istringstream words(line.substr(field.size() + 1));
    int64_t kib = 0;
    words >> kib;
    return kib * 1024;
  }
  return -1;
}

// A float tensor of `bytes`, every page written.
torch::Tensor Filled(int64_t bytes) {
  return torch::ones({bytes / 4}, torch::kFloat32);
}

class HostAllocator : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("MAESTRO_HOST_ALLOCATOR", "huge-pages", 1);
    auto installed = InstallHostAllocator();
    unsetenv("MAESTRO_HOST_ALLOCATOR");
    ASSERT_TRUE(installed.ok()) << installed.status().ToString();
    ASSERT_TRUE(*installed);
  }
};

TEST_F(HostAllocator, LargeTensorsGetTheirOwnAlignedMappingSmallOnesDoNot) {
  const size_t before = HostAllocatorMappedBytes();
  {
    // Just over 2 MiB: the size glibc maps unaligned, with no room for a
    // huge page ([1024 tokens x 512] fp32 plus a few bytes).
    const torch::Tensor large = Filled(2 * kMiB + 64);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(large.data_ptr()) % kHostHugePageBytes, 0u);
    EXPECT_EQ(HostAllocatorMappedBytes() - before, static_cast<size_t>(2 * kMiB + 4096))
        << "the mapping is the tensor rounded up to 4 KiB pages";
    const torch::Tensor small = Filled(1024);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(small.data_ptr()) % 64, 0u) << "libtorch's 64-byte alignment";
    EXPECT_EQ(HostAllocatorMappedBytes() - before, static_cast<size_t>(2 * kMiB + 4096));
    // The arithmetic on both is unchanged.
    EXPECT_EQ(large.sum().item<float>(), static_cast<float>(large.numel()));
    EXPECT_EQ((small * 2).sum().item<float>(), 512.0f);
  }
  EXPECT_EQ(HostAllocatorMappedBytes(), before) << "both freed";
}

TEST_F(HostAllocator, FreedLargeTensorsLeaveTheResidentSet) {
  // glibc raises its mmap threshold after freeing a large chunk and then
  // serves such sizes from the heap, where freed chunks below the top stay
  // resident: allocate one first so glibc would be in that state.
  { const torch::Tensor warm = Filled(3 * kMiB); }
  std::vector<torch::Tensor> tensors;
  for (int i = 0; i < 48; ++i) tensors.push_back(Filled(3 * kMiB));
  const int64_t held = ResidentBytes();
  for (size_t i = 0; i < tensors.size(); i += 2) tensors[i] = torch::Tensor();  // every other one: heap holes
  const int64_t after = ResidentBytes();
  const int64_t freed = 24 * 3 * kMiB;
  EXPECT_GE(held - after, freed * 9 / 10) << "resident " << held / kMiB << " MiB with all 48 tensors, " << after / kMiB
                                          << " MiB after freeing 24 (" << freed / kMiB << " MiB)";
}

TEST_F(HostAllocator, LargeTensorsAreBackedByHugePagesWhereTheKernelOffersThem) {
  std::ifstream enabled_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string enabled;
  std::getline(enabled_file, enabled);
  if (enabled.find("[never]") != std::string::npos || enabled.empty()) {
    GTEST_SKIP() << "transparent huge pages are off on this machine (" << enabled << ")";
  }
  const int64_t before = SmapsRollupBytes("AnonHugePages");
  ASSERT_GE(before, 0) << "no AnonHugePages in /proc/self/smaps_rollup";
  // Eight tensors just over 2 MiB: glibc maps each unaligned (a huge page
  // fits in none of them), here each starts with one.
  std::vector<torch::Tensor> tensors;
  for (int i = 0; i < 8; ++i) tensors.push_back(Filled(2 * kMiB + 64));
  const int64_t gained = SmapsRollupBytes("AnonHugePages") - before;
  // madvise mode gives huge pages only to advised mappings; half leaves room
  // for a kernel short of free 2 MiB pages.
  EXPECT_GE(gained, 4 * 2 * kMiB) << "transparent huge pages: " << enabled;
}

TEST(HostAllocatorChoice, UnsetOrTorchKeepsLibtorchsAllocatorAndAnythingElseIsRefusedNamingTheChoices) {
  unsetenv("MAESTRO_HOST_ALLOCATOR");
  auto unset = InstallHostAllocator();
  ASSERT_TRUE(unset.ok()) << unset.status().ToString();
  EXPECT_FALSE(*unset);
  setenv("MAESTRO_HOST_ALLOCATOR", "torch", 1);
  auto kept = InstallHostAllocator();
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_FALSE(*kept);
  setenv("MAESTRO_HOST_ALLOCATOR", "hugepages", 1);
  auto refused = InstallHostAllocator();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("MAESTRO_HOST_ALLOCATOR=hugepages"), std::string::npos);
  EXPECT_NE(refused.status().message().find("huge-pages"), std::string::npos);
  EXPECT_NE(refused.status().message().find("torch"), std::string::npos);
  unsetenv("MAESTRO_HOST_ALLOCATOR");
}

}  // namespace
}  // namespace maestro::runtime
