// SPDX-License-Identifier: Apache-2.0
// The local GPU inventory's seam (launcher/gpu_inventory.h, issue #43 point
// 2): a fake inventory from MAESTRO_FAKE_GPUS parses to the GPUs it names,
// malformed ones are refused naming the part, discovery uses it when set,
// and `maestro doctor` prints what it found.
#include "launcher/gpu_inventory.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>

#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"

namespace maestro::launcher {
namespace {

using testing::RunCaptured;
using testing::RunResult;

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(GpuInventory, AFakeInventoryNamesItsGpusInOrder) {
  auto eight = ParseFakeGpus("8xh100_sxm");
  ASSERT_TRUE(eight.ok()) << eight.status().ToString();
  ASSERT_EQ(eight->size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ((*eight)[static_cast<size_t>(i)].index, i);
    EXPECT_EQ((*eight)[static_cast<size_t>(i)].name, "h100_sxm");
    EXPECT_EQ((*eight)[static_cast<size_t>(i)].memory_bytes, 0) << "no memory given";
  }
  auto mixed = ParseFakeGpus("2xh200:141,1xl40s");
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  ASSERT_EQ(mixed->size(), 3u);
  EXPECT_EQ((*mixed)[1].name, "h200");
  EXPECT_EQ((*mixed)[1].memory_bytes, 141 * kGiB);
  EXPECT_EQ((*mixed)[2].name, "l40s");
  EXPECT_EQ((*mixed)[2].index, 2);
  EXPECT_TRUE(ParseFakeGpus("0").ValueOrDie().empty());
}

TEST(GpuInventory, AMalformedFakeIsRefusedNamingThePart) {
  for (const char* bad : {"", "8", "x", "0xh100", "8xh100,", "8x", "8xh1 00", "8xh100:0", "8xh100:lots", "-1xh100",
                          "9999xh100", "8xh100;rm"}) {
    auto r = ParseFakeGpus(bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("MAESTRO_FAKE_GPUS"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find("<count>x<type>"), std::string::npos) << r.status().ToString();
  }
}

TEST(GpuInventory, DiscoveryUsesTheFakeWhenSetAndDescribesIt) {
  ::setenv(kFakeGpusEnv, "2xh200:141,1xl40s", 1);
  auto fake = DiscoverLocalGpus();
  ::unsetenv(kFakeGpusEnv);
  ASSERT_TRUE(fake.ok()) << fake.status().ToString();
  EXPECT_EQ(fake->gpus.size(), 3u);
  EXPECT_EQ(DescribeGpus(*fake), "2 x h200 (141 GiB), 1 x l40s (MAESTRO_FAKE_GPUS=2xh200:141,1xl40s)");
  ::setenv(kFakeGpusEnv, "0", 1);
  auto none = DiscoverLocalGpus();
  ::unsetenv(kFakeGpusEnv);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->gpus.empty());
  EXPECT_EQ(DescribeGpus(*none), "none (MAESTRO_FAKE_GPUS says none)");
  // Without the fake, the machine answers: GPUs, or none with a reason.
  auto real = DiscoverLocalGpus();
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  if (real->gpus.empty()) {
    EXPECT_FALSE(real->why_none.empty());
  }
}

TEST(GpuInventory, MaestroDoctorPrintsTheGpusItFoundOrRefusesABadFake) {
  const std::string maestro = std::string(MAESTRO_BIN_DIR) + "/maestro";
  const RunResult found = RunCaptured({maestro, "doctor"}, {{kFakeGpusEnv, "8xh100_sxm:80"}});
  EXPECT_NE(found.output.find("GPUs     8 x h100_sxm (80 GiB) (MAESTRO_FAKE_GPUS=8xh100_sxm:80)"), std::string::npos)
      << found.output;
  const RunResult bad = RunCaptured({maestro, "doctor"}, {{kFakeGpusEnv, "eight"}});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("'eight'"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace maestro::launcher
