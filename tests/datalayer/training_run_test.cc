// SPDX-License-Identifier: Apache-2.0
#include "datalayer/training_run.h"

#include <gtest/gtest.h>

#include <filesystem>

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
