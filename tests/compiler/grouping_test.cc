// SPDX-License-Identifier: Apache-2.0
// Grouping as a planner decision (issue #16): the sectioned plan or every
// component fused in one section on every GPU (the monolithic baseline's
// configuration, which the runtime runs as a fused section), the faster
// by simulated step; the report names the choice and the rejected
// alternative; a plan is never predicted slower than the baseline.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "base/checks.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "compiler/workload_builder.h"
#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

const std::string kSpecs = std::string(MAESTRO_SOURCE_DIR) + "/specs/";

StatusOr<CompileResult> CompileSpec(const std::string& name, Grouping grouping, int local_ranks = 0) {
  MAESTRO_ASSIGN_OR_RETURN(Spec spec, ParseSpecFile(kSpecs + name));
  CompileOptions options;
  options.grouping = grouping;
  if (local_ranks > 0) {
    options.local_ranks = local_ranks;
    options.local_cores = local_ranks;
    options.local_grow = true;
  }
  return Compile(spec, options);
}

// The demo on 2 ranks: the ViT is too small to pay for a rank of its own,
// so auto fuses, and the plan is the baseline's configuration as one fused
// section whose components are the spec's sections.
TEST(Grouping, TheTinyVlmOnTwoRanksIsFusedAndNeverSlowerThanMonolithic) {
  auto sectioned = CompileSpec("tiny_vlm.toml", Grouping::kSectioned, 2);
  ASSERT_TRUE(sectioned.ok()) << sectioned.status().ToString();
  const auto sj = nlohmann::json::parse(sectioned->report_json);
  ASSERT_LT(sj["speedup_vs_monolithic"].get<double>(), 1.0) << "the premise: sectioned loses here";
  EXPECT_EQ(sj["grouping"], "sectioned");
  EXPECT_EQ(sj["rejected_grouping"], "fused");

  auto r = CompileSpec("tiny_vlm.toml", Grouping::kAuto, 2);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto js = nlohmann::json::parse(r->report_json);
  EXPECT_EQ(js["grouping"], "fused");
  EXPECT_DOUBLE_EQ(js["speedup_vs_monolithic"].get<double>(), 1.0);
  EXPECT_EQ(js["rejected_grouping"], "sectioned");
  EXPECT_NEAR(js["rejected_step_seconds"].get<double>(), sectioned->simulated.step_seconds, 1e-12);
  EXPECT_NEAR(js["sectioned_speedup_vs_monolithic"].get<double>(), sj["speedup_vs_monolithic"].get<double>(), 1e-12);
  EXPECT_NE(r->report.find("grouping: fused"), std::string::npos) << r->report;
  EXPECT_NE(r->report.find("rejected: the sectioned plan"), std::string::npos) << r->report;

  const plan::Plan& p = r->plan;
  ASSERT_EQ(p.sections.size(), 1u);
  const plan::SectionPlan& f = p.sections[0];
  ASSERT_TRUE(f.fused());
  EXPECT_TRUE(p.edges.empty());
  ASSERT_EQ(f.components.size(), 2u);
  EXPECT_EQ(f.components[0].name, "vit");
  EXPECT_EQ(f.components[1].name, "llm");
  ASSERT_EQ(f.component_edges.size(), 1u);
  EXPECT_EQ(f.config.dp, r->monolithic.config.dp);
  EXPECT_EQ(f.config.tp, r->monolithic.config.tp);
  EXPECT_EQ(f.config.micro_batch, r->monolithic.config.micro_batch);
  EXPECT_EQ(p.world_size(), r->monolithic.gpus);
  EXPECT_EQ(f.mode, plan::SectionMode::kTrain);
  EXPECT_GT(f.cost.seconds_per_sample, 0);
  // The plan round-trips and expands to the spec's sections for the reference.
  auto again = plan::PlanFromJson(plan::PlanToJson(p));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(plan::ExpandFusedSections(*again).sections.size(), 2u);
  // The job script starts one het component.
  EXPECT_EQ(r->sbatch.find("hetjob"), std::string::npos) << r->sbatch;
}

TEST(Grouping, ForcedGroupingsAreHonouredAndAFusedPlanThatCannotRunIsRefused) {
  auto fused = CompileSpec("tiny_kd.toml", Grouping::kFused);
  ASSERT_TRUE(fused.ok()) << fused.status().ToString();
  EXPECT_TRUE(fused->plan.sections[0].fused());
  EXPECT_NE(fused->report.find("fused by --grouping fused"), std::string::npos) << fused->report;

  // One component: nothing to fuse.
  auto one = CompileSpec("tiny_teacher.toml", Grouping::kFused);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("one component"), std::string::npos) << one.status().ToString();
  EXPECT_NE(one.status().message().find("tiny_teacher.toml:"), std::string::npos) << one.status().ToString();
}

