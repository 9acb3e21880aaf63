// SPDX-License-Identifier: Apache-2.0
// A run that moves to fewer nodes (issue #39, "On the local Slurm cluster";
// labels slurm;e2e;runtime): a KD spec (the tiny KD's models, the teacher
// from the seed) compiled by maestro-compile for 4 nodes of 1 GPU trains as
// a heterogeneous job, is preempted (USR1 to the batch script: it
// checkpoints and exits 85; the spec does not requeue, as when the nodes it
// had are gone), and the same spec recompiled for 3 nodes, submitted with
// the same work_dir, resumes the run directory: another layout (the
// student's data-parallel degree changes), the exact next sample, every
// sample of the 12 steps consumed once, and the losses of the one-process
// reference within 1e-5 (the layouts sum gradients in other orders).
// The README's "resume on another allocation" recipe, as a user runs it.
// About 25 s alone on two cores: two heterogeneous jobs (each start on the
// local cluster takes seconds per component) and a reference run. (It was
// ~150 s: the preempted job was requeued and the test waited out the 120 s
// BeginTime Slurm gives a requeued job.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "datalayer/sample_index.h"
#include "plan/plan.h"
#include "tests/fixtures/specs.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/e2e_slurm_util.h"
#include "tests/runtime/run_dir_util.h"
#include "tests/slurm/slurm_test_util.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using testing::LocalSlurmCluster;
using testing::SlurmJobInfo;

constexpr int64_t kSteps = 12;
constexpr int64_t kGlobalBatch = 12;  // divides among 2, 3 and 4 replicas

// specs/tiny_kd.toml for `nodes` nodes of one GPU: the teacher built from
// the seed (its `init` line dropped), 12 steps, a checkpoint every 3, no
// requeue, the built-in text, the run in <--chdir>/run.
std::string Spec(int nodes) {
  std::string text;
  std::istringstream in(runtime_testing::ReadText((fs::path(MAESTRO_SOURCE_DIR) / "specs" / "tiny_kd.toml").string()));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("init = ", 0) != 0) text += line + "\n";
  }
  return fixtures::WithKeys(text, {{"job", "name", "\"reshard\""},
                                   {"job", "requeue", "false"},
                                   {"job", "steps", std::to_string(kSteps)},
                                   {"job", "checkpoint_every", "3"},
                                   {"job", "output", "\"reshard-%j.out\""},
                                   {"job", "work_dir", "\"run\""},
                                   {"cluster", "nodes", std::to_string(nodes)},
                                   {"cluster", "gpus_per_node", "1"},
                                   {"data", "global_batch", std::to_string(kGlobalBatch)},
                                   {"data", "dataset", "\"text\""}});
}

// Compiles Spec(nodes) into <base>/n<nodes> (job.sbatch, plan.json); its
// plan's world size.
int Compile(const fs::path& base, int nodes, const fs::path& worker) {
  const fs::path dir = base / ("n" + std::to_string(nodes));
  fs::create_directories(dir);
  std::ofstream(dir / "spec.toml") << Spec(nodes);
  auto compile = testing::RunCommand({std::string(MAESTRO_BIN_DIR) + "/maestro-compile", (dir / "spec.toml").string(),
                                      "-o", dir.string(), "--worker", worker.string(), "--grouping", "sectioned"},
                                     {}, seconds(60));
  EXPECT_TRUE(compile.ok() && compile->exit_code == 0) << (compile.ok() ? compile->output : "");
  auto plan = plan::LoadPlan((dir / "plan.json").string());
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  return plan.ok() ? plan->world_size() : 0;
}

using runtime_testing::WaitOrCancel;

