// SPDX-License-Identifier: Apache-2.0
// Planning time stays bounded (issue #41 item 7): a budget far larger than
// the workload can fill (specs/tiny_vlm.toml's models on 100,000 nodes of
// 1,024 CPU slots or H100s: tests/compiler/data/hostile_budget_*.toml)
// compiles to a valid plan that holds no more GPUs than the global batch's
// replicas can fill, and a baseline on the GPUs it can fill. No wall-time
// assertion: the planner's work is bounded by what the workload can use
// (compiler/candidates.cc ComponentSizes, compiler/monolithic.cc
// FillableGpus); the times are in docs/planner.md, "Planning time".
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/candidates.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "compiler/workload_builder.h"
#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

const std::string kData = std::string(MAESTRO_SOURCE_DIR) + "/tests/compiler/data/";

// Every section (a fused plan's one section included) holds TP x PP x CP x
// DP ranks with DP at most the samples that activate it.
void ExpectFillsWhatItHolds(const CompileResult& r) {
  const int64_t batch = r.plan.data.global_batch;
  int64_t ranks = 0;
  for (const plan::SectionPlan& s : r.plan.sections) {
    EXPECT_LE(s.config.dp, batch) << s.name;
    ranks += s.config.ranks();
    if (!s.fused()) {
      const double active = static_cast<double>(batch) * s.active_fraction;
      EXPECT_LE(s.config.dp, static_cast<int64_t>(active + 1 - 1e-9)) << s.name << ": a replica without samples";
    }
  }
  EXPECT_EQ(r.plan.world_size(), ranks);
}

TEST(PlannerBounds, AHundredThousandNodesOfCpuSlotsPlanOnlyWhatTheWorkloadFills) {
  auto spec = ParseSpecFile(kData + "hostile_budget_cpu.toml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->cluster.nodes, 100000);
  ASSERT_EQ(spec->cluster.gpus_per_node, 1024);
  auto r = Compile(*spec, CompileOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(plan::Validate(r->plan).ok());
  ExpectFillsWhatItHolds(*r);
  // The baseline runs on the GPUs DP <= the global batch fills, not on none.
  ASSERT_TRUE(r->monolithic.found) << r->monolithic.why_not;
  EXPECT_LE(r->monolithic.config.dp, 64);
  EXPECT_EQ(r->monolithic.gpus, r->monolithic.config.ranks());
  EXPECT_NE(r->report.find("DP at most the global batch of 64 fills no more"), std::string::npos) << r->report;
  const auto js = nlohmann::json::parse(r->report_json);
  EXPECT_GE(js["speedup_vs_monolithic"].get<double>(), 1.0) << r->report;
}

TEST(PlannerBounds, AHundredThousandNodesOfH100sPlanOnlyWhatTheWorkloadFills) {
  auto spec = ParseSpecFile(kData + "hostile_budget_h100.toml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto r = Compile(*spec, CompileOptions());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(plan::Validate(r->plan).ok());
  ExpectFillsWhatItHolds(*r);
  ASSERT_TRUE(r->monolithic.found) << r->monolithic.why_not;
  EXPECT_EQ(r->monolithic.gpus, r->monolithic.config.ranks());
  const auto js = nlohmann::json::parse(r->report_json);
  EXPECT_GE(js["speedup_vs_monolithic"].get<double>(), 1.0) << r->report;
  // The job asks Slurm for the nodes the plan holds, not the budget's.
  EXPECT_EQ(r->sbatch.find("--nodes=100000"), std::string::npos) << r->sbatch;
}

// A global batch of 65,536 on that budget: no candidate has more replicas
// than the placement slots a plan may have (kMostDpSlots; compile.cc refuses
// a plan past them), though every one would get samples. That bound took
// the spec from over 300 s to under 20 s (docs/planner.md).
TEST(PlannerBounds, NoCandidateHasMoreReplicasThanPlacementSlots) {
  auto spec = ParseSpecFile(kData + "hostile_budget_h100.toml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  spec->data.global_batch = 65536;
  const std::vector<DeviceType> devices = DevicesOf(*spec);
  auto work = BuildWorkload(*spec, devices, {});
  ASSERT_TRUE(work.ok()) << work.status().ToString();
  const CostModel model(devices, spec->data.global_batch);
  const SectionWork& llm = work->sections.back();
  ASSERT_EQ(llm.name, "llm");
  ASSERT_GT(MaxUsefulDp(model, llm), kMostDpSlots) << "the premise: more samples than slots";
  int most = 0;
  for (const plan::ParallelConfig& c : CandidateConfigs(model, llm, PlannerOptions())) most = std::max(most, c.dp);
  EXPECT_EQ(most, kMostDpSlots);
}

}  // namespace
}  // namespace maestro::compiler
