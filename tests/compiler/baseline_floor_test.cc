// SPDX-License-Identifier: Apache-2.0
// Never slower than the baseline, by construction (issue #41 item 6), for
// workloads of one component, which have nothing to fuse: a dense LLM
// (specs/hf/qwen3_32b.json), a MoE LLM (specs/hf/qwen3_30b_a3b.json, the
// issue's 16 nodes x 8 H100) and a KD teacher alone (the dense decoder
// frozen, forward only: the grammar takes a graph of one frozen section).
// The plan's predicted step is at most the baseline's, and where the
// sectioned search lands on the baseline's configuration both simulations
// agree exactly (the 0.996x of the issue was the baseline's simulation
// leaving out the gradient accumulation its own analytic step and the
// sectioned simulation charge). compiler/baseline_plan.h is the fallback
// when the sectioned search ends slower: the plan becomes the baseline's
// configuration.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "base/checks.h"
#include "compiler/baseline_plan.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "compiler/workload_builder.h"
#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

// One section of the HF config `config` (specs/hf/) on 16 nodes x 8 H100,
// trained or frozen.
std::string OneComponentSpec(const std::string& config, bool train) {
  return std::string(R"([job]
name = "one-component"
partition = "gpu"
time = "1:00:00"
output = "one-%j.out"
work_dir = "/scratch/one"

[cluster]
nodes = 16
gpus_per_node = 8

[cluster.gpu.h100]
type = "h100_sxm"
memory_gb = 80
tflops_bf16 = 989
intra_node_gbps = 450
inter_node_gbps = 50

[data]
global_batch = 512
seq_len = 4096
seed = 42

[models.llm]
hf_config = ")") +
         config + R"("

[[section]]
name = "llm"
model = "llm"
)" + (train ? "mode = \"train\"\noptimizer = { lr = 1e-5 }\n" : "mode = \"forward\"\n");
}

StatusOr<CompileResult> CompileOne(const std::string& config, bool train, const CompileOptions& options = {}) {
  MAESTRO_ASSIGN_OR_RETURN(Spec spec, ParseSpecString(OneComponentSpec(config, train), "one_component.toml",
                                                      std::string(MAESTRO_SOURCE_DIR) + "/specs/hf"));
  return Compile(spec, options);
}

struct Kind {
  const char* name;
  const char* config;
  bool train;
};
const Kind kKinds[] = {{"dense LLM", "qwen3_32b.json", true},
                       {"MoE LLM", "qwen3_30b_a3b.json", true},
                       {"KD teacher alone (frozen)", "qwen3_32b.json", false}};

TEST(BaselineFloor, AOneComponentPlanIsNeverPredictedSlowerThanItsBaseline) {
  for (const Kind& k : kKinds) {
    SCOPED_TRACE(k.name);
    auto r = CompileOne(k.config, k.train);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->plan.sections.size(), 1u);
    ASSERT_TRUE(r->monolithic.found) << r->monolithic.why_not;
    ASSERT_TRUE(r->monolithic_simulated.ok && r->simulated.ok);
    const double baseline = r->monolithic_simulated.step_seconds;
    EXPECT_LE(r->grouping.chosen_step_seconds, baseline) << r->report;
    EXPECT_LE(r->plan.predicted_step_seconds, baseline) << r->report;
    const auto js = nlohmann::json::parse(r->report_json);
    EXPECT_GE(js["speedup_vs_monolithic"].get<double>(), 1.0) << r->report;  // exactly, not rounded
    // The root cause of the issue's 0.996x: at the baseline's own
    // configuration the two simulations must agree to the last bit.
    const plan::ParallelConfig& c = r->plan.sections[0].config;
    const plan::ParallelConfig& m = r->monolithic.config;
    if (c.tp == m.tp && c.pp == m.pp && c.cp == m.cp && c.dp == m.dp && c.ep == m.ep &&
        c.micro_batch == m.micro_batch && c.recompute_granularity() == m.recompute_granularity()) {
      EXPECT_DOUBLE_EQ(r->simulated.step_seconds, baseline) << r->report;
    }
  }
}

// The fallback itself: a sectioned plan predicted slower than the baseline
// (here made so by hand: no example spec has one since both simulations
// agree) is replaced by the baseline's configuration, and its predicted
// step is the baseline's.
TEST(BaselineFloor, ASlowerOneComponentPlanBecomesTheBaselinesConfiguration) {
  auto r = CompileOne("qwen3_30b_a3b.json", true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->fused.found && r->fused_is_baseline && r->fused_simulated.ok);
  CompileResult slow = *r;
  slow.simulated.step_seconds = 1.5 * r->monolithic_simulated.step_seconds;  // the search ended slower
  slow.assignment.sections[0].cost.config.micro_batch = 0;  // a marker: the plan's section is evaluated afresh
  const CostModel model(DevicesOf(*ParseSpecString(OneComponentSpec("qwen3_30b_a3b.json", true), "x.toml",
                                                   std::string(MAESTRO_SOURCE_DIR) + "/specs/hf")),
                        512);
  PlannerOptions po;
  EXPECT_EQ(AdoptBaselineForOneComponent(CompileOptions(), model, po, false, slow), "");
  EXPECT_TRUE(slow.grouping.baseline);
  EXPECT_FALSE(slow.grouping.fused);
  EXPECT_EQ(slow.grouping.rejected, "sectioned");
  EXPECT_DOUBLE_EQ(slow.grouping.rejected_step_seconds, 1.5 * r->monolithic_simulated.step_seconds);
  EXPECT_DOUBLE_EQ(slow.grouping.chosen_step_seconds, r->monolithic_simulated.step_seconds);
  EXPECT_DOUBLE_EQ(slow.simulated.step_seconds, r->monolithic_simulated.step_seconds);
  const plan::ParallelConfig& c = slow.assignment.sections[0].cost.config;
  EXPECT_EQ(c.tp, r->monolithic.config.tp);
  EXPECT_EQ(c.pp, r->monolithic.config.pp);
  EXPECT_EQ(c.dp, r->monolithic.config.dp);
  EXPECT_EQ(c.micro_batch, r->monolithic.config.micro_batch);
  EXPECT_EQ(slow.assignment.gpus, r->monolithic.gpus);
  EXPECT_NE(slow.grouping.why.find("the baseline's configuration"), std::string::npos) << slow.grouping.why;

  // Not taken where the grouping is forced, nor where the plan is no slower.
  CompileResult forced = *r;
  forced.simulated.step_seconds *= 1.5;
  CompileOptions sectioned;
  sectioned.grouping = Grouping::kSectioned;
  EXPECT_NE(AdoptBaselineForOneComponent(sectioned, model, po, false, forced), "");
  EXPECT_FALSE(forced.grouping.baseline);
  CompileResult same = *r;
  EXPECT_NE(AdoptBaselineForOneComponent(CompileOptions(), model, po, false, same), "");
  EXPECT_FALSE(same.grouping.baseline);
}

}  // namespace
}  // namespace maestro::compiler
