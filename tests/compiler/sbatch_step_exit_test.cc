// SPDX-License-Identifier: Apache-2.0
// job.sbatch's step end, run with bash against stub `srun` and `scontrol`
// (no Slurm): Slurm 22.05's pmix plugin can leave srun waiting forever after
// every task has ended (seen here in the kill -9 campaign: srun joining its
// abort agent in pmixp_abort_agent_stop). Rank 0 writes the step's exit code
// to $MAESTRO_STEP_EXIT_FILE; the script then gives srun a grace period and
// ends it, and exits with the step's code (85 still requeues).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

namespace fs = std::filesystem;

class SbatchStepExit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(MAESTRO_TEST_TMP) / ("sbatch-step-exit-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "bin");
    auto spec = ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_vlm3.toml");
    ASSERT_TRUE(spec.ok()) << spec.status().message();
    CompileOptions options;
    options.out_dir = dir_.string();
    options.worker = "stub-worker";
    options.grouping = Grouping::kSectioned;  // a heterogeneous job of three components
    auto r = Compile(*spec, options);
    ASSERT_TRUE(r.ok()) << r.status().message();
    std::ofstream(dir_ / "job.sbatch") << r->sbatch;
    // scontrol: records its arguments.
    Write("scontrol", "echo \"$@\" >> \"" + (dir_ / "scontrol.log").string() + "\"\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& name, const std::string& body) {
    const fs::path path = dir_ / "bin" / name;
    std::ofstream(path) << "#!/bin/bash\n" << body;
    fs::permissions(path, fs::perms::owner_all);
  }
  // bash job.sbatch with the stubs first in PATH; its exit status.
  int RunScript() {
    const std::string command = "cd '" + dir_.string() + "' && PATH='" + (dir_ / "bin").string() +
                                ":'\"$PATH\" SLURM_JOB_ID=42 MAESTRO_STEP_EXIT_GRACE=1 timeout 120 bash job.sbatch >" +
                                " script.log 2>&1";
    const int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string Slurp(const std::string& name) {
    std::ifstream in(dir_ / name);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  fs::path dir_;
};

TEST_F(SbatchStepExit, AnSrunThatOutlivesItsTasksIsEndedAndTheStepsCodeKept) {
  // The stub step records exit code 0, then srun hangs as Slurm's did.
  Write("srun", "echo 0 > \"$MAESTRO_STEP_EXIT_FILE\"\nexec sleep 600\n");
  EXPECT_EQ(RunScript(), 0) << Slurp("script.log");
  EXPECT_NE(Slurp("script.log").find("srun did not end"), std::string::npos) << Slurp("script.log");
  // The file was the plan's neighbour, named for the job, and is cleaned up.
  EXPECT_FALSE(fs::exists(dir_ / "step-exit.42.0"));
}

TEST_F(SbatchStepExit, AHangingStepThatAskedForARequeueIsRequeued) {
  Write("srun", "echo 85 > \"$MAESTRO_STEP_EXIT_FILE\"\nexec sleep 600\n");
  EXPECT_EQ(RunScript(), 0) << Slurp("script.log");
  EXPECT_EQ(Slurp("scontrol.log"), "requeue 42\n");
}

TEST_F(SbatchStepExit, AStepThatEndsByItselfKeepsSrunsCode) {
  // No exit file (rank 0 never finished): srun's own code, no watchdog.
  Write("srun", "exit 3\n");
  EXPECT_EQ(RunScript(), 3) << Slurp("script.log");
  EXPECT_EQ(Slurp("script.log").find("srun did not end"), std::string::npos);
  // A step that wrote its code and ended normally: srun's code stands.
  Write("srun", "echo 0 > \"$MAESTRO_STEP_EXIT_FILE\"\nexit 0\n");
  EXPECT_EQ(RunScript(), 0) << Slurp("script.log");
  EXPECT_EQ(Slurp("scontrol.log"), "");
}

}  // namespace
}  // namespace maestro::compiler
