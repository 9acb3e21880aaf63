// SPDX-License-Identifier: Apache-2.0
// Multi-rank tests under mpirun (label mpi): the launcher's groups, links and
// store from inside real jobs of 4-6 CPU ranks (MPI backend), the worker's
// self-test, and failure handling when a rank dies or hangs.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "base/exit_codes.h"
#include "plan/plan.h"
#include "run_util.h"
#include "test_plans.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::launcher::testing {
namespace {

const std::string kProbe = std::string(MAESTRO_BIN_DIR) + "/launcher_comm_probe";
const std::string kWorker = std::string(MAESTRO_BIN_DIR) + "/maestro-worker";

std::string WritePlan(const plan::Plan& p, const std::string& name) {
  const std::string dir = std::string(MAESTRO_TEST_TMP) + "/launcher";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name + ".json";
  EXPECT_TRUE(plan::SavePlan(p, path).ok());
  return path;
}

RunResult RunJob(const plan::Plan& p, const std::string& name, std::vector<std::string> command,
                 double timeout_s = 10) {
  const std::string path = WritePlan(p, name);
  std::vector<std::string> argv = MpirunArgs(p.world_size());
  for (auto& c : command) {
    if (c == "PLAN") c = path;
    argv.push_back(c);
  }
  return RunCaptured(argv, {{"MAESTRO_COMM_TIMEOUT_S", std::to_string(timeout_s)}});
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(MpiCollectives, FanOut1EveryOpEveryDtypeAndLinksBothWays) {
  const auto r = RunJob(FanOut1Plan(), "fanout1", {kProbe, "PLAN", "collectives"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "PROBE OK: 0 failed checks over 4 ranks")) << r.output;
}

TEST(MpiCollectives, FanOut2WithTensorParallelGroups) {
  const auto r = RunJob(FanOut2Plan(), "fanout2", {kProbe, "PLAN", "collectives"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Rank 0 (vit dp 0, tp 0) feeds both llm replicas: 2 links.
  EXPECT_TRUE(Contains(r.output, "PROBE OK: 0 failed checks over 6 ranks, 2 links on rank 0")) << r.output;
}

TEST(MpiCollectives, FanInFromTheLastPipelineStage) {
  const auto r = RunJob(FanInPlan(), "fanin", {kProbe, "PLAN", "collectives"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Rank 0 is teacher pp 0: not an endpoint of any link.
  EXPECT_TRUE(Contains(r.output, "PROBE OK: 0 failed checks over 5 ranks, 0 links on rank 0")) << r.output;
}

TEST(MpiCollectives, ThreeSectionsTwoEdgesIntoOne) {
  const auto r = RunJob(ThreeSectionPlan(), "three", {kProbe, "PLAN", "collectives"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "PROBE OK: 0 failed checks over 6 ranks")) << r.output;
}

TEST(PmixStore, PutCommitGetRoundsFenceAndMissingKeyTimesOut) {
  const auto r = RunJob(FanOut1Plan(), "store", {kProbe, "PLAN", "store"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "PROBE OK: store, 0 failed checks")) << r.output;
}

TEST(WorkerSelfTest, PrintsGroupsLinksAndBandwidthsAndPasses) {
  const auto r = RunJob(ThreeSectionPlan(), "selftest", {kWorker, "--selftest", "--selftest-bytes", "65536", "PLAN"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "self-test PASSED: 4 groups, 4 links, 0 failed checks")) << r.output;
  // llm (cp 2, dp 2): two CP groups and two DP groups of 2 ranks; rank 0's
  // table lists every one.
  EXPECT_TRUE(Contains(r.output, "cp group of section 'llm' (ranks 2,3)")) << r.output;
  EXPECT_TRUE(Contains(r.output, "dp group of section 'llm' (ranks 2,4)")) << r.output;
  EXPECT_TRUE(Contains(r.output,
                       "link 1 of edge 'audio' -> 'llm' (audio_embeddings): audio dp 0 (rank 1) <-> "
                       "llm dp 1 (rank 4)"))
      << r.output;
  EXPECT_TRUE(Contains(r.output, "GB/s")) << r.output;
}

TEST(WorkerSelfTest, FanInPlanPasses) {
  const auto r = RunJob(FanInPlan(), "selftest_fanin",
                        {kWorker, "--selftest", "--selftest-iterations", "1", "--selftest-bytes", "65536", "PLAN"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "self-test PASSED")) << r.output;
  EXPECT_TRUE(Contains(r.output, "teacher dp 1 (rank 3) <-> student dp 0 (rank 4)")) << r.output;
}

TEST(WorkerStartup, WrongNumberOfRanksStopsWithTheSectionSizes) {
  const plan::Plan p = FanOut2Plan();  // 6 ranks
  const std::string path = WritePlan(p, "wrong_np");
  auto argv = MpirunArgs(4);
  argv.insert(argv.end(), {kWorker, "--selftest", path});
  const auto r = RunCaptured(argv);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.output, "the job has 4 ranks but the plan needs 6 (sections: 'vit' 2, 'llm' 4)")) << r.output;
}

TEST(WorkerStartup, OutsideAnyLauncherSaysHowToStart) {
  const std::string path = WritePlan(FanOut1Plan(), "alone");
  const auto r = RunCaptured({kWorker, path});
  EXPECT_EQ(r.exit_code, kExitUsage) << r.output;
  EXPECT_TRUE(Contains(r.output, "started outside a PMIx launcher")) << r.output;
  EXPECT_TRUE(Contains(r.output, "maestro run")) << r.output;
  EXPECT_TRUE(Contains(r.output, "srun --mpi=pmix")) << r.output;
}

// A rank that dies: mpirun stops the others with SIGTERM; the job fails fast,
// mpirun names the dead rank and the survivors name the group and operation.
TEST(Failure, KilledRankEndsTheJobNamingRankGroupAndOperation) {
  const auto r = RunJob(FanOut1Plan(), "kill", {kProbe, "PLAN", "kill", "3"}, /*timeout_s=*/5);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 5 + 10) << r.output;
  EXPECT_TRUE(Contains(r.output, "process rank 3")) << r.output;
  EXPECT_TRUE(Contains(r.output, "all_reduce #1 of 4194304 bytes on dp group of section 'llm' (ranks 2,3)"))
      << r.output;
}

// A rank that hangs: the other rank of its DP group times out, asks the group
// who is missing, names rank 3 and ends the job with kExitPeerFailure.
TEST(Failure, HungRankIsNamedAfterTheTimeout) {
  const auto r = RunJob(FanOut1Plan(), "hang", {kProbe, "PLAN", "hang", "3"}, /*timeout_s=*/2);
  EXPECT_EQ(r.exit_code, kExitPeerFailure) << r.output;
  EXPECT_LT(r.seconds, 2 + 15) << r.output;
  EXPECT_TRUE(Contains(r.output,
                       "rank 2: all_reduce #1 of 4 MiB on dp group of section 'llm' (ranks 2,3) did not "
                       "complete within 2.0 s"))
      << r.output;
  EXPECT_TRUE(Contains(r.output, "missing rank(s) 3")) << r.output;
}

// A rank that leaves early with exit code 0 is a failure too.
TEST(Failure, RankThatExitsEarlyEndsTheJob) {
  const auto r = RunJob(FanOut1Plan(), "exit", {kProbe, "PLAN", "exit", "1"}, /*timeout_s=*/5);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 5 + 15) << r.output;
  EXPECT_TRUE(Contains(r.output, "dp group of section 'enc' (ranks 0,1)")) << r.output;
}

// maestro-bench comm runs its own 2-rank mpirun and reports the ratio key
// (a smoke run: numbers are measured, not judged, here).
TEST(CommBench, QuickRunReportsLinkVsRawMpi) {
  const std::string bench = std::string(MAESTRO_BIN_DIR) + "/maestro-bench";
  if (!std::filesystem::exists(bench)) GTEST_SKIP() << "maestro-bench not built (MAESTRO_BENCH=OFF)";
  const auto r = RunCaptured({"timeout", "-s", "KILL", "120", bench, "comm", "--quick", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Contains(r.output, "\"link_vs_raw_mpi\":")) << r.output;
  EXPECT_TRUE(Contains(r.output, "\"bytes\":65536")) << r.output;
  EXPECT_FALSE(Contains(r.output, "\"link_vs_raw_mpi\":0,")) << r.output;
}

}  // namespace
}  // namespace maestro::launcher::testing
