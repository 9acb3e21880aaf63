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
// sectioned simulation charge).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "base/checks.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
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

}  // namespace
}  // namespace maestro::compiler