TEST(E2eSlurm, ARunPreemptedOnFourNodesResumesRecompiledForThree) {
  auto cluster = LocalSlurmCluster::FromEnvironment();
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  const fs::path base = fs::path(MAESTRO_TEST_TMP) / ("e2e_reshard_" + std::to_string(::getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  const fs::path worker = base / "worker.sh";
  std::ofstream(worker) << "#!/bin/sh\nexec '" << MAESTRO_BIN_DIR
                        << "/maestro-worker' --no-eval --no-progress \"$@\"\n";
  fs::permissions(worker, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  const int four = Compile(base, 4, worker);
  const int three = Compile(base, 3, worker);
  ASSERT_EQ(four, 4);
  ASSERT_EQ(three, 3);
  const fs::path run_dir = base / "run";

  // 1. Four nodes, preempted after a few steps.
  auto id = cluster->Submit((base / "n4" / "job.sbatch").string(), {"--chdir=" + base.string()});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const auto deadline = std::chrono::steady_clock::now() + seconds(120);
  while (runtime_testing::Losses(run_dir.string()).size() < 5) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no training progress";
    auto state = cluster->ShowJob(*id);
    ASSERT_TRUE(state.ok());
    ASSERT_FALSE(state->finished()) << "the job ended before it could be preempted";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling a file, not synchronization
  }
  ASSERT_TRUE(cluster->Run({"scancel", "--batch", "--signal=USR1", *id}).ok());
  // The spec does not requeue (job.requeue = false): the batch script ends
  // the job with the step's 85 instead of requeueing it (which would sit
  // out the ~120 s BeginTime Slurm gives a requeued job, on nodes that are
  // gone), and says how to resume.
  auto left = cluster->WaitForJobState(
      *id, [](const SlurmJobInfo& j) { return j.finished() || j.components[0].restarts >= 1; }, seconds(120));
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  EXPECT_TRUE(left->finished() && left->components[0].restarts == 0) << "a job whose spec says requeue = false";
  if (!left->finished()) {
    ASSERT_TRUE(cluster->Cancel(*id).ok());
  }
  auto job = WaitOrCancel(*cluster, *id, seconds(60));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto output = cluster->ReadJobOutput(*job);
  ASSERT_TRUE(output.ok());
  EXPECT_NE(output->find("the spec does not requeue"), std::string::npos) << *output;
  const int64_t stopped_at = runtime_testing::LastCheckpoint(run_dir.string()).step;
  ASSERT_GE(stopped_at, 4) << *output;
  ASSERT_LT(stopped_at, kSteps - 1) << "the preemption came too late to test anything\n" << *output;

  // 2. Three nodes: the same run directory, resumed in another layout.
  id = cluster->Submit((base / "n3" / "job.sbatch").string(), {"--chdir=" + base.string()});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  job = WaitOrCancel(*cluster, *id, seconds(240));
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  output = cluster->ReadJobOutput(*job);
  ASSERT_TRUE(output.ok());
  const auto losses = runtime_testing::Losses(run_dir.string());
  ASSERT_EQ(static_cast<int64_t>(losses.size()), kSteps) << *output;
  EXPECT_EQ(runtime_testing::LastCheckpoint(run_dir.string()).step, kSteps - 1);
  auto index = datalayer::SampleIndex::Open((run_dir / "index.sqlite").string());
  ASSERT_TRUE(index.ok());
  EXPECT_EQ((*index)->ConsumedCount(0).ValueOrDie(), kSteps * kGlobalBatch) << "every sample exactly once";

  // The same spec's steps in one process.
  auto reference =
      testing::RunCommand({std::string(MAESTRO_BIN_DIR) + "/maestro-worker", "--reference", "--no-eval", "--run-dir",
                           (base / "reference").string(), (base / "n3" / "plan.json").string()},
                          {}, seconds(240));
  ASSERT_TRUE(reference.ok() && reference->exit_code == 0) << (reference.ok() ? reference->output : "");
  const auto expected = runtime_testing::Losses((base / "reference").string());
  ASSERT_EQ(expected.size(), losses.size());
  for (const auto& [step, loss] : expected) {
    EXPECT_NEAR(losses.at(step), loss, 1e-5 * std::abs(loss))
        << "step " << step << (step > stopped_at ? " (3 nodes)" : " (4 nodes)");
  }
  if (!HasFailure()) fs::remove_all(base);
}

}  // namespace
}  // namespace maestro