// The claim's floor: on every example spec, for this build's runtime and for
// `--runtime-support all`, the compiled plan is never predicted slower than
// the baseline: speedup_vs_monolithic >= 1 exactly, not rounded (issue #41
// item 6). By construction where the runtime can run the baseline's
// configuration as the plan (fused, FusedPlanBlocker; one component,
// compiler/baseline_plan.h) and its pins the baseline meets (tiny_vlm3
// pins its LLM's TP 2, which the baseline has); elsewhere (several GPU
// types, pins: a test below) it is what the specs' plans reach.
// Also the floor of issue #42 item 6 (docs/spec.md, "What the 2026-11-30
// table says of the MLLM specs"): the realistic MLLM specs, their samples
// described by [[data.modality.mix]], reach 0.95 of their split bound.
// Every spec under specs/ at `options`: the plan's speed-up over the baseline
// is at least 1 exactly; with the counts the test below checks.
struct FloorCounts {
  int compiled = 0, runnable = 0, fused = 0, mllm = 0;
};
FloorCounts ExpectEverySpecAtLeastItsBaseline(const CompileOptions& options) {
  const std::set<std::string> realistic_mllm = {"mllm_multi_image", "omni_audio_vision_llm", "qwen2vl_7b_mllm",
                                                "qwen25vl_7b_video", "qwen3vl_30b_a3b_mllm"};
  FloorCounts n;
  for (const auto& entry : std::filesystem::directory_iterator(kSpecs)) {
    if (entry.path().extension() != ".toml") continue;
    auto spec = ParseSpecFile(entry.path().string());
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    if (!spec.ok()) continue;
    auto r = Compile(*spec, options);
    if (!r.ok()) continue;  // a spec that fits nowhere has its own tests
    const auto js = nlohmann::json::parse(r->report_json);
    if (realistic_mllm.count(entry.path().stem().string()) > 0 && !options.support_given) {
      ++n.mllm;
      EXPECT_GE(js["fraction_of_split_bound"].get<double>(), 0.95) << entry.path() << "\n" << r->report;
    }
    if (js["speedup_vs_monolithic"].is_null()) continue;
    ++n.compiled;
    EXPECT_GE(js["speedup_vs_monolithic"].get<double>(), 1.0) << entry.path() << "\n" << r->report;
    EXPECT_LE(r->grouping.chosen_step_seconds, r->monolithic_simulated.step_seconds) << entry.path();
    if (FusedPlanBlocker(*r, options.support).empty() && r->fused_is_baseline) ++n.runnable;
    if (r->grouping.fused) ++n.fused;
  }
  return n;
}

TEST(Grouping, NoExampleSpecIsPredictedSlowerThanItsRunnableBaseline) {
  const FloorCounts n = ExpectEverySpecAtLeastItsBaseline(CompileOptions());  // this build's runtime table
  EXPECT_GE(n.compiled, 13) << "the example specs with a baseline";
  const int checked = n.runnable, fused = n.fused, mllm = n.mllm;
  EXPECT_GE(checked, 3) << "the example specs with a runnable baseline";
  // mllm_multi_image and qwen2vl_7b_mllm (and the tiny VLM and KD): their
  // baselines are faster than their sectioned plans, so the plan is the
  // baseline, fused.
  EXPECT_GE(fused, 2) << "the example specs whose plan is their baseline";
  EXPECT_EQ(mllm, 5) << "the realistic MLLM specs all compile";
}

TEST(Grouping, NoExampleSpecIsPredictedSlowerThanItsBaselineOnARuntimeWithEverything) {
  auto all = ParseRuntimeSupport("all");
  ASSERT_TRUE(all.ok());
  CompileOptions options;
  options.support = *all;
  options.support_given = true;
  EXPECT_GE(ExpectEverySpecAtLeastItsBaseline(options).compiled, 13) << "the example specs with a baseline";
}

StatusOr<CompileResult> CompileLocalWithPins(const std::string& name, Grouping grouping,
                                             const std::vector<std::string>& pins) {
  MAESTRO_ASSIGN_OR_RETURN(Spec spec, ParseSpecFile(kSpecs + name));
  CompileOptions options;
  options.grouping = grouping;
  options.local_ranks = 2;
  options.local_cores = 2;
  for (const auto& text : pins) {
    MAESTRO_ASSIGN_OR_RETURN(PinOverride pin, ParsePin(text));
    options.pins.push_back(pin);
  }
  return Compile(spec, options);
}

