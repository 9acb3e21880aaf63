// SPDX-License-Identifier: Apache-2.0
// Fused sections with pipeline parallelism (docs/fused_pipeline.md), labels
// mpi;runtime:
//  - which stage holds which component (decoders every stage, encoders and
//    projectors the first) and which fused sections the runtime refuses to
//    pipeline (two trained decoders, too few layers, a decoder on some
//    samples only), each refusal naming the section and the fix;
//  - maestro-worker ranks under mpirun train specs/tiny_vlm3.toml fused
//    (ViT + projector + LLM in one section) at PP 2, PP 2 x DP 2 (with
//    the DP all-reduce and with ZeRO-1), PP 2 x TP 2, and
//    specs/tiny_kd.toml fused (a frozen teacher streaming beside its
//    student) at PP 2: every step's loss within 1e-5 relative of the
//    one-process reference and of the same fused plan at PP 1; every
//    component's final weights within 1e-5 of the PP 1 run's and no further
//    from the reference's than the PP 1 run's (the per-step gradients enter
//    the weights through AdamW, so equal weights after several steps are
//    equal gradients);
//  - a pipelined fused run stopped after a checkpoint and resumed ends with
//    the losses and weights of an uninterrupted run, bit for bit, the
//    LLM's second-stage AdamW state under its own key; its last stage
//    killed mid-run ends the job within the communication timeout, mpirun
//    naming the dead rank;
//  - the compiler (specs/kd_72b_to_7b.toml without CP, whose monolithic
//    baseline pipelines): the fused plan is chosen when predicted faster,
//    else it is the rejected alternative with its step; `--grouping fused`
//    gives one section with the baseline's PP; a runtime without
//    `pp_fused` names PP as the blocker.
// One torch TU (the checkpoints' weights are read back with torch).
#include "runtime/parallel/fused_pipeline.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/checks.h"
#include "compiler/compile.h"
#include "compiler/workload_builder.h"
#include "plan/plan.h"
#include "plan/runtime_support.h"
#include "runtime/models/encoders.h"
#include "tests/fixtures/demo_images.h"
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/checkpoint_weights.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using runtime_testing::LargestRelativeDifference;
using runtime_testing::LastCheckpoint;
using runtime_testing::WeightsOf;
using runtime_testing::WritePlan;

// ---- which stage holds what; what the runtime refuses ----

plan::SectionPlan Component(const std::string& name, plan::ModelKind kind, plan::SectionMode mode, int layers = 2) {
  plan::SectionPlan c;
  c.name = name;
  c.model.kind = kind;
  c.model.layers = layers;
  c.mode = mode;
  c.activation = "always";
  return c;
}

plan::SectionPlan FusedVlm(int pp) {
  plan::SectionPlan f;
  f.name = "fused";
  f.config.pp = pp;
  f.components = {Component("vit", plan::ModelKind::kVit, plan::SectionMode::kTrain),
                  Component("proj", plan::ModelKind::kProjector, plan::SectionMode::kTrain),
                  Component("llm", plan::ModelKind::kDecoder, plan::SectionMode::kTrain)};
  f.components[0].activation = f.components[1].activation = "image";
  plan::EdgePlan a, b;
  a.from = "vit";
  a.to = "proj";
  b.from = "proj";
  b.to = "llm";
  f.component_edges = {a, b};
  return f;
}

TEST(FusedPipelineRules, DecodersOnEveryStageEncodersAndProjectorsOnTheFirst) {
  const plan::SectionPlan f = FusedVlm(2);
  for (int stage : {0, 1, 2}) {
    EXPECT_EQ(runtime::FusedComponentOnStage(f.components[0], stage), stage == 0);
    EXPECT_EQ(runtime::FusedComponentOnStage(f.components[1], stage), stage == 0);
    EXPECT_TRUE(runtime::FusedComponentOnStage(f.components[2], stage));
  }
}

