// SPDX-License-Identifier: Apache-2.0
// cli/subprocess.h: the huge-page malloc tunable `maestro` hands its workers
// (added, appended, or left as the user set it), and a child started by
// RunProcess inheriting it.
#include "cli/subprocess.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace maestro::cli {
namespace {

TEST(HugePageMalloc, AddsTheTunableWhereNoneIsSet) {
  EXPECT_EQ(WithHugePageMalloc(nullptr), "glibc.malloc.hugetlb=1");
  EXPECT_EQ(WithHugePageMalloc(""), "glibc.malloc.hugetlb=1");
}

TEST(HugePageMalloc, AppendsToOtherTunablesAndKeepsAUsersOwnChoice) {
  EXPECT_EQ(WithHugePageMalloc("glibc.malloc.mmap_threshold=131072"),
            "glibc.malloc.mmap_threshold=131072:glibc.malloc.hugetlb=1");
  EXPECT_EQ(WithHugePageMalloc("glibc.malloc.hugetlb=0"), "glibc.malloc.hugetlb=0");
  EXPECT_EQ(WithHugePageMalloc("glibc.rtld.nns=8:glibc.malloc.hugetlb=2"), "glibc.rtld.nns=8:glibc.malloc.hugetlb=2");
}

TEST(HugePageMalloc, AChildOfRunProcessInheritsIt) {
  ASSERT_EQ(setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=131072", 1), 0);
  PreferHugePagesForChildren();
  auto rc = RunProcess(
      {"/bin/sh", "-c", "test \"$GLIBC_TUNABLES\" = glibc.malloc.mmap_threshold=131072:glibc.malloc.hugetlb=1"});
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  EXPECT_EQ(*rc, 0) << "the child's GLIBC_TUNABLES differs";
  unsetenv("GLIBC_TUNABLES");
}

}  // namespace
}  // namespace maestro::cli
