// SPDX-License-Identifier: Apache-2.0
// Unit tests of the launcher's pure parts: the launcher environment, the
// allocation checks against the plan, options, names and checksums.
#include "launcher/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "launcher/comm.h"
#include "launcher/communicators.h"
#include "launcher/selftest.h"
#include "test_plans.h"

namespace maestro::launcher {
namespace {

using Env = std::map<std::string, std::string>;
EnvLookup Lookup(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

// A hetjob step of the 6-rank fan-out-2 plan (vit: 2 tasks, llm: 4 tasks).
Env SlurmEnv(int procid) {
  return {{"SLURM_PROCID", std::to_string(procid)},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_HET_SIZE", "2"},
          {"SLURM_NTASKS_HET_GROUP_0", "2"},
          {"SLURM_NTASKS_HET_GROUP_1", "4"},
          {"SLURMD_NODENAME", "node2"}};
}

TEST(LaunchEnv, ReadsSlurmHetjobVariables) {
  const Env env = SlurmEnv(3);
  auto e = ReadLaunchEnv(Lookup(env));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(e->launcher, LauncherKind::kSlurm);
  EXPECT_EQ(e->procid, 3);
  EXPECT_EQ(e->het_size, 2);
  EXPECT_EQ(e->tasks_per_component, (std::vector<int>{2, 4}));
  EXPECT_EQ(e->host, "node2");
  EXPECT_FALSE(e->gpu_list_set);
}

TEST(LaunchEnv, MpirunWinsOverInheritedSlurmVariables) {
  Env env = SlurmEnv(5);
  env["OMPI_COMM_WORLD_RANK"] = "1";
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "1";
  auto e = ReadLaunchEnv(Lookup(env));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->launcher, LauncherKind::kMpirun);
  EXPECT_EQ(e->procid, 1);
  EXPECT_EQ(e->het_size, 0);
}

TEST(LaunchEnv, MalformedNumbersAndMissingGroupSizesAreErrors) {
  Env env = SlurmEnv(0);
  env["SLURM_PROCID"] = "x1";
  EXPECT_EQ(ReadLaunchEnv(Lookup(env)).status().code(), StatusCode::kInvalidArgument);
  env = SlurmEnv(0);
  env.erase("SLURM_NTASKS_HET_GROUP_1");
  auto e = ReadLaunchEnv(Lookup(env));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("SLURM_NTASKS_HET_GROUP_1"), std::string::npos);
}

TEST(PlaceRank, MapsEveryHetjobRankToItsSectionAndCoordinates) {
  const plan::Plan p = testing::FanOut2Plan();
  for (int r = 0; r < 6; ++r) {
    const Env env = SlurmEnv(r);
    auto place = PlaceRank(p, *ReadLaunchEnv(Lookup(env)), r, 6);
    ASSERT_TRUE(place.ok()) << place.status().ToString();
    EXPECT_EQ(place->het_component, r < 2 ? 0 : 1);
    EXPECT_EQ(place->section_name, r < 2 ? "vit" : "llm");
    EXPECT_EQ(place->coords.tp, r % 2);
    EXPECT_EQ(place->coords.dp, r < 2 ? 0 : (r - 2) / 2);
    EXPECT_EQ(place->local_gpu, -1);
  }
}

TEST(PlaceRank, RejectsAllocationsThatDoNotMatchThePlan) {
  const plan::Plan p = testing::FanOut2Plan();
  Env env = SlurmEnv(0);
  env["SLURM_NTASKS_HET_GROUP_0"] = "3";
  env["SLURM_NTASKS_HET_GROUP_1"] = "3";
  auto place = PlaceRank(p, *ReadLaunchEnv(Lookup(env)), 0, 6);
  ASSERT_FALSE(place.ok());
  EXPECT_EQ(place.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(place.status().message().find("het component 0 has 3 tasks"), std::string::npos)
      << place.status().message();
  EXPECT_NE(place.status().message().find("'vit'"), std::string::npos);

  env = SlurmEnv(0);
  env["SLURM_HET_SIZE"] = "1";
  place = PlaceRank(p, *ReadLaunchEnv(Lookup(env)), 0, 6);
  ASSERT_FALSE(place.ok());
  EXPECT_NE(place.status().message().find("spans 1 het components"), std::string::npos);

  // World size from PMIx differs from the plan (mpirun -np 4 for a 6-rank plan).
  const Env mpirun = {{"OMPI_COMM_WORLD_RANK", "0"}};
  place = PlaceRank(p, *ReadLaunchEnv(Lookup(mpirun)), 0, 4);
  ASSERT_FALSE(place.ok());
  EXPECT_NE(place.status().message().find("the job has 4 ranks but the plan needs 6"), std::string::npos);
  EXPECT_NE(place.status().message().find("mpirun -np"), std::string::npos);
}

// Plan schema 3: the fan-out-2 plan's ViT (2 ranks) and LLM (4 ranks) in one
// het component of 2 nodes x 3 tasks, the LLM's ranks first: a one-component
// step places every rank by its global rank alone, and a two-component
// allocation is refused with the plan's components named.
TEST(PlaceRank, SectionsSharingAComponentArePlacedByTheirIndexInIt) {
  plan::Plan p = testing::FanOut2Plan();
  p.sections[0].placement = {0, 4, 2, 3, 0, "", "", ""};  // vit: ranks 4, 5
  p.sections[1].placement = {0, 0, 2, 3, 0, "", "", ""};  // llm: ranks 0..3
  ASSERT_TRUE(plan::Validate(p).ok()) << plan::Validate(p).ToString();
  for (int r = 0; r < 6; ++r) {
    Env env = SlurmEnv(r);
    env["SLURM_HET_SIZE"] = "1";
    env["SLURM_NTASKS_HET_GROUP_0"] = "6";
    env.erase("SLURM_NTASKS_HET_GROUP_1");
    auto place = PlaceRank(p, *ReadLaunchEnv(Lookup(env)), r, 6);
    ASSERT_TRUE(place.ok()) << place.status().ToString();
    EXPECT_EQ(place->het_component, 0);
    EXPECT_EQ(place->section_name, r < 4 ? "llm" : "vit") << "rank " << r;
    EXPECT_EQ(place->coords.local_rank, r < 4 ? r : r - 4);
  }
  auto place = PlaceRank(p, *ReadLaunchEnv(Lookup(SlurmEnv(0))), 0, 6);
  ASSERT_FALSE(place.ok());
  EXPECT_NE(place.status().message().find("spans 2 het components (SLURM_HET_SIZE) but the plan has 1"),
            std::string::npos)
      << place.status().message();
  EXPECT_NE(place.status().message().find("'llm' 4 + 'vit' 2"), std::string::npos) << place.status().message();
}

TEST(PlaceRank, ChecksVisibleGpusAgainstThePlan) {
  plan::Plan p = testing::FanOut2Plan();
  p.sections[1].placement.gpus_per_task = 1;
  Env env = SlurmEnv(4);
  env["CUDA_VISIBLE_DEVICES"] = "3";  // srun --gpus-per-task=1: this task's own GPU
  auto place = PlaceRank(p, *ReadLaunchEnv(Lookup(env)), 4, 6);
  ASSERT_TRUE(place.ok()) << place.status().ToString();
  EXPECT_EQ(place->local_gpu, 0);

  env["CUDA_VISIBLE_DEVICES"] = "0,1,2,3";  // node-wide list shared by 4 tasks
  env["SLURM_LOCALID"] = "2";
  place = PlaceRank(p, *ReadLaunchEnv(Lookup(env)), 4, 6);
  ASSERT_TRUE(place.ok());
  EXPECT_EQ(place->local_gpu, 2);

  env.erase("CUDA_VISIBLE_DEVICES");
  env["SLURM_STEP_GPUS"] = "";  // the step got no GPU
  place = PlaceRank(p, *ReadLaunchEnv(Lookup(env)), 4, 6);
  ASSERT_FALSE(place.ok());
  EXPECT_NE(place.status().message().find("needs 1 GPU(s) per task but SLURM_STEP_GPUS lists 0"), std::string::npos)
      << place.status().message();

  // The vit section has no GPUs: no check, CPU rank.
  place = PlaceRank(p, *ReadLaunchEnv(Lookup(SlurmEnv(1))), 1, 6);
  ASSERT_TRUE(place.ok());
  EXPECT_EQ(place->local_gpu, -1);
}

TEST(CommOptions, TimeoutAndBackendFromEnvironment) {
  Env env = {{"MAESTRO_COMM_TIMEOUT_S", "2.5"}, {"MAESTRO_COMM_BACKEND", "mpi"}};
  auto o = CommOptionsFromEnv(Lookup(env), {});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->timeout, Millis(2500));
  EXPECT_EQ(o->backend, BackendChoice::kMpi);
  EXPECT_EQ(CommOptionsFromEnv(Lookup({}), {})->timeout, Millis(60000));
  for (const char* bad : {"0", "-1", "soon", ""}) {
    env = {{"MAESTRO_COMM_TIMEOUT_S", bad}};
    EXPECT_FALSE(CommOptionsFromEnv(Lookup(env), {}).ok()) << bad;
  }
  env = {{"MAESTRO_COMM_BACKEND", "gloo"}};
  EXPECT_FALSE(CommOptionsFromEnv(Lookup(env), {}).ok());
}

TEST(Names, GroupsAndLinksAreNamedForMessages) {
  const plan::Plan p = testing::FanOut2Plan();
  EXPECT_EQ(GroupDescription(p, 1, plan::GroupKind::kDP, {2, 4}), "dp group of section 'llm' (ranks 2,4)");
  const auto links = plan::LinksOfEdge(p, 0);
  ASSERT_EQ(links.size(), 2u);
  EXPECT_EQ(LinkDescription(p, links[1], 1),
            "link 1 of edge 'vit' -> 'llm' (image_embeddings): vit dp 0 (rank 0) <-> llm dp 1 (rank 4)");
  EXPECT_EQ(HumanBytes(4 * 1024 * 1024), "4 MiB");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kI64), 8u);
}

