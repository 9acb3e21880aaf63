// SPDX-License-Identifier: Apache-2.0
// kill -9 of the fake trainer (a real process driving the SQLite index, the
// HDF5 spool and the checkpoints), then a resume to the end: every sample of
// both epochs consumed exactly once, the final weights of an uninterrupted
// run, and the teacher outputs reused (epoch 1 computes nothing: the spec
// reuses them across epochs; epoch 0 recomputes at most the uncommitted rows
// of each killed life). The campaign itself: kill9_campaign.h; 100 kills:
// kill9_campaign_slow_test.cc; what a campaign must end with:
// kill9_campaign.h ExpectExactResume.
#include <gtest/gtest.h>

#include <cstdio>

#include "tests/datalayer/kill9_campaign.h"

namespace maestro::datalayer {
namespace {

TEST(Kill9, TwentyRandomKillsThenResumeLosesNothingAndRepeatsNothing) {
  testing::CampaignOptions c;
  c.name = "kill9";
  const testing::CampaignResult r = testing::RunKill9Campaign(c);
  testing::ExpectExactResume(c, r);
  RecordProperty("recomputed_rows", static_cast<int>(r.recomputed0));
  std::printf("kill -9 x%d: %lld teacher rows recomputed of %lld\n", r.kills, static_cast<long long>(r.recomputed0),
              static_cast<long long>(c.samples));
}

// Every life dies right before the superblock write of one of its spool
// flushes: the chunk index and the dataset's extent on disk already name the
// chunk allocated since the last flush, the superblock's end of allocation
// (EOA) does not. The next life must take writes into that file and keep
// its committed rows (docs/datalayer.md, "kill -9 inside H5Fflush").
TEST(Kill9, KillsBeforeTheSuperblockWriteKeepEveryCommittedRow) {
  testing::CampaignOptions c;
  c.name = "kill9-superblock";
  c.p_superblock = 1.0;
  c.superblock_min = 2;  // every life commits at least once before it dies
  c.samples = 1280;      // 80 commits in epoch 0: every life writes rows (epoch 1 writes none)
  c.seed = 24;
  const testing::CampaignResult r = testing::RunKill9Campaign(c);
  EXPECT_EQ(r.self_kills, r.kills) << "every life must die at its kill point inside a flush";
  EXPECT_EQ(r.corrupt_files, 0) << "a spool file was moved aside: its committed rows were dropped";
  testing::ExpectExactResume(c, r);
  std::printf(
      "kill -9 before the superblock write x%d: %lld rows recomputed in epoch 0, %lld in epoch 1, %d files "
      "moved aside\n",
      r.kills, static_cast<long long>(r.recomputed0), static_cast<long long>(r.computed1), r.corrupt_files);
}

}  // namespace
}  // namespace maestro::datalayer
