// SPDX-License-Identifier: Apache-2.0
// Sections share nodes (issue #16, plan schema 3): with [cluster]
// share_nodes (the default) a small encoder gets a GPU count that is not a
// multiple of a node's and sits in the last node beside the decoder's ranks,
// in one het component; the plan holds the whole nodes its sections fill,
// and the ratios per GPU in --json count the GPUs of those nodes (the
// monolithic baseline's whole nodes too). share_nodes = false keeps one het
// component per section on whole nodes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "base/checks.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "plan/plan.h"
#include "tests/fixtures/specs.h"

namespace maestro::compiler {
namespace {

// The two-section fixture (a ViT on a quarter of the samples feeding a
// decoder) on `nodes` nodes of 8 H100s; `cluster_extra` goes into [cluster].
StatusOr<CompileResult> CompileTwoSections(int nodes, const std::string& cluster_extra = "") {
  std::string text = fixtures::TwoSectionSpec();
  const std::string from = "nodes = 4\ngpus_per_node = 8\n";
  text.replace(text.find(from), from.size(),
               "nodes = " + std::to_string(nodes) + "\ngpus_per_node = 8\n" + cluster_extra);
  MAESTRO_ASSIGN_OR_RETURN(Spec spec, ParseSpecString(text, "shared.toml", "."));
  CompileOptions options;
  options.grouping = Grouping::kSectioned;
  return Compile(spec, options);
}

int GpusOf(const plan::Plan& p, const std::string& section) {
  return p.sections[static_cast<size_t>(p.section_index(section))].config.ranks();
}

// On one node the ViT takes one GPU and the decoder the other seven; with a
// component per section the node would not do (next test).
TEST(SharedNodes, ASmallEncoderPacksBesideTheDecoderInOneComponent) {
  auto r = CompileTwoSections(1);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const plan::Plan& p = r->plan;
  EXPECT_EQ(p.schema_version, 3);
  const auto groups = plan::NodeGroupsOf(p);
  ASSERT_EQ(groups.size(), 1u) << r->report;
  EXPECT_EQ(groups[0].sections.size(), 2u);
  // Neither section holds whole nodes of its own: the ViT's GPUs are not a
  // node's, and it shares a node with decoder ranks.
  EXPECT_NE(GpusOf(p, "vit") % 8, 0) << r->report;
  const plan::NodeSpan vit = plan::NodeSpanOf(p, p.section_index("vit"));
  const plan::NodeSpan llm = plan::NodeSpanOf(p, p.section_index("llm"));
  EXPECT_TRUE(vit.first <= llm.last && llm.first <= vit.last) << plan::PlanToJson(p);
  EXPECT_EQ(groups[0].nodes, 1);
  EXPECT_EQ(GpusOf(p, "vit") + GpusOf(p, "llm"), 8);
  // job.sbatch: one component, both sections named in it.
  EXPECT_EQ(r->sbatch.find("#SBATCH hetjob"), std::string::npos) << r->sbatch;
  EXPECT_EQ(r->sbatch.find("--het-group"), std::string::npos) << "one component: a plain job step\n" << r->sbatch;
  EXPECT_NE(r->sbatch.find("section 'vit'"), std::string::npos) << r->sbatch;
  EXPECT_NE(r->sbatch.find("section 'llm'"), std::string::npos) << r->sbatch;
  EXPECT_NE(r->sbatch.find("#SBATCH --ntasks-per-node=8"), std::string::npos) << r->sbatch;
  // A component per section needs a node each: one node is too few.
  auto whole = CompileTwoSections(1, "share_nodes = false\n");
  ASSERT_FALSE(whole.ok());
  EXPECT_NE(whole.status().message().find("too small"), std::string::npos) << whole.status().ToString();
}

// On two nodes the decoder needs 8 GPUs and the ViT 1: 9 GPUs run, the plan
// holds 16, and the ratio per GPU divides by 16.
TEST(SharedNodes, RatiosPerGpuCountTheGpusOfTheNodesHeld) {
  auto r = CompileTwoSections(2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto js = nlohmann::json::parse(r->report_json);
  const int nodes = js["nodes_per_gpu_type"][0].get<int>();
  EXPECT_EQ(nodes, plan::NodeGroupsOf(r->plan)[0].nodes);
  EXPECT_EQ(js["gpus_held"].get<int>(), nodes * 8);
  EXPECT_GT(js["gpus_held"].get<int>(), r->plan.world_size()) << "the last node is not full";
  // The baseline holds whole nodes too.
  const int mono_gpus = js["monolithic"]["gpus"].get<int>();
  const int mono_held = (mono_gpus + 7) / 8 * 8;
  EXPECT_NEAR(js["speedup_per_gpu"].get<double>(),
              js["speedup_vs_monolithic"].get<double>() * mono_held / (nodes * 8.0), 1e-9)
      << r->report_json;
}

TEST(SharedNodes, ShareNodesFalseGivesEverySectionItsOwnComponentOnWholeNodes) {
  auto r = CompileTwoSections(2, "share_nodes = false\n");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto groups = plan::NodeGroupsOf(r->plan);
  ASSERT_EQ(groups.size(), 2u);
  for (const auto& g : groups) {
    ASSERT_EQ(g.sections.size(), 1u);
    const int gpus = GpusOf(r->plan, r->plan.sections[static_cast<size_t>(g.sections[0])].name);
    EXPECT_TRUE(gpus % 8 == 0 || 8 % gpus == 0) << gpus;
  }
  EXPECT_NE(r->sbatch.find("#SBATCH hetjob"), std::string::npos) << r->sbatch;
}

}  // namespace
}  // namespace maestro::compiler