TEST(FusedPipelineRules, RefusesWhatTheRuntimeCannotPipelineNamingTheSectionAndTheFix) {
  EXPECT_EQ(plan::FusedPipelineRefusal(FusedVlm(2)), "");
  EXPECT_EQ(plan::FusedPipelineRefusal(FusedVlm(1)), "");
  plan::SectionPlan too_deep = FusedVlm(3);
  const std::string deep = plan::FusedPipelineRefusal(too_deep);
  EXPECT_NE(deep.find("pp 3 is more than decoder 'llm''s 2 layers"), std::string::npos) << deep;
  EXPECT_NE(deep.find("--grouping sectioned"), std::string::npos) << deep;
  plan::SectionPlan some = FusedVlm(2);
  some.components[2].activation = "image";
  EXPECT_NE(plan::FusedPipelineRefusal(some).find("runs on some samples only"), std::string::npos);
  plan::SectionPlan two = FusedVlm(2);
  two.components.push_back(Component("llm2", plan::ModelKind::kDecoder, plan::SectionMode::kTrain));
  EXPECT_NE(plan::FusedPipelineRefusal(two).find("2 training and 0 forward-only"), std::string::npos);
  plan::SectionPlan feeding = FusedVlm(2);
  feeding.components.push_back(Component("student", plan::ModelKind::kDecoder, plan::SectionMode::kTrain));
  plan::EdgePlan e;
  e.from = "llm";
  e.to = "student";
  feeding.component_edges.push_back(e);
  EXPECT_NE(plan::FusedPipelineRefusal(feeding).find("training decoder 'llm' feeds another component"),
            std::string::npos);
}

// ---- whole runs under mpirun ----

// `spec` compiled fused (--grouping fused), re-placed on this machine at TP
// `tp` x PP `pp` x DP `dp`, micro-batches of 4 (several per replica and
// step: the pipeline has work to overlap); tiny_kd's teacher from the seed
// and its student's loss KD.
plan::Plan FusedPlan(const std::string& spec, int tp, int pp, int dp, int64_t steps, int zero_stage = 0) {
  plan::Plan p = runtime_testing::CompiledExamplePlan(spec, compiler::Grouping::kFused);
  plan::SectionPlan* f = runtime_testing::TheFusedSection(p);
  if (f == nullptr) return p;
  runtime_testing::SetDegrees(*f, {tp, pp, 1, dp, 4});
  f->config.zero_stage = zero_stage;
  for (auto& c : f->components) {
    c.init_from.clear();
    if (c.name == "student") runtime_testing::UseKdLoss(c);
  }
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// Fresh(name): <test-tmp>/runtime_fused_pipeline/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_fused_pipeline"};

// Component `name`'s peak learning rate.
double LearningRateOf(const plan::Plan& p, const std::string& name) {
  for (const auto& c : p.sections[0].components) {
    if (c.name == name) return c.optimizer.lr;
  }
  ADD_FAILURE() << "no component " << name;
  return 0.0;
}

// The training components of fused plan `p`.
std::vector<std::string> TrainedComponents(const plan::Plan& p) {
  std::vector<std::string> out;
  for (const auto& c : p.sections[0].components) {
    if (c.mode == plan::SectionMode::kTrain) out.push_back(c.name);
  }
  return out;
}

// Fused plan `p` (pp > 1) against the one-process reference and against the
// same plan at pp = 1: losses within 1e-5 relative of both at every step;
// each trained component's final weights within 1e-5 of the pp = 1 run's
// and no further from the reference's than the pp = 1 run's are.
void ExpectFusedPipelineEqualsReference(const std::string& what, const plan::Plan& p) {
  plan::Plan unstaged = p;
  unstaged.sections[0].config.pp = 1;
  runtime_testing::PlaceOnThisMachine(unstaged, p.data.steps);
  const std::string dir = Fresh(what);
  ASSERT_NO_FATAL_FAILURE(
      runtime_testing::ExpectRunEqualsReferenceAndOther(what, p, unstaged, dir, "unstaged", " vs pp = 1"));
  const std::vector<std::string> trained = TrainedComponents(p);
  ASSERT_FALSE(trained.empty());
  for (const std::string& name : trained) {
    const auto w = WeightsOf(p, name, dir + "/run");
    const auto u = WeightsOf(p, name, dir + "/unstaged/run");
    const auto ref = WeightsOf(p, name, dir + "/reference");
    ASSERT_FALSE(w.empty()) << name;
    std::string where_flat, where_ref, where_flat_ref;
    const double noise = LearningRateOf(p, name) * static_cast<double>(p.data.steps);
    const double to_flat = LargestRelativeDifference(w, u, &where_flat, noise);
    const double to_ref = LargestRelativeDifference(w, ref, &where_ref, noise);
    const double flat_to_ref = LargestRelativeDifference(u, ref, &where_flat_ref, noise);
    std::printf("%s %s: weights vs pp = 1 %.2e (%s), vs the reference %.2e (%s); pp = 1 vs the reference %.2e\n",
                what.c_str(), name.c_str(), to_flat, where_flat.c_str(), to_ref, where_ref.c_str(), flat_to_ref);
    EXPECT_LE(to_flat, 1e-5) << what << " " << name << ": " << where_flat;
    EXPECT_LE(to_ref, 1.5 * flat_to_ref + 1e-6) << what << " " << name << ": " << where_ref;
  }
}

TEST(FusedPipelineTraining, VlmPp2EqualsTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  ExpectFusedPipelineEqualsReference("vlm_pp2", FusedPlan("tiny_vlm3.toml", 1, 2, 1, 4));
}

TEST(FusedPipelineTraining, VlmPp2TimesDp2EqualsTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  ExpectFusedPipelineEqualsReference("vlm_pp2_dp2", FusedPlan("tiny_vlm3.toml", 1, 2, 2, 3));
}

// ZeRO-1 per stage: stage 0 shards the ViT's, the projector's and its LLM
// layers' AdamW over its DP group; only the LLM's shard sums its norm over
// the stages.
TEST(FusedPipelineTraining, VlmPp2TimesDp2WithZero1EqualsTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  ExpectFusedPipelineEqualsReference("vlm_pp2_dp2_zero1", FusedPlan("tiny_vlm3.toml", 1, 2, 2, 3, /*zero_stage=*/1));
}

TEST(FusedPipelineTraining, VlmPp2TimesTp2EqualsTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  ExpectFusedPipelineEqualsReference("vlm_tp2_pp2", FusedPlan("tiny_vlm3.toml", 2, 2, 1, 3));
}

TEST(FusedPipelineTraining, KdTeacherStreamsBesideThePipelinedStudent) {
  ExpectFusedPipelineEqualsReference("kd_pp2", FusedPlan("tiny_kd.toml", 1, 2, 1, 3));
}

TEST(FusedPipelineTraining, StopAndResumeIsBitIdenticalToAnUninterruptedRun) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  const plan::Plan p = FusedPlan("tiny_vlm3.toml", 1, 2, 1, 4);
  const std::string dir = Fresh("resume");
  ASSERT_NO_FATAL_FAILURE(runtime_testing::ExpectStopAndResumeLossesEqual("fused vlm pp2", p, dir, 2));
  const auto x = LastCheckpoint(dir + "/whole");
  EXPECT_EQ(x.step, 3);
  EXPECT_EQ(runtime_testing::PieceFiles(x, "llm/adamw.").size(), 2u) << "each LLM stage writes its own AdamW state";
  EXPECT_EQ(runtime_testing::PieceFiles(x, "vit/").size(), 1u) << "the ViT runs on the first stage only";
  for (const std::string& name : TrainedComponents(p)) {
    const auto u = WeightsOf(p, name, dir + "/whole");
    const auto v = WeightsOf(p, name, dir + "/split");
    ASSERT_FALSE(u.empty());
    std::string where;
    EXPECT_EQ(LargestRelativeDifference(u, v, &where, 0.0), 0.0) << name << ": " << where;
  }
}

