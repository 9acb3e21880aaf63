// SPDX-License-Identifier: Apache-2.0
// `maestro run` on this machine's GPUs (issue #43 points 1 and 2), tested
// without a GPU: the fake inventory MAESTRO_FAKE_GPUS stands in for them.
// ChooseLocalDevices' rules (which GPUs, --ranks, --device, the
// CUDA_VISIBLE_DEVICES the ranks get), then `maestro run --dry-run` for 1, 2
// and 8 GPUs: the plan, the device each rank binds, the backend each group
// and link gets and the mpirun command line; fewer GPUs than sections: the
// workload fused on the GPUs there are (1 GPU and 2 sections, 2 GPUs and 3);
// --grouping sectioned on too few GPUs and --ranks beyond them are refused
// naming --device cpu; no GPUs: the CPU, said once. Each run compiles a tiny spec (~1 s); nothing trains.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/local_devices.h"
#include "launcher/gpu_inventory.h"
#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"

namespace maestro::cli {
namespace {

using launcher::GpuInventory;
using launcher::testing::RunCaptured;
using launcher::testing::RunResult;

GpuInventory Fake(const std::string& text) {
  GpuInventory inventory;
  inventory.source = "MAESTRO_FAKE_GPUS=" + text;
  auto gpus = launcher::ParseFakeGpus(text);
  EXPECT_TRUE(gpus.ok()) << gpus.status().ToString();
  if (gpus.ok()) inventory.gpus = *gpus;
  if (inventory.gpus.empty()) inventory.why_none = "MAESTRO_FAKE_GPUS says none";
  return inventory;
}

TEST(LocalDevices, EveryGpuOfTheMostCommonTypeOneRankEach) {
  auto eight = ChooseLocalDevices(DeviceChoice::kAuto, Fake("8xh100_sxm:80"), 0, nullptr);
  ASSERT_TRUE(eight.ok()) << eight.status().ToString();
  EXPECT_TRUE(eight->gpus);
  EXPECT_EQ(eight->used, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(eight->type.type, "h100_sxm");
  EXPECT_TRUE(eight->type.has_profile);
  EXPECT_EQ(eight->memory_bytes, int64_t{80} << 30);
  EXPECT_EQ(eight->cuda_visible_devices, "");  // cuda:0..7 already
  EXPECT_TRUE(eight->idle.empty());

  // Mixed: the 2 x h100_sxm after an l40s; the ranks see them as cuda:0, 1.
  auto mixed = ChooseLocalDevices(DeviceChoice::kAuto, Fake("1xl40s,2xh100_sxm"), 0, nullptr);
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  EXPECT_EQ(mixed->used, (std::vector<int>{1, 2}));
  EXPECT_EQ(mixed->cuda_visible_devices, "1,2");
  ASSERT_EQ(mixed->idle.size(), 1u);
  EXPECT_NE(mixed->idle[0].find("GPU 0 (l40s): not used: a plan runs on one GPU type"), std::string::npos)
      << mixed->idle[0];
  // ... through the user's own CUDA_VISIBLE_DEVICES.
  auto through = ChooseLocalDevices(DeviceChoice::kAuto, Fake("1xl40s,2xh100_sxm"), 0, "4,6,7");
  ASSERT_TRUE(through.ok());
  EXPECT_EQ(through->cuda_visible_devices, "6,7");

  // --ranks 2 of 8: the first two; the rest idle with the reason.
  auto two = ChooseLocalDevices(DeviceChoice::kAuto, Fake("8xh100_sxm"), 2, nullptr);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->used, (std::vector<int>{0, 1}));
  EXPECT_EQ(two->idle.size(), 6u);
  EXPECT_NE(two->idle[0].find("--ranks 2"), std::string::npos);
}

TEST(LocalDevices, RefusalsNameTheFix) {
  auto more = ChooseLocalDevices(DeviceChoice::kAuto, Fake("2xh100_sxm"), 4, nullptr);
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("--ranks 4: this machine has 2 GPU(s)"), std::string::npos)
      << more.status().message();
  EXPECT_NE(more.status().message().find("--device cpu"), std::string::npos);
  auto none = ChooseLocalDevices(DeviceChoice::kCuda, Fake("0"), 0, nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("--device cuda: this machine has no GPUs"), std::string::npos);
  EXPECT_NE(none.status().message().find("--device cpu"), std::string::npos);
  // auto without GPUs, and --device cpu with them: CPU slots, with the reason.
  auto cpu = ChooseLocalDevices(DeviceChoice::kAuto, Fake("0"), 0, nullptr);
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->gpus);
  EXPECT_EQ(cpu->cpu_reason, "no GPUs (MAESTRO_FAKE_GPUS says none)");
  auto asked = ChooseLocalDevices(DeviceChoice::kCpu, Fake("8xh100_sxm"), 0, nullptr);
  ASSERT_TRUE(asked.ok());
  EXPECT_FALSE(asked->gpus);
  EXPECT_EQ(asked->cpu_reason, "--device cpu");
  EXPECT_FALSE(ParseDeviceChoice("gpu").ok());
}

