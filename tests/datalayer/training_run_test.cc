// SPDX-License-Identifier: Apache-2.0
#include "datalayer/training_run.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/datalayer/fake_training.h"
#include "tests/datalayer/test_dirs.h"

namespace maestro::datalayer {
namespace {

RunOptions Options(const std::string& dir) {
  RunOptions o;
  o.run_dir = dir + "/run";
  o.seed = 3;
  o.global_batch_size = 4;
  o.keep_last_checkpoints = 2;
  return o;
}

CheckpointData State(int64_t step, const std::string& weights) {
  CheckpointData d;
  d.step = step;
  d.sections["student"] = SectionState{weights, "opt"};
  d.rng_states["torch"] = "r";
  return d;
}

TEST(TrainingRun, ResumeLoadsTheLastCommittedCheckpointAndIgnoresNewerFiles) {
  const std::string dir = testing::FreshDir("run_resume");
  ASSERT_TRUE(testing::WriteFakeManifest(dir + "/m.jsonl", 20).ok());
  {
    auto run = TrainingRun::Open(Options(dir)).ValueOrDie();
    ASSERT_TRUE(run->index().IngestManifest(dir + "/m.jsonl").ok());
    EXPECT_FALSE(run->Resume().ValueOrDie().has_value());
    for (int64_t step = 0; step < 3; ++step) {
      auto batch = run->NextBatch().ValueOrDie();
      EXPECT_EQ(batch.step, step);
      ASSERT_TRUE(run->StepDone({batch.step, batch.sample_ids, "{}"}).ok());
      if (step != 0) {
        ASSERT_TRUE(run->Checkpoint(State(step, "w" + std::to_string(step))).ok());
      }
    }
    // A crash after the checkpoint file of step 3 became durable but before
    // its commit: the file exists, the step log does not name it.
    ASSERT_TRUE(run->checkpoints().Write(State(3, "w3")).ok());
  }
  auto run = TrainingRun::Open(Options(dir)).ValueOrDie();
  ASSERT_TRUE(run->index().IngestManifest(dir + "/m.jsonl").ok());
  auto state = run->Resume().ValueOrDie();
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->step, 2);
  EXPECT_EQ(state->next_step, 3);
  EXPECT_EQ(state->sections.at("student").model, "w2");
  EXPECT_EQ(run->next_step(), 3);
  EXPECT_EQ(run->checkpoints().ListSteps().ValueOrDie(), (std::vector<int64_t>{1, 2}));
  // Steps 0 and 1 were committed together with checkpoint 1.
  EXPECT_EQ(run->index().ConsumedCount(0).ValueOrDie(), 12);
}

TEST(TrainingRun, KeepsTheLastNCheckpointsAndRefusesAnotherSeed) {
  const std::string dir = testing::FreshDir("run_prune");
  ASSERT_TRUE(testing::WriteFakeManifest(dir + "/m.jsonl", 40).ok());
  {
    auto run = TrainingRun::Open(Options(dir)).ValueOrDie();
    ASSERT_TRUE(run->index().IngestManifest(dir + "/m.jsonl").ok());
    ASSERT_TRUE(run->Resume().ok());
    for (int64_t step = 0; step < 5; ++step) {
      auto batch = run->NextBatch().ValueOrDie();
      ASSERT_TRUE(run->StepDone({batch.step, batch.sample_ids, "{}"}).ok());
      ASSERT_TRUE(run->Checkpoint(State(step, "w")).ok());
    }
    EXPECT_EQ(run->checkpoints().ListSteps().ValueOrDie(), (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(run->Checkpoint(State(5, "w")).code(), StatusCode::kFailedPrecondition) << "no finished step";
  }
  RunOptions other = Options(dir);
  other.seed = 4;
  auto run = TrainingRun::Open(other).ValueOrDie();
  auto resumed = run->Resume();
  EXPECT_EQ(resumed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(resumed.status().message().find("seed 3"), std::string::npos) << resumed.status().ToString();
}

// An asynchronous save commits a step that later finished steps follow:
// only the steps up to the checkpoint's are committed (their samples
// consumed), the later ones stay pending for the next checkpoint; a resume
// continues after the checkpoint's step. A step that is not pending is
// refused, naming the pending range.
TEST(TrainingRun, ACheckpointOfAnEarlierPendingStepCommitsOnlyTheStepsUpToIt) {
  const std::string dir = testing::FreshDir("run_prefix_commit");
  ASSERT_TRUE(testing::WriteFakeManifest(dir + "/m.jsonl", 40).ok());
  {
    auto run = TrainingRun::Open(Options(dir)).ValueOrDie();
    ASSERT_TRUE(run->index().IngestManifest(dir + "/m.jsonl").ok());
    ASSERT_TRUE(run->Resume().ok());
    for (int64_t step = 0; step < 4; ++step) {
      auto batch = run->NextBatch().ValueOrDie();
      ASSERT_TRUE(run->StepDone({batch.step, batch.sample_ids, "{}"}).ok());
    }
    ASSERT_TRUE(run->Checkpoint(State(1, "w1")).ok());
    EXPECT_EQ(run->pending_steps(), 2) << "steps 2 and 3 wait for the next checkpoint";
    EXPECT_EQ(run->index().ConsumedCount(0).ValueOrDie(), 2 * 4);
    const Status refused = run->Checkpoint(State(1, "again"));
    EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.message().find("2..3"), std::string::npos) << refused.ToString();
  }
  auto run = TrainingRun::Open(Options(dir)).ValueOrDie();
  ASSERT_TRUE(run->index().IngestManifest(dir + "/m.jsonl").ok());
  auto state = run->Resume().ValueOrDie();
  ASSERT_TRUE(state.has_value());
  EXPECT_EQ(state->step, 1);
  EXPECT_EQ(state->sections.at("student").model, "w1");
  EXPECT_EQ(run->next_step(), 2) << "the steps after the checkpoint are redone";
  for (int64_t step = 2; step < 5; ++step) {
    auto batch = run->NextBatch().ValueOrDie();
    ASSERT_EQ(batch.step, step);
    ASSERT_TRUE(run->StepDone({batch.step, batch.sample_ids, "{}"}).ok());
  }
  ASSERT_TRUE(run->Checkpoint(State(3, "w3")).ok());
  ASSERT_TRUE(run->Checkpoint(State(4, "w4")).ok());
  EXPECT_EQ(run->pending_steps(), 0);
  EXPECT_EQ(run->index().ConsumedCount(0).ValueOrDie(), 5 * 4) << "every sample of steps 0..4 consumed once";
}

// An asynchronous save's commit off the step loop: TakeCheckpoint on the
// loop's thread, CommitTaken on another while the loop reads the next
// batches and finishes steps through its own connection. The commit spares
// a later checkpoint's directory (in the writing), the next commit removes
// an older uncommitted one, and every step is committed once, in order.
TEST(TrainingRun, ACommitOnAnotherThreadRunsWhileTheLoopGoesOn) {
  const std::string dir = testing::FreshDir("run_commit_thread");
  ASSERT_TRUE(testing::WriteFakeManifest(dir + "/m.jsonl", 40).ok());
  auto run = TrainingRun::Open(Options(dir)).ValueOrDie();
  ASSERT_TRUE(run->index().IngestManifest(dir + "/m.jsonl").ok());
  ASSERT_TRUE(run->Resume().ok());
  auto finish_step = [&] {
    auto batch = run->NextBatch().ValueOrDie();
    ASSERT_TRUE(run->StepDone({batch.step, batch.sample_ids, "{}"}).ok());
  };
  finish_step();  // step 0
  finish_step();  // step 1
  auto taken = run->TakeCheckpoint(State(1, "w1"));
  ASSERT_TRUE(taken.ok()) << taken.status().ToString();
  EXPECT_EQ(taken->steps.size(), 2u);
  EXPECT_EQ(run->pending_steps(), 0);
  // The ranks already write the next checkpoint (step 3) when the commit runs.
  const std::string next = TrainingRun::ShardedCheckpointDir(Options(dir).run_dir, 3);
  std::filesystem::create_directories(next);
  std::ofstream(next + "/" + RankShardFileName(0)) << "in the writing";
  Status committed;
  std::thread commit([&] { committed = run->CommitTaken(*taken); });
  for (int i = 0; i < 4; ++i) finish_step();  // steps 2..5, beside the commit
  commit.join();
  ASSERT_TRUE(committed.ok()) << committed.ToString();
  auto point = run->index().LastCommit().ValueOrDie();
  EXPECT_EQ(point.last_step, 1);
  EXPECT_EQ(point.checkpoint_step, 1);
  EXPECT_EQ(run->pending_steps(), 4);
  EXPECT_TRUE(std::filesystem::exists(next)) << "a later checkpoint's directory is spared";
  // The loop's next commit (step 5): steps 2..5; the uncommitted step-3
  // directory is older than it now, and goes.
  ASSERT_TRUE(run->Checkpoint(State(5, "w5")).ok());
  EXPECT_EQ(run->index().LastCommit().ValueOrDie().last_step, 5);
  EXPECT_EQ(run->index().ConsumedCount(0).ValueOrDie(), 24);  // 6 steps of 4
  EXPECT_FALSE(std::filesystem::exists(next));
  EXPECT_EQ(run->checkpoints().ListSteps().ValueOrDie(), (std::vector<int64_t>{1, 5}));
}

TEST(TrainingRun, AnUnwritableRunDirectoryIsAClearError) {
  RunOptions o;
  o.run_dir = "/proc/maestro-no-such-dir/run";
  o.seed = 1;
  o.global_batch_size = 2;
  auto run = TrainingRun::Open(o);
  ASSERT_FALSE(run.ok());
  EXPECT_NE(run.status().message().find("/proc/maestro-no-such-dir"), std::string::npos) << run.status().ToString();
}

}  // namespace
}  // namespace maestro::datalayer