// The last stage (the LLM's second half, no encoder) killed with SIGKILL
// mid-run: stage 0, which waits for its gradients, does not hang; mpirun
// names the dead rank.
TEST(FusedPipelineFailure, ALastStageKilledMidRunEndsTheJobNamingItsRank) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  const plan::Plan p = FusedPlan("tiny_vlm3.toml", 1, 2, 1, 500);  // far more steps than it runs: it is killed
  const std::string dir = Fresh("killed_stage");
  const std::string plan_path = WritePlan(p, dir);
  const int victim = plan::GlobalRankOf(p, 0, 0, 0, 0, 1);
  const auto killed = runtime_testing::RunAndKillRank(p, plan_path, dir + "/run", victim, 2, std::chrono::seconds(90),
                                                      std::chrono::milliseconds(50));
  runtime_testing::ExpectKilledRankEndedTheJob(killed, victim, "the pipelined fused run made no progress");
}

// ---- the compiler ----

// specs/kd_72b_to_7b.toml (a 72B teacher and a 7B student at 8K tokens):
// planned for this build's runtime without CP, its monolithic baseline
// pipelines (TP 2 PP 4 when this was written). omni_audio_vision_llm's did
// until the chunked vocabulary loss (docs/loss_chunking.md) let its 16K-token
// LLM fit at TP 2 PP 1. `support`: a --runtime-support list, "" for this
// build's.
constexpr char kWithoutCp[] = "dp,micro_batch,tp_decoder,pp_decoder,tp_encoder,pp_fused,recompute,zero1";
StatusOr<compiler::CompileResult> CompileKd72b(compiler::Grouping grouping, const std::string& support) {
  auto spec = compiler::ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/kd_72b_to_7b.toml");
  if (!spec.ok()) return spec.status();
  return runtime_testing::CompileForRuntime(*spec, grouping, support);
}