TEST(LocalDevices, DoctorLinesSayTheProfileAndWhyAGpuIsIdle) {
  const std::vector<std::string> lines = GpuUseLines(Fake("1xl40s:48,2xh100_sxm:80"));
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_NE(all.find("2 x h100_sxm (80 GiB): device profile h100_sxm; maestro run uses them"), std::string::npos)
      << all;
  EXPECT_NE(all.find("1 x l40s (48 GiB): type l40s, no device profile"), std::string::npos) << all;
  EXPECT_NE(all.find("GPU 0 (l40s): not used"), std::string::npos) << all;
  EXPECT_NE(GpuUseLines(Fake("0")).front().find("maestro run trains on the CPU"), std::string::npos);
}

// `maestro run --dry-run SPEC` under MAESTRO_FAKE_GPUS=fake (plus `more`
// arguments), in a fresh folder.
class DryRun : public ::testing::Test {
 protected:
  void SetUp() override {
    // What the ranks would see must not depend on the test's environment.
    ::unsetenv("CUDA_VISIBLE_DEVICES");
    ::unsetenv("MAESTRO_COMM_BACKEND");
  }
  RunResult Run(const std::string& fake, const std::string& spec, std::vector<std::string> more = {},
                std::vector<std::pair<std::string, std::string>> env = {}) {
    out_ = std::string(MAESTRO_TEST_TMP) + "/gpu_dry_run_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" + std::to_string(++runs_);
    std::filesystem::remove_all(out_);
    std::vector<std::string> argv{std::string(MAESTRO_BIN_DIR) + "/maestro",          "run", "--dry-run",
                                  std::string(MAESTRO_SOURCE_DIR) + "/specs/" + spec, "-o",  out_};
    argv.insert(argv.end(), more.begin(), more.end());
    env.emplace_back(launcher::kFakeGpusEnv, fake);
    return RunCaptured(argv, env);
  }
  static bool Has(const RunResult& r, const std::string& text) { return r.output.find(text) != std::string::npos; }
  std::string out_;
  int runs_ = 0;
};

// What a group of GPU ranks gets: NCCL when this build has it.
std::string GpuBackend() {
#ifdef MAESTRO_HAVE_NCCL
  return "nccl";
#else
  return "mpi, host-staged (CUDA buffers copied through host memory: this build has no NCCL)";
#endif
}

