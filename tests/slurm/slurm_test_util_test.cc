// SPDX-License-Identifier: Apache-2.0
// Unit tests of maestro_slurm_testutil's parts that need no cluster: the
// parser of `scontrol show job -o` and the child-process runner.
#include "tests/slurm/slurm_test_util.h"

#include <gtest/gtest.h>

namespace maestro::testing {
namespace {

using std::chrono::seconds;

TEST(SlurmTestUtil, ParsesHetJobRecordsInComponentOrder) {
  const std::string text =
      "JobId=8 HetJobId=7 HetJobOffset=1 JobName=x JobState=FAILED Reason=NonZeroExitCode Restarts=2 "
      "ExitCode=3:0 NodeList=node2 Command=/tmp/a b.sh StdOut=/tmp/out-7.txt\n"
      "JobId=7 HetJobId=7 HetJobOffset=0 JobName=x JobState=COMPLETED Reason=None Restarts=2 "
      "ExitCode=0:0 NodeList=node1 StdOut=/tmp/out-7.txt\n";
  auto job = ParseScontrolShowJob("7", text);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_EQ(job->components.size(), 2u);
  EXPECT_EQ(job->components[0].job_id, "7");
  EXPECT_EQ(job->components[1].job_id, "8");
  EXPECT_EQ(job->components[1].fields.at("Command"), "/tmp/a b.sh");
  EXPECT_EQ(job->components[1].restarts, 2);
  EXPECT_EQ(job->state(), "FAILED");
  EXPECT_EQ(job->exit_code(), 3);
  EXPECT_TRUE(job->finished());
  EXPECT_FALSE(ParseScontrolShowJob("7", "slurm_load_jobs error: Invalid job id specified\n").ok());
}

TEST(SlurmTestUtil, RunCommandReportsExitCodeOutputAndTimeout) {
  auto ok =
      RunCommand({"bash", "-c", "echo out; echo err >&2; echo \"$MAESTRO_X\"; exit 3"}, {"MAESTRO_X=42"}, seconds(10));
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->exit_code, 3);
  EXPECT_NE(ok->output.find("out\n"), std::string::npos);
  EXPECT_NE(ok->output.find("err\n"), std::string::npos);
  EXPECT_NE(ok->output.find("42\n"), std::string::npos);
  auto slow = RunCommand({"sleep", "30"}, {}, std::chrono::milliseconds(200));
  EXPECT_EQ(slow.status().code(), StatusCode::kTimeout);
  auto missing = RunCommand({"maestro-no-such-program"}, {}, seconds(5));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace maestro::testing
