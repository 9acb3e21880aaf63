// SPDX-License-Identifier: Apache-2.0
// The spool's promise as a figure (issue #24): after a campaign of 100
// random kill -9s, the next epoch reuses every committed teacher row:
// recomputed rows in epoch 1 = 0. The kills are a mix: a third at random
// moments between commits, a third right before a random write of the spool
// file (raw chunks, chunk index, object headers, superblock), a third right
// before the superblock write that ends a flush. Label `slow` (~10 s on 2
// loaded cores); the 20-kill test in kill9_test.cc runs in CI.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/datalayer/kill9_campaign.h"

namespace maestro::datalayer {
namespace {

TEST(Kill9Campaign, HundredRandomKillsThenEpochOneRecomputesNothing) {
  testing::CampaignOptions c;
  c.name = "kill9-campaign";
  c.samples = 1600;  // 100 commits per epoch: room for 100 kills
  c.kills = 100;
  c.seed = 100;
  c.p_spool_write = 1.0 / 3;
  c.p_superblock = 1.0 / 3;
  const testing::CampaignResult r = testing::RunKill9Campaign(c);
  ASSERT_NO_FATAL_FAILURE(testing::ExpectExactResume(c, r));
  EXPECT_EQ(r.corrupt_files, 0) << "a spool file was moved aside: its committed rows were dropped";
  RecordProperty("recomputed_rows_epoch0", static_cast<int>(r.recomputed0));
  RecordProperty("recomputed_rows_epoch1", static_cast<int>(r.computed1));
  std::printf(
      "kill -9 x%d (%d inside HDF5's writes): %lld rows recomputed in epoch 0, %lld in epoch 1 (of %lld), %d "
      "files moved aside\n",
      r.kills, r.self_kills, static_cast<long long>(r.recomputed0), static_cast<long long>(r.computed1),
      static_cast<long long>(c.samples), r.corrupt_files);
}

}  // namespace
}  // namespace maestro::datalayer
