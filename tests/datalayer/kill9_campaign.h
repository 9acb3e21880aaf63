// SPDX-License-Identifier: Apache-2.0
// A kill -9 campaign against the fake_trainer process (real files on disk):
// N lives, each killed with SIGKILL, then one life that runs to the end; the
// outcome for the tests in kill9_test.cc and kill9_campaign_slow_test.cc to
// check (ExpectExactResume). A life is killed by the test after its first or second commit plus
// a seeded random fraction of the time between two commits (so kills land
// anywhere inside a step), or kills itself right before a chosen write of
// HDF5's (fake_trainer --kill-at, tests/datalayer/kill_points.h) with the
// timed kill as a backstop (a life that writes no spool row, e.g. in epoch
// 1, never reaches its kill point).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "datalayer/sample_index.h"
#include "tests/datalayer/child_process.h"
#include "tests/datalayer/fake_training.h"
#include "tests/datalayer/test_dirs.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::datalayer::testing {

struct CampaignOptions {
  std::string name;  // scratch directory name
  int64_t samples = 640;
  int64_t batch = 8;
  int checkpoint_every = 2;
  int kills = 20;
  uint32_t seed = 20240607;
  // Chances that a life arms a kill point inside HDF5's writes (the rest
  // are timed kills only): before its n-th spool pwrite (n in 1..12), or
  // before its n-th superblock write (the superblock is the last write of
  // every H5Fflush).
  double p_spool_write = 0.0;
  double p_superblock = 0.0;
  int64_t superblock_min = 1;  // n in superblock_min .. superblock_min + 2 (2: every life commits once)
};

struct CampaignResult {
  int kills = 0;
  int self_kills = 0;  // lives that died at their kill point inside HDF5's writes
  bool final_ok = false;
  uint64_t weights = 0, want = 0;
  int64_t wrong = -1;
  int64_t consumed0 = 0, consumed1 = 0;
  int64_t distinct0 = 0;    // samples of epoch 0 computed at least once
  int64_t recomputed0 = 0;  // teacher forwards in epoch 0 beyond the first per sample
  int64_t computed1 = 0;    // teacher forwards in epoch 1 (all must come from the spool)
  int corrupt_files = 0;    // times a spool file was moved aside (<file>.corrupt)
  std::string final_output;
};

// Removes the spool files moved aside (<file>.corrupt) in `dir`; returns how
// many there were. A second move of the same file would replace the first.
inline int TakeCorruptFiles(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".corrupt") {
      std::filesystem::remove(entry.path(), ec);
      ++n;
    }
  }
  return n;
}