TEST_F(DryRun, OneGpuOneRankOnCuda0) {
  const RunResult r = Run("1xh100_sxm", "tiny_teacher.toml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r, "devices: 1 x h100_sxm (GPU 0 by MAESTRO_FAKE_GPUS=1xh100_sxm): device profile h100_sxm"))
      << r.output;
  EXPECT_TRUE(Has(r, "local mode: one node of 1 'h100_sxm' GPU(s)")) << r.output;
  EXPECT_TRUE(Has(r, "rank 0: section 'teacher' -> cuda:0\n")) << r.output;
  EXPECT_TRUE(Has(r, "-np 1 ")) << r.output;
  EXPECT_TRUE(Has(r, "maestro run --dry-run: nothing was started")) << r.output;
  // Compiled, not started: the plan is there, the run folder is not.
  EXPECT_TRUE(std::filesystem::exists(out_ + "/plan.json"));
  EXPECT_FALSE(std::filesystem::exists(out_ + "/run"));
}

TEST_F(DryRun, TwoGpusTwoSectionsLinkedOverNccl) {
  const RunResult r = Run("2xh100_sxm:80", "tiny_vlm.toml", {"--grouping", "sectioned"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r, "rank 0: section 'vit' -> cuda:0\n")) << r.output;
  EXPECT_TRUE(Has(r, "rank 1: section 'llm' -> cuda:1\n")) << r.output;
  EXPECT_TRUE(Has(r, "link 0 of edge 'vit' -> 'llm' (image_embeddings): vit dp 0 (rank 0) <-> llm dp 0 (rank 1): " +
                         GpuBackend() + "\n"))
      << r.output;
  EXPECT_TRUE(Has(r, "mpirun")) << r.output;
  EXPECT_TRUE(Has(r, "-np 2 ")) << r.output;
  // MAESTRO_COMM_BACKEND=mpi: the same plan over MPI through host memory.
  const RunResult mpi =
      Run("2xh100_sxm:80", "tiny_vlm.toml", {"--grouping", "sectioned"}, {{"MAESTRO_COMM_BACKEND", "mpi"}});
  ASSERT_EQ(mpi.exit_code, 0) << mpi.output;
  EXPECT_TRUE(Has(mpi,
                  "(rank 1): mpi, host-staged (CUDA buffers copied through host memory: "
                  "MAESTRO_COMM_BACKEND=mpi)"))
      << mpi.output;
}

TEST_F(DryRun, EightGpusEightRanksEachOnItsOwnGpuNcclGroups) {
  const RunResult r = Run("8xh100_sxm", "tiny_vlm.toml", {"--grouping", "fused"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r, "plan: " + out_ + "/plan.json: 1 section(s), 8 rank(s)")) << r.output;
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_TRUE(Has(r, "rank " + std::to_string(rank) + ": section 'fused' -> cuda:" + std::to_string(rank) + "\n"))
        << rank << "\n"
        << r.output;
  }
  EXPECT_TRUE(Has(r, "dp group of section 'fused' (ranks ")) << r.output;
  size_t groups = 0;
  for (size_t at = r.output.find(" group of section 'fused'"); at != std::string::npos;
       at = r.output.find(" group of section 'fused'", at + 1)) {
    ++groups;
    const size_t end = r.output.find('\n', at);
    EXPECT_EQ(r.output.substr(end - GpuBackend().size(), GpuBackend().size()), GpuBackend())
        << r.output.substr(at, end - at);
  }
  EXPECT_GE(groups, 2u) << r.output;
  EXPECT_TRUE(Has(r, "-np 8 ")) << r.output;
  EXPECT_FALSE(Has(r, "CUDA_VISIBLE_DEVICES")) << r.output;
}

// One GPU, two sections: the workload fused on it, one rank on cuda:0.
TEST_F(DryRun, OneGpuTwoSectionsRunsTheWorkloadFused) {
  for (const char* spec : {"tiny_vlm.toml", "tiny_kd.toml"}) {
    for (const std::vector<std::string>& grouping :
         {std::vector<std::string>{}, std::vector<std::string>{"--grouping", "fused"}}) {
      const RunResult r = Run("1xh200", spec, grouping);
      ASSERT_EQ(r.exit_code, 0) << spec << "\n" << r.output;
      EXPECT_TRUE(Has(r, "grouping: fused on 1 GPU(s)")) << r.output;
      EXPECT_TRUE(Has(r, "2 sections need 2 GPU(s), 1 here")) << r.output;
      EXPECT_TRUE(Has(r, "plan: " + out_ + "/plan.json: 1 section(s), 1 rank(s)")) << r.output;
      EXPECT_TRUE(Has(r, "rank 0: section 'fused' -> cuda:0\n")) << r.output;
      EXPECT_TRUE(Has(r, "-np 1 ")) << r.output;
      auto plan = plan::LoadPlan(out_ + "/plan.json");
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      EXPECT_EQ(plan->world_size(), 1) << spec;
      ASSERT_EQ(plan->sections.size(), 1u) << spec;
      EXPECT_TRUE(plan->sections[0].fused()) << spec;
      EXPECT_EQ(plan->sections[0].placement.gpu_type, "h200") << spec;
    }
  }
}

