// SPDX-License-Identifier: Apache-2.0
// kill -9 of the fake trainer (a real process driving the SQLite index, the
// HDF5 spool and the checkpoints) at 20 random moments, then a resume to the
// end: every sample of both epochs consumed exactly once, the final weights
// of an uninterrupted run, and the teacher outputs reused (epoch 1 computes
// nothing: the spec reuses them across epochs; epoch 0 recomputes at most the
// uncommitted rows of each killed life).
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "datalayer/sample_index.h"
#include "tests/datalayer/child_process.h"
#include "tests/datalayer/fake_training.h"
#include "tests/datalayer/test_dirs.h"

namespace maestro::datalayer {
namespace {

constexpr int64_t kSamples = 640;
constexpr int64_t kBatch = 8;
constexpr int kCheckpointEvery = 2;
constexpr int kKills = 20;

TEST(Kill9, TwentyRandomKillsThenResumeLosesNothingAndRepeatsNothing) {
  // A real disk (not tmpfs): the point is what survives on it.
  const std::string dir = testing::FreshDir("kill9");
  const std::string manifest = dir + "/m.jsonl";
  ASSERT_TRUE(testing::WriteFakeManifest(manifest, kSamples).ok());
  testing::FakeTrainerOptions ref;
  ref.run_dir = dir + "/reference";
  ref.manifest = manifest;
  ref.batch = kBatch;
  ref.checkpoint_every = kCheckpointEvery;
  ref.row_values = 1024;
  const uint64_t want = testing::RunFakeTrainer(ref).ValueOrDie().weights;

  const std::vector<std::string> argv = {MAESTRO_BIN_DIR "/fake_trainer",
                                         "--run-dir",
                                         dir + "/run",
                                         "--manifest",
                                         manifest,
                                         "--batch",
                                         std::to_string(kBatch),
                                         "--checkpoint-every",
                                         std::to_string(kCheckpointEvery),
                                         "--row-values",
                                         "1024",
                                         "--compute-log",
                                         dir + "/computes.log"};
  // Each life: wait for its first commit (progress), sometimes for one more,
  // then kill it after a random fraction of the time between two commits, so
  // the kills land anywhere inside a step: spool writes, flushes, checkpoint
  // writes, renames, SQLite commits. The delays only choose WHERE a kill
  // lands; correctness never depends on them.
  std::mt19937 rng(20240607);
  std::uniform_real_distribution<double> fraction(0.0, 1.0);
  std::bernoulli_distribution one_more(0.5);
  double commit_interval_us = 3000;  // refined from the observed commits
  int kills = 0;
  int64_t last_committed = -1;
  bool finished_early = false;
  for (int life = 0; life < kKills && !finished_early; ++life) {
    testing::ChildProcess child(argv);
    const int wanted = one_more(rng) ? 2 : 1;
    int seen = 0;
    auto previous = std::chrono::steady_clock::now();
    while (seen < wanted) {
      auto line = child.ReadLine(std::chrono::seconds(60));
      ASSERT_TRUE(line.has_value()) << "life " << life << " made no progress";
      if (line->rfind("start", 0) == 0) continue;
      if (line->rfind("done", 0) == 0) {
        finished_early = true;
        break;
      }
      ASSERT_EQ(line->rfind("committed ", 0), 0u) << *line;
      const int64_t step = std::stoll(line->substr(10));
      EXPECT_GT(step, last_committed) << "a resume must not go back";
      last_committed = step;
      const auto now = std::chrono::steady_clock::now();
      if (seen > 0) {
        const double us = std::chrono::duration<double, std::micro>(now - previous).count();
        commit_interval_us = 0.5 * commit_interval_us + 0.5 * us;
      }
      previous = now;
      ++seen;
    }
    if (finished_early) break;
    ::usleep(static_cast<useconds_t>(fraction(rng) * commit_interval_us));
    child.Signal(SIGKILL);
    const int status = child.Wait();
    if (WIFSIGNALED(status)) ++kills;
    while (auto more = child.ReadLine(std::chrono::milliseconds(0))) {
      if (more->rfind("committed ", 0) == 0) last_committed = std::stoll(more->substr(10));
    }
  }
  EXPECT_EQ(kills, kKills) << "the run is too short for 20 kills";

  testing::ChildProcess final_run(argv);
  std::string out;
  while (auto l = final_run.ReadLine(std::chrono::seconds(60))) out += *l + "\n";
  const int status = final_run.Wait();
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  const auto done = testing::ParseDoneLine(out);
  ASSERT_TRUE(done.has_value()) << out;
  EXPECT_EQ(done->weights, want) << "final weights differ from an uninterrupted run";
  EXPECT_EQ(done->wrong, 0) << "a spool row with wrong values was used";

  auto index = SampleIndex::Open(dir + "/run/index.sqlite").ValueOrDie();
  EXPECT_EQ(index->ConsumedCount(0).ValueOrDie(), kSamples);
  EXPECT_EQ(index->ConsumedCount(1).ValueOrDie(), kSamples);

  // Teacher forwards: every sample of epoch 0 at least once; recomputations
  // only for rows not yet committed when a life was killed; none in epoch 1.
  std::ifstream log(dir + "/computes.log");
  std::map<int64_t, int> epoch0;
  int64_t epoch1 = 0;
  std::string word;
  int64_t epoch = 0, sample = 0;
  while (log >> word >> epoch >> sample) {
    if (epoch == 0)
      ++epoch0[sample];
    else
      ++epoch1;
  }
  EXPECT_EQ(static_cast<int64_t>(epoch0.size()), kSamples);
  int64_t recomputed = 0;
  for (const auto& [id, n] : epoch0) recomputed += n - 1;
  EXPECT_LE(recomputed, int64_t{kKills} * kBatch * kCheckpointEvery);
  EXPECT_EQ(epoch1, 0) << "epoch 1 must reuse the spooled teacher outputs";
  RecordProperty("recomputed_rows", static_cast<int>(recomputed));
  std::printf("kill -9 x%d: %lld teacher rows recomputed of %lld\n", kills, static_cast<long long>(recomputed),
              static_cast<long long>(kSamples));
  index.reset();
  testing::RemoveDir(dir);
}

}  // namespace
}  // namespace maestro::datalayer
