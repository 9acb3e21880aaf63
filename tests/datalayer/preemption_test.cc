// SPDX-License-Identifier: Apache-2.0
#include "datalayer/preemption.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <cstdlib>

#include "base/exit_codes.h"
#include "tests/datalayer/child_process.h"
#include "tests/datalayer/fake_training.h"
#include "tests/datalayer/test_dirs.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::datalayer {
namespace {

TEST(PreemptionSignal, UsrOneTermAndIntSetTheFlagAndHandlersAreRestored) {
  for (int sig : {SIGUSR1, SIGTERM, SIGINT}) {
    auto p = PreemptionSignal::Install().ValueOrDie();
    EXPECT_FALSE(p->requested());
    EXPECT_EQ(PreemptionSignal::Install().status().code(), StatusCode::kFailedPrecondition);
    ASSERT_EQ(::raise(sig), 0);  // would kill the test without the handler
    EXPECT_TRUE(p->requested());
    EXPECT_EQ(p->signal_number(), sig);
  }
  for (int sig : {SIGUSR1, SIGTERM, SIGINT}) {
    struct sigaction now {};
    sigaction(sig, nullptr, &now);
    EXPECT_EQ(now.sa_handler, SIG_DFL) << sig;
  }
}

// Ctrl-C twice: the first is a request, the second ends the process at once.
TEST(PreemptionSignal, ASecondInterruptEndsTheProcessAtOnce) {
  EXPECT_EXIT(
      {
        auto p = PreemptionSignal::Install().ValueOrDie();
        ::raise(SIGINT);
        if (!p->requested() || p->signal_number() != SIGINT) std::_Exit(3);
        ::raise(SIGINT);
        std::_Exit(4);  // not reached
      },
      ::testing::KilledBySignal(SIGINT), "interrupted again: stopping now, without a checkpoint");
}

// maestro-worker's start-up: a SIGUSR1 before the loop installs its handlers
// neither kills the process nor is lost.
TEST(PreemptionSignal, AnEarlyUsrOneIsKeptForTheNextInstance) {
  EXPECT_EXIT(
      {
        KeepEarlyPreemptionRequests();
        ::raise(SIGUSR1);
        auto p = PreemptionSignal::Install().ValueOrDie();
        std::_Exit(p->requested() && p->signal_number() == SIGUSR1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(PreemptionSignal, SlurmRestartCount) {
  ::unsetenv("SLURM_RESTART_COUNT");
  EXPECT_EQ(SlurmRestartCount(), 0);
  ::setenv("SLURM_RESTART_COUNT", "2", 1);
  EXPECT_EQ(SlurmRestartCount(), 2);
  ::setenv("SLURM_RESTART_COUNT", "x1", 1);
  EXPECT_EQ(SlurmRestartCount(), 0);
  ::unsetenv("SLURM_RESTART_COUNT");
}

// The worker's side of the protocol: SIGUSR1 mid-run -> checkpoint -> exit 85;
// the next start resumes at the exact next step and ends with the weights of
// an uninterrupted run.
TEST(PreemptionSignal, FakeTrainerCheckpointsExitsWithRequeueCodeAndResumesExactly) {
  const std::string dir = testing::FreshDir("preempt", /*fast_fsync=*/true);
  ASSERT_TRUE(testing::WriteFakeManifest(dir + "/m.jsonl", 160).ok());
  testing::FakeTrainerOptions ref;
  ref.run_dir = dir + "/reference";
  ref.manifest = dir + "/m.jsonl";
  ref.checkpoint_every = 4;
  const uint64_t want = testing::RunFakeTrainer(ref).ValueOrDie().weights;

  std::vector<std::string> argv = {std::string(MAESTRO_BIN_DIR) + "/fake_trainer",
                                   "--run-dir",
                                   dir + "/run",
                                   "--manifest",
                                   dir + "/m.jsonl",
                                   "--checkpoint-every",
                                   "4"};
  {
    // The child blocks after its first checkpoint until we write a byte, so
    // the signal lands mid-run by construction.
    std::vector<std::string> gated = argv;
    gated.insert(gated.end(), {"--gate-stdin", "1"});
    testing::ChildProcess child(gated);
    auto line = child.ReadLine(std::chrono::seconds(30));
    while (line && line->rfind("start", 0) == 0) line = child.ReadLine(std::chrono::seconds(30));
    ASSERT_TRUE(line.has_value());
    ASSERT_EQ(line->rfind("committed", 0), 0u) << *line;
    child.Signal(SIGUSR1);
    ASSERT_TRUE(child.WriteStdin("g"));
    std::string rest;
    while (auto l = child.ReadLine(std::chrono::seconds(30))) rest += *l + "\n";
    const int status = child.Wait();
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), kExitRequeue) << rest;
    EXPECT_NE(rest.find("preempted"), std::string::npos);
  }
  testing::ChildProcess again(argv);
  std::string out;
  while (auto l = again.ReadLine(std::chrono::seconds(30))) out += *l + "\n";
  const int status = again.Wait();
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), kExitOk) << out;
  const auto done = testing::ParseDoneLine(out);
  ASSERT_TRUE(done.has_value()) << out;
  EXPECT_EQ(done->weights, want);
  EXPECT_LT(done->steps, 40) << "the resumed run must not start over";
  testing::RemoveDir(dir);
}

}  // namespace
}  // namespace maestro::datalayer
