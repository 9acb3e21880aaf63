// SPDX-License-Identifier: Apache-2.0
// NCCL self-test on one GPU (label gpu): one rank under mpirun gets its NCCL
// unique id through the PMIx store and runs every collective of the Backend
// interface on device memory (launcher_comm_probe's `nccl` scenario: every
// dtype and reduction of all_reduce, all_gather, reduce_scatter, broadcast,
// all_to_all, barrier; the errors a device backend owes). Skips without a
// CUDA device or without NCCL in the build. Send/Recv and every collective
// over two or more ranks need one GPU per rank (NCCL refuses two ranks on
// one GPU): a multi-GPU node's work (docs/e2e.md § GPU). And CUDA buffers over the
// MPI backend staged through the host, two ranks sharing one GPU.
#include <gtest/gtest.h>

#include <filesystem>

#include "launcher/nccl_backend.h"
#include "plan/plan.h"
#include "run_util.h"
#include "test_plans.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::launcher::testing {
namespace {

#ifdef MAESTRO_HAVE_NCCL
// Saves `p` as <test-tmp>/launcher/<mode>.json (fatal when it cannot) and
// runs launcher_comm_probe on it in `mode` as `ranks` processes under mpirun.
void RunProbe(const plan::Plan& p, int ranks, const std::string& mode, RunResult* r) {
  const std::string dir = std::string(MAESTRO_TEST_TMP) + "/launcher";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(plan::SavePlan(p, dir + "/" + mode + ".json").ok());
  auto argv = MpirunArgs(ranks);
  argv.insert(argv.end(), {std::string(MAESTRO_BIN_DIR) + "/launcher_comm_probe", dir + "/" + mode + ".json", mode});
  *r = RunCaptured(argv);
}
#endif

TEST(Nccl, OneRankEveryCollectiveOnDeviceMemoryWithIdThroughPmix) {
#ifndef MAESTRO_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device here";
  plan::Plan p;
  p.job_name = "nccl";
  AddSection(p, "llm", 1, 1, 1, 1);
  p.sections[0].placement.gpus_per_task = 1;
  RunResult r;
  ASSERT_NO_FATAL_FAILURE(RunProbe(p, 1, "nccl", &r));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PROBE OK: nccl, every collective"), std::string::npos) << r.output;
#endif
}

// CUDA buffers over MPI, staged through host memory (host_staged_backend.h):
// two ranks on one GPU (as many as there are: MPI does not mind sharing),
// every collective of the Backend interface and a ring of sends.
TEST(MpiCuda, TwoRanksEveryCollectiveOnDeviceMemoryStagedThroughHost) {
#ifndef MAESTRO_HAVE_NCCL
  GTEST_SKIP() << "built without CUDA";
#else
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device here";
  plan::Plan p;
  p.job_name = "mpi-cuda";
  AddSection(p, "llm", 1, 1, 2, 1);
  RunResult r;
  ASSERT_NO_FATAL_FAILURE(RunProbe(p, 2, "mpi-cuda", &r));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PROBE OK: mpi+host-staging, every collective and a ring"), std::string::npos) << r.output;
#endif
}

}  // namespace
}  // namespace maestro::launcher::testing