TEST(FusedPipelineCompiler, AMonolithicBaselineWithPpIsTheFusedPlanWhenFaster) {
  auto r = CompileKd72b(compiler::Grouping::kAuto, kWithoutCp);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->monolithic.found);
  ASSERT_GT(r->monolithic.config.pp, 1) << "the baseline this test is about pipelines";
  const double sectioned = r->simulated.step_seconds, fused = r->monolithic_simulated.step_seconds;
  std::printf("kd_72b_to_7b: sectioned %.3f s, monolithic %.3f s (TP%d PP%d DP%d); %s\n", sectioned, fused,
              r->monolithic.config.tp, r->monolithic.config.pp, r->monolithic.config.dp, r->grouping.why.c_str());
  EXPECT_EQ(r->grouping.why.find("cannot run"), std::string::npos) << "the fused plan runs: " << r->grouping.why;
  if (fused < sectioned) {
    EXPECT_TRUE(r->grouping.fused) << r->grouping.why;
    ASSERT_EQ(r->plan.sections.size(), 1u);
    EXPECT_EQ(r->plan.sections[0].config.pp, r->monolithic.config.pp);
    EXPECT_EQ(r->grouping.rejected, "sectioned");
    EXPECT_NEAR(r->grouping.rejected_step_seconds, sectioned, 1e-9 * sectioned);
    EXPECT_LE(r->grouping.chosen_step_seconds, sectioned);
  } else {
    EXPECT_FALSE(r->grouping.fused);
    EXPECT_EQ(r->grouping.rejected, "fused") << "the fused plan can run: it is the rejected alternative";
    EXPECT_NEAR(r->grouping.rejected_step_seconds, fused, 1e-9 * fused);
  }
  // The report names both groupings and the rejected one's step.
  EXPECT_NE(r->report.find("grouping: "), std::string::npos) << r->report;
  EXPECT_NE(r->report.find("rejected: "), std::string::npos) << r->report;
}

TEST(FusedPipelineCompiler, GroupingFusedGivesOneSectionWithTheBaselinesPp) {
  auto r = CompileKd72b(compiler::Grouping::kFused, kWithoutCp);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->plan.sections.size(), 1u);
  const auto& f = r->plan.sections[0];
  EXPECT_TRUE(f.fused());
  EXPECT_GT(f.config.pp, 1);
  EXPECT_EQ(f.config.pp, r->monolithic.config.pp);
  EXPECT_EQ(plan::FusedPipelineRefusal(f), "") << "the compiler emits only what the runtime pipelines";
}

TEST(FusedPipelineCompiler, ARuntimeWithoutPpFusedNamesPpAsTheBlocker) {
  // This build's table less pp_fused (and the features the spec does not
  // need): --grouping fused fails naming PP, auto keeps sectioned.
  const std::string without = "dp,micro_batch,tp_decoder,pp_decoder,tp_encoder,moe,recompute,zero1,run_ahead";
  auto with_list = CompileKd72b(compiler::Grouping::kAuto, without + ",pp_fused");
  ASSERT_TRUE(with_list.ok()) << with_list.status().ToString();
  ASSERT_GT(with_list->monolithic.config.pp, 1);
  auto forced = CompileKd72b(compiler::Grouping::kFused, without);
  ASSERT_FALSE(forced.ok());
  EXPECT_NE(forced.status().message().find("fused sections run PP = 1"), std::string::npos)
      << forced.status().ToString();
  auto automatic = CompileKd72b(compiler::Grouping::kAuto, without);
  ASSERT_TRUE(automatic.ok()) << automatic.status().ToString();
  EXPECT_FALSE(automatic->grouping.fused);
  EXPECT_NE(automatic->grouping.why.find("PP = 1"), std::string::npos) << automatic->grouping.why;
}

}  // namespace
}  // namespace maestro