TEST(Checksum, DetectsASingleFlippedByteAndPatternsDifferBySeed) {
  std::vector<uint8_t> a(4096), b(4096);
  FillPattern(a.data(), a.size(), 7);
  FillPattern(b.data(), b.size(), 7);
  EXPECT_EQ(Checksum(a.data(), a.size()), Checksum(b.data(), b.size()));
  b[1234] ^= 1;
  EXPECT_NE(Checksum(a.data(), a.size()), Checksum(b.data(), b.size()));
  FillPattern(b.data(), b.size(), 8);
  EXPECT_NE(Checksum(a.data(), a.size()), Checksum(b.data(), b.size()));
}

// Which groups and links talk NCCL (the rule Communicators::Create applies
// and `maestro run --dry-run` prints): GPU sections, when NCCL is built, the
// GPUs are usable and MAESTRO_COMM_BACKEND is not mpi; a link when both ends.
TEST(NcclSections, GpuSectionsTalkNcclAndLinksWhenBothEndsDo) {
  plan::Plan p = testing::FanOut2Plan();  // sections vit, llm; edge vit -> llm
  p.sections[1].placement.gpus_per_task = 1;
  std::vector<bool> one = NcclSections(p, BackendChoice::kAuto, true);
  EXPECT_EQ(one, (std::vector<bool>{false, NcclBuilt()}));
  EXPECT_FALSE(NcclLink(p, one, 0));  // the ViT computes on the CPU: MPI
  p.sections[0].placement.gpus_per_task = 1;
  std::vector<bool> both = NcclSections(p, BackendChoice::kAuto, true);
  EXPECT_EQ(both, (std::vector<bool>{NcclBuilt(), NcclBuilt()}));
  EXPECT_EQ(NcclLink(p, both, 0), NcclBuilt());
  EXPECT_EQ(NcclSections(p, BackendChoice::kMpi, true), (std::vector<bool>{false, false}));
  EXPECT_EQ(NcclSections(p, BackendChoice::kAuto, false), (std::vector<bool>{false, false}));
}

}  // namespace
}  // namespace maestro::launcher
