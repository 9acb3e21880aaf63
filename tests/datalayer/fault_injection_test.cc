// SPDX-License-Identifier: Apache-2.0
// Crash between any two writes: for every k, a child process runs the fake
// trainer through CrashEnv and dies at durable operation k (a torn write when
// k is an append); then recovery opens the same run directory and finishes
// it. Invariants checked after every k: recovery succeeds (nothing corrupt is
// loaded), every sample of every epoch is consumed exactly once, the final
// weights equal an uninterrupted run's, no spool row with wrong values was
// ever used, and no temporary or uncommitted checkpoint file survives. The
// fake trainer's checkpoints are sharded (two ranks' files, then the
// metadata, then the index transaction: every one a crash point).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "datalayer/crash_env.h"
#include "datalayer/sample_index.h"
#include "datalayer/sharded_checkpoint.h"
#include "tests/datalayer/fake_training.h"
#include "tests/datalayer/test_dirs.h"

namespace maestro::datalayer {
namespace {

constexpr int64_t kSamples = 24;

testing::FakeTrainerOptions Options(const std::string& dir, const std::string& manifest) {
  testing::FakeTrainerOptions o;
  o.run_dir = dir;
  o.manifest = manifest;
  o.batch = 5;  // 5 steps per epoch, the last one short
  o.epochs = 2;
  o.checkpoint_every = 2;
  o.row_values = 16384;  // 64 KiB rows: written to the file at Put (the direct path)
  return o;
}

TEST(FaultInjection, CrashAtEveryDurableOperationThenRecoverExactlyOnce) {
  const std::string root = testing::FreshDir("fault", /*fast_fsync=*/true);
  const std::string manifest = root + "/m.jsonl";
  ASSERT_TRUE(testing::WriteFakeManifest(manifest, kSamples).ok());

  // An uninterrupted run: the reference weights and the number of operations.
  CrashEnv counting(/*crash_at=*/-1);
  auto reference = testing::RunFakeTrainer(Options(root + "/reference", manifest), &counting).ValueOrDie();
  const long total_ops = counting.ops();
  ASSERT_GT(total_ops, 30);

  long crashed = 0;
  for (long k = 1; k <= total_ops; ++k) {
    SCOPED_TRACE("crash at durable operation " + std::to_string(k) + " of " + std::to_string(total_ops));
    const std::string dir = root + "/k" + std::to_string(k);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      CrashEnv env(k);
      auto r = testing::RunFakeTrainer(Options(dir, manifest), &env);
      ::_exit(r.ok() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), kCrashExitCode) << "the child must die at operation k";
    ++crashed;

    auto recovered = testing::RunFakeTrainer(Options(dir, manifest));
    ASSERT_TRUE(recovered.ok()) << recovered.status().ToString();
    EXPECT_EQ(recovered->weights, reference.weights);
    EXPECT_EQ(recovered->wrong_rows_used, 0);

    auto index = SampleIndex::Open(dir + "/index.sqlite").ValueOrDie();
    EXPECT_EQ(index->ConsumedCount(0).ValueOrDie(), kSamples);
    EXPECT_EQ(index->ConsumedCount(1).ValueOrDie(), kSamples);
    EXPECT_EQ(index->LastCommit().ValueOrDie().last_step, 9);
    // Only committed sharded checkpoints are left: no torn rank file, no
    // directory without its metadata, nothing temporary.
    for (const auto& entry : std::filesystem::directory_iterator(dir + "/checkpoints")) {
      EXPECT_TRUE(entry.is_directory()) << entry.path();
      EXPECT_TRUE(std::filesystem::exists(entry.path() / kShardedCheckpointMetadata)) << entry.path();
      for (const auto& file : std::filesystem::directory_iterator(entry.path())) {
        EXPECT_NE(file.path().extension(), ".tmp") << file.path();
      }
    }
    index.reset();
    testing::RemoveDir(dir);
  }
  EXPECT_EQ(crashed, total_ops);
  std::printf("crashed and recovered at each of %ld durable operations\n", total_ops);
  testing::RemoveDir(root);
}

}  // namespace
}  // namespace maestro::datalayer