// Two GPUs, three sections (four ranks sectioned: the decoder pins TP 2):
// fused on both.
TEST_F(DryRun, TwoGpusThreeSectionsRunTheWorkloadFusedOnBoth) {
  const RunResult r = Run("2xh100_sxm", "tiny_vlm3.toml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(Has(r, "3 sections need 4 GPU(s), 2 here")) << r.output;
  EXPECT_TRUE(Has(r, "plan: " + out_ + "/plan.json: 1 section(s), 2 rank(s)")) << r.output;
  EXPECT_TRUE(Has(r, "rank 0: section 'fused' -> cuda:0\n")) << r.output;
  EXPECT_TRUE(Has(r, "rank 1: section 'fused' -> cuda:1\n")) << r.output;
  auto plan = plan::LoadPlan(out_ + "/plan.json");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->world_size(), 2);
  ASSERT_EQ(plan->sections.size(), 1u);
  EXPECT_EQ(plan->sections[0].components.size(), 3u);
}

TEST_F(DryRun, TooFewGpusForTheSectionedPlanOrMoreRanksThanGpusIsRefusedNamingTheFix) {
  // --grouping sectioned, two sections, one GPU: each section needs a GPU of its own.
  const RunResult sections = Run("1xh100_sxm", "tiny_vlm.toml", {"--grouping", "sectioned"});
  EXPECT_EQ(sections.exit_code, 2) << sections.output;
  EXPECT_TRUE(Has(sections,
                  "--grouping sectioned: the spec needs at least 2 ranks (2 section(s), one GPU each) but "
                  "1 GPU(s)"))
      << sections.output;
  EXPECT_TRUE(Has(sections, "drop --grouping sectioned")) << sections.output;
  EXPECT_TRUE(Has(sections, "maestro run --device cpu")) << sections.output;
  EXPECT_FALSE(Has(sections, "mpirun")) << sections.output;
  // --ranks beyond the GPUs.
  const RunResult ranks = Run("2xh100_sxm", "tiny_vlm.toml", {"--ranks", "4"});
  EXPECT_EQ(ranks.exit_code, 2) << ranks.output;
  EXPECT_TRUE(Has(ranks, "--ranks 4: this machine has 2 GPU(s)")) << ranks.output;
  EXPECT_TRUE(Has(ranks, "--device cpu")) << ranks.output;
}

TEST_F(DryRun, NoGpusOrDeviceCpuPlansCpuRanksOverMpi) {
  const RunResult none = Run("0", "tiny_vlm.toml", {"--ranks", "2"});
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_TRUE(Has(none, "maestro run: no GPUs (MAESTRO_FAKE_GPUS says none): training on the CPU")) << none.output;
  EXPECT_TRUE(Has(none, "devices: CPU slots (no GPUs (MAESTRO_FAKE_GPUS says none))")) << none.output;
  EXPECT_TRUE(Has(none, "rank 0: section ")) << none.output;
  EXPECT_TRUE(Has(none, "-> cpu\n")) << none.output;
  EXPECT_FALSE(Has(none, "cuda:")) << none.output;
  // --device cpu asks for no GPUs at all: a malformed fake does not matter.
  const RunResult cpu = Run("eight", "tiny_vlm.toml", {"--ranks", "2", "--device", "cpu"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_TRUE(Has(cpu, "devices: CPU slots (--device cpu)")) << cpu.output;
  EXPECT_FALSE(Has(cpu, "training on the CPU")) << cpu.output;
  EXPECT_TRUE(Has(cpu, "'cpu' slot(s)")) << cpu.output;
  // --device cuda without GPUs: refused.
  const RunResult cuda = Run("0", "tiny_vlm.toml", {"--device", "cuda"});
  EXPECT_EQ(cuda.exit_code, 2) << cuda.output;
  EXPECT_TRUE(Has(cuda, "--device cuda: this machine has no GPUs")) << cuda.output;
}

}  // namespace
}  // namespace maestro::cli