// Pins in fused plans: a pinned section configuration holds for every
// component of a fused plan. A pin the baseline meets leaves the fused plan
// the baseline (tiny_vlm3's decoder at TP 2: fused, speed-up 1); a pin it
// does not meet gives the best configuration that honours it, which auto
// takes when it beats the sectioned plan, and whose speed-up is the
// unpinned baseline's step over its own (the baseline is never pinned).
TEST(Grouping, AFusedPlanHonoursThePinsAndTheBaselineStaysUnpinned) {
  auto vlm3 = CompileSpec("tiny_vlm3.toml", Grouping::kAuto);
  ASSERT_TRUE(vlm3.ok()) << vlm3.status().ToString();
  ASSERT_EQ(vlm3->monolithic.config.tp, 2) << "the premise: the baseline meets the pin";
  EXPECT_TRUE(vlm3->fused_is_baseline);
  EXPECT_TRUE(vlm3->grouping.fused) << vlm3->report;
  ASSERT_EQ(vlm3->plan.sections.size(), 1u);
  EXPECT_EQ(vlm3->plan.sections[0].config.tp, 2);
  const auto j3 = nlohmann::json::parse(vlm3->report_json);
  EXPECT_DOUBLE_EQ(j3["speedup_vs_monolithic"].get<double>(), 1.0);
  EXPECT_EQ(j3["fused_pins"], "tp 2");
  EXPECT_NE(vlm3->report.find("honouring the pins: tp 2"), std::string::npos) << vlm3->report;

  auto free = CompileLocalWithPins("tiny_vlm.toml", Grouping::kAuto, {});
  auto pinned = CompileLocalWithPins("tiny_vlm.toml", Grouping::kAuto, {"llm.micro_batch=2"});
  ASSERT_TRUE(free.ok() && pinned.ok()) << pinned.status().ToString();
  ASSERT_NE(free->monolithic.config.micro_batch, 2) << "the premise: the baseline does not meet the pin";
  EXPECT_EQ(pinned->monolithic.config.micro_batch, free->monolithic.config.micro_batch) << "the baseline is unpinned";
  EXPECT_DOUBLE_EQ(pinned->monolithic_simulated.step_seconds, free->monolithic_simulated.step_seconds);
  EXPECT_FALSE(pinned->fused_is_baseline);
  ASSERT_TRUE(pinned->fused.found) << pinned->fused.why_not;
  EXPECT_EQ(pinned->fused.config.micro_batch, 2);
  ASSERT_TRUE(pinned->grouping.fused) << pinned->report;
  ASSERT_EQ(pinned->plan.sections.size(), 1u);
  EXPECT_EQ(pinned->plan.sections[0].config.micro_batch, 2);
  for (const auto& component : pinned->plan.sections[0].components) EXPECT_EQ(component.config.micro_batch, 2);
  const auto jp = nlohmann::json::parse(pinned->report_json);
  EXPECT_EQ(jp["fused_pins"], "micro_batch 2");
  EXPECT_NEAR(jp["speedup_vs_monolithic"].get<double>(),
              pinned->monolithic_simulated.step_seconds / pinned->fused_simulated.step_seconds, 1e-12);
  EXPECT_LT(jp["speedup_vs_monolithic"].get<double>(), 1.0) << "the pin costs speed here, and the report says so";
  EXPECT_LT(pinned->fused_simulated.step_seconds, pinned->simulated.step_seconds) << "fused still beats sectioned";
}

// Pins no single configuration can honour leave only the sectioned plan,
// and the report says which pins disagree.
TEST(Grouping, PinsThatDisagreeLeaveNoFusedPlanAndNameBothSections) {
  auto r = CompileLocalWithPins("tiny_vlm.toml", Grouping::kAuto, {"vit.micro_batch=4", "llm.micro_batch=8"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->grouping.fused);
  EXPECT_FALSE(r->fused.found);
  EXPECT_NE(r->grouping.why.find("section 'vit' pins micro_batch = 4"), std::string::npos) << r->grouping.why;
  EXPECT_NE(r->grouping.why.find("section 'llm' pins micro_batch = 8"), std::string::npos) << r->grouping.why;
  auto forced = CompileLocalWithPins("tiny_vlm.toml", Grouping::kFused, {"vit.micro_batch=4", "llm.micro_batch=8"});
  ASSERT_FALSE(forced.ok());
  EXPECT_NE(forced.status().message().find("one configuration"), std::string::npos) << forced.status().ToString();
}

// A baseline with CP and PP together runs fused only on a runtime that
// combines them (context_parallel_with_pipeline): planned for such a runtime
// (--runtime-support all), the fused plan is a choice, so qwen2vl's plan is
// never slower than its CP 4 x PP 2 baseline; on this build's runtime the
// same baseline names the missing combination.
TEST(Grouping, AFusedCpTimesPpBaselineIsAChoiceOnlyWhereTheRuntimeCombinesThem) {
  auto spec = ParseSpecFile(kSpecs + "qwen2vl_7b_mllm.toml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto all = ParseRuntimeSupport("all");
  ASSERT_TRUE(all.ok());
  CompileOptions options;
  options.support = *all;
  options.support_given = true;
  auto r = Compile(*spec, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_GT(r->monolithic.config.cp, 1) << "the premise: the baseline runs CP and PP\n" << r->report;
  ASSERT_GT(r->monolithic.config.pp, 1) << "the premise: the baseline runs CP and PP\n" << r->report;
  EXPECT_EQ(FusedPlanBlocker(*r, options.support), "");
  const auto js = nlohmann::json::parse(r->report_json);
  EXPECT_GE(js["speedup_vs_monolithic"].get<double>(), 1.0 - 1e-9) << r->report;

  RuntimeSupport no_cp_pp = *all;
  no_cp_pp.context_parallel_with_pipeline = false;
  EXPECT_NE(FusedPlanBlocker(*r, no_cp_pp).find("do not combine CP and PP"), std::string::npos);
}

}  // namespace
}  // namespace maestro::compiler
