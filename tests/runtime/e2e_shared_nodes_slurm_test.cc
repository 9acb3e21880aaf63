// SPDX-License-Identifier: Apache-2.0
// End to end on the local Slurm cluster (labels slurm;e2e;runtime): sections
// share nodes (plan schema 3, issue #16). The three-section tiny VLM
// (specs/tiny_vlm3.toml: ViT -> projector -> decoder) compiled with
// `--grouping sectioned` on 2 nodes x 3 slots, the decoder pinned to DP 4,
// packs into one het component: the decoder's 4 ranks fill the first node
// and one slot of the second, the ViT and the projector the rest of the
// second. The job runs as that one component, every rank reports the node
// the plan puts it on, and the losses equal the one-process reference.
// Skips, naming the missing file, without the Fashion-MNIST demo images.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "plan/plan.h"
#include "tests/fixtures/demo_images.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/run_dir_util.h"
#include "tests/slurm/slurm_test_util.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;
using std::chrono::seconds;
using testing::LocalSlurmCluster;

constexpr int64_t kSteps = 8;

// Replaces the one occurrence of `from` in `text` (the test fails if absent).
void ReplaceOnce(std::string& text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << "specs/tiny_vlm3.toml no longer holds '" << from << "'";
  text.replace(at, from.size(), to);
}

TEST(E2eSlurmSharedNodes, VitAndProjectorShareANodeWithDecoderRanksAndMatchTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  auto cluster = LocalSlurmCluster::FromEnvironment();
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();

  const fs::path dir = fs::path(MAESTRO_TEST_TMP) / ("e2e_shared_nodes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  // tiny_vlm3 on 2 nodes x 3 slots, sections sharing nodes, the decoder at DP 4.
  std::string spec = fixtures::ReadFile(fs::path(MAESTRO_SOURCE_DIR) / "specs/tiny_vlm3.toml");
  ReplaceOnce(spec, "share_nodes = false", "share_nodes = true");
  ReplaceOnce(spec, "nodes = 4\n", "nodes = 2\n");
  ReplaceOnce(spec, "gpus_per_node = 2\n", "gpus_per_node = 3\n");
  ReplaceOnce(spec, "tp = 2 ", "tp = 1 ");
  {
    std::ofstream out(dir / "shared.toml");
    out << spec;
  }
  const fs::path wrapper = dir / "worker.sh";
  {
    std::ofstream out(wrapper);
    // Debug logging: every rank logs its place (section, node).
    out << "#!/bin/sh\nexport MAESTRO_LOG_LEVEL=debug\nexec '" << MAESTRO_BIN_DIR
        << "/maestro-worker' --no-eval --no-progress \"$@\"\n";
  }
  fs::permissions(wrapper, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  auto compile =
      testing::RunCommand({std::string(MAESTRO_BIN_DIR) + "/maestro-compile", (dir / "shared.toml").string(), "-o",
                           dir.string(), "--worker", wrapper.string(), "--grouping", "sectioned", "--pin", "llm.dp=4"},
                          {}, seconds(60));
  ASSERT_TRUE(compile.ok() && compile->exit_code == 0) << (compile.ok() ? compile->output : "");

  auto plan = plan::LoadPlan((dir / "plan.json").string());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->schema_version, 3);
  ASSERT_EQ(plan->sections.size(), 3u);
  const auto groups = plan::NodeGroupsOf(*plan);
  ASSERT_EQ(groups.size(), 1u) << plan::PlanToJson(*plan);
  EXPECT_EQ(groups[0].nodes, 2);
  EXPECT_EQ(groups[0].ranks, 6);
  const int vit = plan->section_index("vit"), proj = plan->section_index("proj"), llm = plan->section_index("llm");
  ASSERT_EQ(plan->sections[static_cast<size_t>(llm)].config.ranks(), 4);
  // The decoder fills node 0 and part of node 1; the ViT and the projector share node 1 with it.
  EXPECT_EQ(plan::NodeSpanOf(*plan, llm).first, 0);
  EXPECT_EQ(plan::NodeSpanOf(*plan, llm).last, 1);
  EXPECT_EQ(plan::NodeSpanOf(*plan, vit).first, 1);
  EXPECT_EQ(plan::NodeSpanOf(*plan, proj).first, 1);
  const std::string sbatch = fixtures::ReadFile(dir / "job.sbatch");
  EXPECT_EQ(sbatch.find("#SBATCH hetjob"), std::string::npos) << sbatch;
  EXPECT_NE(sbatch.find("#SBATCH --nodes=2"), std::string::npos) << sbatch;
  EXPECT_NE(sbatch.find("#SBATCH --ntasks-per-node=3"), std::string::npos) << sbatch;
  plan->data.steps = kSteps;
  ASSERT_TRUE(plan::SavePlan(*plan, (dir / "plan.json").string()).ok());

  auto id = cluster->Submit((dir / "job.sbatch").string(), {"--chdir=" + dir.string()});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto job = cluster->WaitForJob(*id, seconds(240));
  if (!job.ok()) (void)cluster->Cancel(*id);
  job = cluster->ShowJob(*id);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  auto output = cluster->ReadJobOutput(*job);
  ASSERT_TRUE(output.ok());
  EXPECT_EQ(job->components.size(), 1u) << *output;

  // Every rank ran on the node the plan gives it: the section's node span.
  std::map<std::string, std::set<std::string>> hosts;  // section -> nodes its ranks logged
  const std::regex place_line(R"(rank \d+ of 6: section '(\w+)' \(het component 0\).* on (\S+))");
  std::istringstream lines(*output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, place_line)) hosts[m[1]].insert(m[2]);
  }
  ASSERT_EQ(hosts.size(), 3u) << *output;
  ASSERT_EQ(hosts["vit"].size(), 1u) << *output;
  EXPECT_EQ(hosts["proj"], hosts["vit"]) << *output;
  EXPECT_EQ(hosts["llm"].size(), 2u) << *output;
  EXPECT_EQ(hosts["llm"].count(*hosts["vit"].begin()), 1u) << "the ViT shares a node with decoder ranks\n" << *output;

  const fs::path run_dir = dir / plan->work_dir;
  const auto losses = runtime_testing::Losses(run_dir.string());
  ASSERT_EQ(static_cast<int64_t>(losses.size()), kSteps) << *output;
  auto reference = testing::RunCommand({std::string(MAESTRO_BIN_DIR) + "/maestro-worker", "--reference", "--no-eval",
                                        "--run-dir", (dir / "reference").string(), (dir / "plan.json").string()},
                                       {}, seconds(240));
  ASSERT_TRUE(reference.ok() && reference->exit_code == 0) << (reference.ok() ? reference->output : "");
  const auto reference_losses = runtime_testing::Losses((dir / "reference").string());
  ASSERT_EQ(reference_losses.size(), losses.size());
  for (const auto& [step, loss] : losses) {
    EXPECT_NEAR(loss, reference_losses.at(step), 1e-5 * std::abs(loss)) << "step " << step;
  }
}

}  // namespace
}  // namespace maestro
