// SPDX-License-Identifier: Apache-2.0
// NCCL smoke test (label gpu): one rank under mpirun gets its NCCL unique id
// through the PMIx store and all-reduces a buffer in device memory. Skips
// without a CUDA device or without NCCL in the build. Multi-rank NCCL needs
// one GPU per rank (NCCL refuses two ranks on one GPU): not tested here.
#include <gtest/gtest.h>

#include <filesystem>

#include "launcher/nccl_backend.h"
#include "plan/plan.h"
#include "run_util.h"
#include "test_plans.h"

namespace maestro::launcher::testing {
namespace {

TEST(Nccl, OneRankAllReduceOnDeviceMemoryWithIdThroughPmix) {
#ifndef MAESTRO_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device here";
  plan::Plan p;
  p.job_name = "nccl";
  AddSection(p, "llm", 1, 1, 1, 1);
  p.sections[0].placement.gpus_per_task = 1;
  const std::string dir = std::string(MAESTRO_TEST_TMP) + "/launcher";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(plan::SavePlan(p, dir + "/nccl.json").ok());
  auto argv = MpirunArgs(1);
  argv.insert(argv.end(), {std::string(MAESTRO_BIN_DIR) + "/launcher_comm_probe", dir + "/nccl.json", "nccl"});
  const auto r = RunCaptured(argv);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PROBE OK: nccl"), std::string::npos) << r.output;
#endif
}

}  // namespace
}  // namespace maestro::launcher::testing