inline CampaignResult RunKill9Campaign(const CampaignOptions& c) {
  CampaignResult r;
  const std::string dir = FreshDir(c.name);  // a real disk (not tmpfs): the point is what survives on it
  const std::string manifest = dir + "/m.jsonl";
  EXPECT_TRUE(WriteFakeManifest(manifest, c.samples).ok());
  FakeTrainerOptions ref;
  ref.run_dir = dir + "/reference";
  ref.manifest = manifest;
  ref.batch = c.batch;
  ref.checkpoint_every = c.checkpoint_every;
  ref.row_values = 1024;
  r.want = RunFakeTrainer(ref).ValueOrDie().weights;

  const std::vector<std::string> argv = {std::string(MAESTRO_BIN_DIR) + "/fake_trainer",
                                         "--run-dir",
                                         dir + "/run",
                                         "--manifest",
                                         manifest,
                                         "--batch",
                                         std::to_string(c.batch),
                                         "--checkpoint-every",
                                         std::to_string(c.checkpoint_every),
                                         "--row-values",
                                         "1024",
                                         "--compute-log",
                                         dir + "/computes.log"};
  // The delays only choose WHERE a timed kill lands; correctness never
  // depends on them.
  std::mt19937 rng(c.seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::bernoulli_distribution one_more(0.5);
  double commit_interval_us = 3000;  // refined from the observed commits
  int64_t last_committed = -1;
  bool finished_early = false;
  for (int life = 0; r.kills < c.kills && !finished_early; ++life) {
    std::vector<std::string> args = argv;
    const double mode = uniform(rng);
    // An armed life gets a few commits to reach its kill point before the
    // timed backstop (it writes no spool row in epoch 1).
    int wanted = one_more(rng) ? 2 : 1;  // commits before the timed kill
    if (mode < c.p_spool_write) {
      args.insert(args.end(), {"--kill-at", "spool-write:" + std::to_string(1 + rng() % 12)});
      wanted = 4;  // 12 writes are at most 3 commits
    } else if (mode < c.p_spool_write + c.p_superblock) {
      // The n-th flush of a life on an existing file; the first life creates
      // the file: its first two superblock writes are the creation's.
      const int64_t n = c.superblock_min + static_cast<int64_t>(rng() % 3) + (life == 0 ? 2 : 0);
      args.insert(args.end(), {"--kill-at", "superblock:" + std::to_string(n)});
      // A flush writes the superblock only when something was allocated
      // since the last one: not after a resume inside a chunk.
      wanted = static_cast<int>(n) + 4;
    }
    ChildProcess child(args);
    int seen = 0;
    bool died = false;
    auto previous = std::chrono::steady_clock::now();
    while (seen < wanted) {
      auto line = child.ReadLine(std::chrono::seconds(60));
      if (!line) {  // EOF: the life killed itself at its kill point (or hung: then it is killed here)
        EXPECT_LT(std::chrono::steady_clock::now() - previous, std::chrono::seconds(60))
            << "life " << life << " made no progress";
        child.Signal(SIGKILL);
        died = true;
        break;
      }
      if (line->rfind("start", 0) == 0) continue;
      if (line->rfind("done", 0) == 0) {
        finished_early = true;
        break;
      }
      EXPECT_EQ(line->rfind("committed ", 0), 0u) << *line;
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
    if (!died) {
      ::usleep(static_cast<useconds_t>(uniform(rng) * commit_interval_us));
      child.Signal(SIGKILL);
    }
    const int status = child.Wait();
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      ++r.kills;
      if (died) ++r.self_kills;
    } else {
      ADD_FAILURE() << "life " << life << " ended with status " << status << " instead of SIGKILL";
      if (died) break;
    }
    const std::string more = child.Rest();
    for (std::size_t at = 0; (at = more.find("committed ", at)) != std::string::npos; at += 10) {
      last_committed = std::stoll(more.substr(at + 10));
    }
    r.corrupt_files += TakeCorruptFiles(dir + "/run/spool");
  }

  ChildProcess final_run(argv);
  while (auto l = final_run.ReadLine(std::chrono::seconds(60))) r.final_output += *l + "\n";
  const int status = final_run.Wait();
  r.final_ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (const auto done = ParseDoneLine(r.final_output)) {
    r.weights = done->weights;
    r.wrong = done->wrong;
  }
  {
    auto index = SampleIndex::Open(dir + "/run/index.sqlite").ValueOrDie();
    r.consumed0 = index->ConsumedCount(0).ValueOrDie();
    r.consumed1 = index->ConsumedCount(1).ValueOrDie();
  }
  // Teacher forwards, from fake_trainer's log: "compute <epoch> <sample>".
  std::ifstream log(dir + "/computes.log");
  std::map<int64_t, int> epoch0;
  std::string word;
  int64_t epoch = 0, sample = 0;
  while (log >> word >> epoch >> sample) {
    if (epoch == 0)
      ++epoch0[sample];
    else
      ++r.computed1;
  }
  r.distinct0 = static_cast<int64_t>(epoch0.size());
  for (const auto& [id, n] : epoch0) r.recomputed0 += n - 1;
  r.corrupt_files += TakeCorruptFiles(dir + "/run/spool");
  RemoveDir(dir);
  return r;
}

// What campaign `c` must end with: every kill landed, the last life ran to
// the end (fatal otherwise) with the weights of an uninterrupted run and no
// wrong spool row; every sample of both epochs consumed exactly once; epoch
// 0 recomputed only rows not yet committed when a life was killed, epoch 1
// nothing (it reuses the spooled teacher outputs).
inline void ExpectExactResume(const CampaignOptions& c, const CampaignResult& r) {
  EXPECT_EQ(r.kills, c.kills) << "the run is too short for " << c.kills << " kills";
  ASSERT_TRUE(r.final_ok) << r.final_output;
  EXPECT_EQ(r.weights, r.want) << "final weights differ from an uninterrupted run";
  EXPECT_EQ(r.wrong, 0) << "a spool row with wrong values was used";
  EXPECT_EQ(r.consumed0, c.samples);
  EXPECT_EQ(r.consumed1, c.samples);
  EXPECT_EQ(r.distinct0, c.samples);
  // Recomputations only for rows not yet committed when a life was killed.
  EXPECT_LE(r.recomputed0, int64_t{c.kills} * c.batch * c.checkpoint_every);
  EXPECT_EQ(r.computed1, 0) << "epoch 1 must reuse the spooled teacher outputs (recomputed rows in epoch 1 must be 0)";
}

}  // namespace maestro::datalayer::testing
