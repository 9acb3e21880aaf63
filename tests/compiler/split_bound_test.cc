// SPDX-License-Identifier: Apache-2.0
// The split bound (issue #16): the GPUs a plan holds, split by work with no
// rounding and no fill, and the plan's fraction of it, in report.txt and
// --json.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/checks.h"
#include "compiler/compile.h"
#include "compiler/cost_model.h"
#include "compiler/report.h"
#include "compiler/spec.h"
#include "compiler/workload_builder.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

const std::string kSpecs = std::string(MAESTRO_SOURCE_DIR) + "/specs/";

StatusOr<CompileResult> CompileSpec(const std::string& name, Grouping grouping = Grouping::kAuto,
                                    std::vector<PinOverride> pins = {}) {
  MAESTRO_ASSIGN_OR_RETURN(Spec spec, ParseSpecFile(kSpecs + name));
  CompileOptions options;
  options.grouping = grouping;
  options.pins = std::move(pins);
  return Compile(spec, options);
}

// One section on all it holds, every sample active, no downstream: nothing
// to split and nothing to round: the plan is its own bound.
TEST(SplitBound, ASingleSectionOnItsOwnNodesReachesTheBound) {
  auto r = CompileSpec("tiny_teacher.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto js = nlohmann::json::parse(r->report_json);
  EXPECT_NEAR(js["fraction_of_split_bound"].get<double>(), 1.0, 0.01);
  EXPECT_GT(js["split_bound_seconds"].get<double>(), 0);
  EXPECT_EQ(js["gpus_held"].get<int>(), 2);
  EXPECT_NE(r->report.find("split bound: "), std::string::npos) << r->report;
}

// Two sections with a pipeline between them and whole nodes per section:
// below the bound, and the bound is what the held GPUs would do with the
// plan's work spread evenly.
TEST(SplitBound, ASectionedPlanIsBelowTheBoundItsWorkAndGpusGive) {
  auto r = CompileSpec("tiny_kd.toml", Grouping::kSectioned);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto js = nlohmann::json::parse(r->report_json);
  const double fraction = js["fraction_of_split_bound"].get<double>();
  EXPECT_GT(fraction, 0.0);
  EXPECT_LT(fraction, 1.0);
  EXPECT_NEAR(fraction * r->simulated.step_seconds, js["split_bound_seconds"].get<double>(), 1e-12);
  // The bound never exceeds the busiest section's busy time per replica
  // (its work over its own GPUs): spreading work cannot make it slower.
  double busiest = 0;
  for (const auto& s : r->assignment.sections) busiest = std::max(busiest, s.cost.step_seconds);
  EXPECT_LE(js["split_bound_seconds"].get<double>(), busiest * (1 + 1e-9));
}

// The report says whose per-GPU times price the bound. A sectioned plan:
// its own. A fused plan: the sectioned plan's (the stricter bound; the fused
// plan's own times, split without rounding, give its step back), unless the
// fused step beats that bound, which then is the fused plan (fraction 1).
TEST(SplitBound, TheReportNamesWhosePerGpuTimesPriceTheBound) {
  struct Case {
    std::string spec;
    Grouping grouping;
    std::string basis;  // both fused cases occur among the specs
  };
  for (const Case& c :
       {Case{"tiny_kd.toml", Grouping::kSectioned, "plan"}, Case{"tiny_kd.toml", Grouping::kFused, "sectioned_plan"},
        Case{"tiny_vlm.toml", Grouping::kFused, "fused_plan"}}) {
    SCOPED_TRACE(c.spec);
    auto fused = CompileSpec(c.spec, c.grouping);
    ASSERT_TRUE(fused.ok()) << fused.status().ToString();
    auto sectioned = CompileSpec(c.spec, Grouping::kSectioned);
    ASSERT_TRUE(sectioned.ok()) << sectioned.status().ToString();
    const auto js = nlohmann::json::parse(fused->report_json);
    const auto sectioned_js = nlohmann::json::parse(sectioned->report_json);
    const double sectioned_bound = sectioned_js["split_bound_seconds"].get<double>();
    const std::string basis = js["split_bound_basis"].get<std::string>();
    EXPECT_EQ(basis, c.basis);
    if (c.grouping == Grouping::kSectioned) {
      EXPECT_EQ(basis, "plan");
      EXPECT_NE(fused->report.find("at the plan's per-GPU times"), std::string::npos) << fused->report;
      continue;
    }
    ASSERT_TRUE(fused->grouping.fused);
    const double fused_step = fused->grouping.chosen_step_seconds;
    if (fused_step < sectioned_bound) {
      EXPECT_EQ(basis, "fused_plan");
      EXPECT_DOUBLE_EQ(js["split_bound_seconds"].get<double>(), fused_step);
      EXPECT_DOUBLE_EQ(js["fraction_of_split_bound"].get<double>(), 1.0);
      EXPECT_NE(fused->report.find("the fused plan's own step"), std::string::npos) << fused->report;
    } else {
      EXPECT_EQ(basis, "sectioned_plan");
      EXPECT_DOUBLE_EQ(js["split_bound_seconds"].get<double>(), sectioned_bound);
      EXPECT_NE(fused->report.find("at the sectioned plan's per-GPU times"), std::string::npos) << fused->report;
    }
  }
}

// "No rounding" prices every sample at the plan's micro-batch size. A
// replica of 16 samples at micro-batch 32 runs one micro-batch of 16 (the
// plan's cost prices it at that fill); the bound is half a full 32-sample
// micro-batch, at a 32-sample micro-batch's time. (It once took half a
// micro-batch at the 16-sample time: a per-sample time no configuration
// reaches, which put this plan at half its bound.)
TEST(SplitBound, PartialMicroBatchesArePricedAtTheFullMicroBatch) {
  auto r =
      CompileSpec("tiny_teacher.toml", Grouping::kAuto, {{"teacher", "micro_batch", 32, "teacher.micro_batch=32"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const SectionCost& plan_cost = r->assignment.sections[0].cost;
  ASSERT_EQ(plan_cost.config.micro_batch, 32);
  ASSERT_EQ(plan_cost.config.dp, 2);
  ASSERT_DOUBLE_EQ(plan_cost.microbatches, 1.0);  // 16 samples per replica: one micro-batch

  auto spec = ParseSpecFile(kSpecs + "tiny_teacher.toml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const CostModel model(DevicesOf(*spec), spec->data.global_batch);
  const double full_microbatches = 32.0 / (2 * 32);
  const SectionCost full = model.EvaluateWith(r->workload.sections[0], plan_cost.config, full_microbatches, 32);
  const double expected = full_microbatches * full.stage_seconds + full.dp_sync_seconds + full.optimizer_seconds;
  const auto js = nlohmann::json::parse(r->report_json);
  const double bound = js["split_bound_seconds"].get<double>();
  EXPECT_NEAR(bound, expected, 1e-9 * expected);
  // A full micro-batch takes longer than one of 16 samples, and less per sample.
  EXPECT_GT(full.stage_seconds, plan_cost.stage_seconds);
  EXPECT_LT(full.stage_seconds / 32, plan_cost.stage_seconds / 16);
  const double at_the_fill =
      full_microbatches * plan_cost.stage_seconds + full.dp_sync_seconds + full.optimizer_seconds;
  EXPECT_GT(bound, at_the_fill * 1.5);
  const double fraction = js["fraction_of_split_bound"].get<double>();
  EXPECT_GT(fraction, 0.75);
  EXPECT_LT(fraction, 1.0);
}

// A training pipeline's fill and drain is its own per-step time, like its DP
// sync: the bound counts (PP - 1) full stage times per replica for the
// training section, and none for a frozen one (it runs ahead). tiny_kd with
// its student pinned to PP 2 and its teacher to PP 2: the bound is exactly
// the sum of both sections' work, the student's with its fill.
TEST(SplitBound, ATrainingPipelineFillCountsAndAFrozenOneDoesNot) {
  auto r = CompileSpec("tiny_kd.toml", Grouping::kSectioned,
                       {{"student", "pp", 2, "student.pp=2"}, {"teacher", "pp", 2, "teacher.pp=2"}});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto spec = ParseSpecFile(kSpecs + "tiny_kd.toml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const CostModel model(DevicesOf(*spec), spec->data.global_batch);
  double work = 0;
  for (size_t i = 0; i < r->workload.sections.size(); ++i) {
    const SectionWork& s = r->workload.sections[i];
    const plan::ParallelConfig& c = r->assignment.sections[i].cost.config;
    ASSERT_EQ(c.pp, 2) << s.name;
    const double microbatches = spec->data.global_batch * s.active_fraction / (c.dp * c.micro_batch);
    const SectionCost full = model.EvaluateWith(s, c, microbatches, c.micro_batch);
    const double fill = s.trains() ? full.stage_seconds : 0.0;
    work += full.gpus * (microbatches * full.stage_seconds + fill + full.dp_sync_seconds + full.optimizer_seconds);
  }
  const auto js = nlohmann::json::parse(r->report_json);
  const double bound = js["split_bound_seconds"].get<double>();
  const double expected = work / js["gpus_held"].get<int>();
  EXPECT_NEAR(bound, expected, 1e-9 * expected);
}

}  // namespace
}  // namespace maestro::compiler
