// SPDX-License-Identifier: Apache-2.0
// The preemption path end to end on the local Slurm cluster: a batch job
// (the protocol of docs/datalayer.md: trap USR1/TERM, forward to the srun
// step, requeue on exit 85) runs fake_trainer; the test signals the batch
// script as `--signal=B:USR1@N` would, the worker checkpoints and exits 85,
// the script runs `scontrol requeue`, the test skips Slurm's 120 s hold
// (`scontrol update StartTime=now`), and the second life (SLURM_RESTART_COUNT=1)
// resumes at the exact next step and finishes with the uninterrupted run's
// weights, every sample consumed once.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <thread>

#include "datalayer/sample_index.h"
#include "tests/datalayer/fake_training.h"
#include "tests/datalayer/test_dirs.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"
#include "tests/slurm/slurm_test_util.h"

namespace maestro::datalayer {
namespace {

constexpr int64_t kSamples = 160;

TEST(RequeueSlurm, UsrOneCheckpointsRequeuesAndResumesAtTheNextStep) {
  auto cluster = maestro::testing::LocalSlurmCluster::FromEnvironment();
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  const std::string dir = testing::FreshDir("requeue");
  const std::string manifest = dir + "/m.jsonl";
  ASSERT_TRUE(testing::WriteFakeManifest(manifest, kSamples).ok());
  testing::FakeTrainerOptions ref;
  ref.run_dir = dir + "/reference";
  ref.manifest = manifest;
  const uint64_t want = testing::RunFakeTrainer(ref).ValueOrDie().weights;

  const std::string out = dir + "/job.out";
  const std::string script = dir + "/job.sbatch";
  std::ofstream(script) << "#!/bin/bash\n"
                           "#SBATCH --job-name=requeue-test\n"
                           "#SBATCH --requeue\n"
                           "#SBATCH --ntasks=1\n"
                           "#SBATCH --open-mode=append\n"
                           "#SBATCH --output=" +
                               out +
                               "\n"
                               "set -u\n"
                               "echo \"batch start restart=${SLURM_RESTART_COUNT:-0}\"\n"
                               "wait_args=()\n"
                               "if [ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]; then wait_args=(--wait-for-signal 1); fi\n"
                               "step_pid=\"\"\n"
                               "forward_signal() {\n"
                               "  echo \"batch got SIG$1\"\n"
                               "  if [ -n \"$step_pid\" ]; then kill -s \"$1\" \"$step_pid\" 2>/dev/null || true; fi\n"
                               "}\n"
                               "trap 'forward_signal USR1' USR1\n"
                               "trap 'forward_signal TERM' TERM\n"
                               "srun --unbuffered --ntasks=1 " +
                               std::string(MAESTRO_BIN_DIR) + "/fake_trainer --run-dir " + dir + "/run --manifest " +
                               manifest +
                               " --checkpoint-every 2 \"${wait_args[@]}\" &\n"
                               "step_pid=$!\n"
                               "while kill -0 \"$step_pid\" 2>/dev/null; do wait \"$step_pid\"; done\n"
                               "wait \"$step_pid\"\n"
                               "rc=$?\n"
                               "echo \"batch step rc=$rc\"\n"
                               "if [ \"$rc\" -eq 85 ]; then scontrol requeue \"$SLURM_JOB_ID\"; exit 0; fi\n"
                               "exit \"$rc\"\n";
  auto id = cluster->Submit(script);
  ASSERT_TRUE(id.ok()) << id.status().ToString();

  // Wait until the first life has committed a checkpoint (it then waits for
  // the signal), then signal the batch script only, like --signal=B:USR1@N.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (fixtures::ReadFile(out).find("committed") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no checkpoint in time:\n" << fixtures::ReadFile(out);
    auto job = cluster->ShowJob(*id);
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    ASSERT_FALSE(job->finished()) << "job ended early:\n" << fixtures::ReadFile(out);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // polling, not synchronization
  }
  ASSERT_TRUE(cluster->Run({"scancel", "--batch", "--signal=USR1", *id}).ok());

  // The script requeues the job: wait for the restart to be recorded, then
  // make it eligible at once instead of after Slurm's ~120 s hold.
  auto requeued = cluster->WaitForJobState(
      *id, [](const maestro::testing::SlurmJobInfo& j) { return j.components[0].restarts >= 1; },
      std::chrono::seconds(60));
  ASSERT_TRUE(requeued.ok()) << requeued.status().ToString() << "\n" << fixtures::ReadFile(out);
  // Slurm revokes the first life's job credential at the requeue with a
  // resolution of one second; a restart within that same second is killed
  // ("Job credential revoked"). So make it eligible only once the wall clock
  // has passed the second in which we saw the requeue.
  const std::time_t requeue_second = std::time(nullptr);
  while (std::time(nullptr) <= requeue_second) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(cluster->MakeEligibleNow(*id).ok());
  // Right after the requeue Slurm may still show the first life's end (the
  // batch shell is killed by the requeue): wait for the second life's end.
  auto done = cluster->WaitForJobState(
      *id,
      [&](const maestro::testing::SlurmJobInfo& j) {
        return j.finished() && fixtures::ReadFile(out).find("start restart_count=1") != std::string::npos;
      },
      std::chrono::seconds(90));
  ASSERT_TRUE(done.ok()) << done.status().ToString() << "\n" << fixtures::ReadFile(out);
  const std::string text = fixtures::ReadFile(out);
  EXPECT_EQ(done->state(), "COMPLETED") << text << "\n"
                                        << [&] {
                                             std::string all;
                                             for (const auto& [k, v] : done->components[0].fields)
                                               all += k + "=" + v + " ";
                                             return all;
                                           }();
  EXPECT_EQ(done->components[0].restarts, 1) << text;
  EXPECT_NE(text.find("batch got SIGUSR1"), std::string::npos) << text;
  EXPECT_NE(text.find("preempted"), std::string::npos) << text;
  EXPECT_NE(text.find("batch step rc=85"), std::string::npos) << text;
  EXPECT_NE(text.find("start restart_count=1"), std::string::npos) << text;
  const auto finished = testing::ParseDoneLine(text);
  ASSERT_TRUE(finished.has_value()) << text;
  EXPECT_EQ(finished->weights, want) << text;
  EXPECT_LT(finished->steps, 2 * kSamples / 8) << "the second life must resume, not start over";

  auto index = SampleIndex::Open(dir + "/run/index.sqlite").ValueOrDie();
  EXPECT_EQ(index->ConsumedCount(0).ValueOrDie(), kSamples);
  EXPECT_EQ(index->ConsumedCount(1).ValueOrDie(), kSamples);
  index.reset();
  if (!HasFailure()) testing::RemoveDir(dir);
}

}  // namespace
}  // namespace maestro::datalayer
