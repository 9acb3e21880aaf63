// SPDX-License-Identifier: Apache-2.0
// Fused sections with context parallelism (docs/fused_context_parallel.md),
// labels mpi;runtime:
//  - maestro-worker ranks under mpirun train specs/tiny_vlm3.toml fused (ViT
//    + projector + LLM in one section; images on half the samples) at CP 2,
//    CP 2 x DP 2 (DP all-reduce, and ZeRO-1), CP 2 x TP 2, and
//    specs/tiny_kd.toml fused (a frozen teacher and its student, both at
//    decoder CP on the same chunks) at CP 2, two steps: every step's loss
//    within 1e-5 relative of the one-process reference; where AdamW is
//    whole on every rank (CP 2, CP 2 x DP 2, KD), every trained component's
//    gradient of the first step (AdamW's first moment in the checkpoint) within
//    1e-5 of the reference's, the ViT's and projector's included (each CP
//    rank backpropagates its chunks' share of the image rows; the shares
//    are summed over CP);
//  - a fused CP run stopped after a checkpoint and resumed ends with the
//    losses and weights of an uninterrupted run, bit for bit;
//  - fused CP x PP is refused by the runtime's check (CheckContextParallelRuns,
//    run at the worker's start), naming the fix;
//  - the compiler (specs/qwen2vl_7b_mllm.toml at 128K tokens, whose monolithic baseline
//    runs CP > 1): the fused plan is chosen when predicted faster, else it
//    is the rejected alternative with its step; `--grouping fused` gives one
//    section with the baseline's CP that the runtime's check accepts; a
//    runtime without `cp_fused` names CP as the blocker.
// One torch TU (the checkpoints' weights are read back with torch).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "base/checks.h"
#include "base/read_file.h"
#include "compiler/compile.h"
#include "compiler/workload_builder.h"
#include "datalayer/checkpoint_store.h"
#include "plan/plan.h"
#include "plan/runtime_support.h"
#include "runtime/checkpoint_slices.h"
#include "runtime/models/encoders.h"
#include "runtime/section_runner.h"
#include "tests/fixtures/demo_images.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using runtime_testing::LastCheckpoint;
using runtime_testing::Losses;
using runtime_testing::RunWorkers;
using runtime_testing::WritePlan;

// `spec` compiled fused (--grouping fused), re-placed on this machine at TP
// `tp` x CP `cp` x DP `dp`, micro-batches of 4; tiny_kd's teacher from the
// seed and its student's loss KD.
plan::Plan FusedPlan(const std::string& spec, int tp, int cp, int dp, int64_t steps, int zero_stage = 0) {
  plan::Plan p = runtime_testing::CompiledExamplePlan(spec, compiler::Grouping::kFused);
  EXPECT_EQ(p.sections.size(), 1u);
  if (p.sections.empty()) return p;
  auto& f = p.sections[0];
  EXPECT_TRUE(f.fused());
  runtime_testing::SetDegrees(f, {tp, 1, cp, dp, 4});
  f.config.zero_stage = zero_stage;
  for (auto& c : f.components) {
    c.init_from.clear();
    if (c.name == "student") runtime_testing::UseKdLoss(c);
  }
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// Fresh(name): <test-tmp>/runtime_fused_context_parallel/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_fused_context_parallel"};

// Component `name`'s AdamW first moments (exp_avg) in checkpoint `state`,
// by parameter name. After one step they are (1 - beta1) x the step's
// (clipped) gradient, so equal moments are equal gradients; the weights are
// not (AdamW's first step moves each element by about lr x the sign of its
// gradient, so rounding in a near-zero gradient moves it by up to lr). For
// runs whose AdamW is whole on every rank (no TP shards, no ZeRO-1).
std::map<std::string, torch::Tensor> FirstMoments(const plan::Plan& p, const std::string& name,
                                                  const datalayer::CheckpointData& state) {
  std::map<std::string, torch::Tensor> out;
  const plan::Plan expanded = plan::ExpandFusedSections(p);
  const int index = expanded.section_index(name);
  EXPECT_TRUE(index >= 0 && state.sharded()) << name << " in the checkpoint of step " << state.step;
  if (index < 0 || !state.sharded()) return out;
  auto module = runtime::BuildModel(expanded.sections[static_cast<size_t>(index)].model, runtime::ModelBuildOptions{});
  EXPECT_TRUE(module.ok());
  if (!module.ok()) return out;
  runtime::CheckpointTensors source(state);
  for (const auto& item : (*module)->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    const std::vector<int64_t> shape(item.value().sizes().begin(), item.value().sizes().end());
    auto m = source.Read(runtime::MomentTensorName(name, "adamw.exp_avg", item.key()), shape,
                         datalayer::Box{std::vector<int64_t>(shape.size(), 0), shape});
    EXPECT_TRUE(m.ok()) << name << ": " << m.status().ToString();
    if (m.ok()) out[item.key()] = *m;
  }
  return out;
}

// The checkpoint of step `step` in run folder `run_dir`.
datalayer::CheckpointData CheckpointOfStep(const std::string& run_dir, int64_t step) {
  auto store = datalayer::CheckpointStore::Open(run_dir + "/checkpoints", 10);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return {};
  auto data = (*store)->Read(datalayer::ShardedCheckpointDirName(step));
  EXPECT_TRUE(data.ok()) << run_dir << ": " << data.status().ToString();
  return data.ok() ? *data : datalayer::CheckpointData{};
}

// The largest difference between two sets of tensors, relative to the
// largest magnitude of each tensor of `b`; *where names the tensor.
double LargestRelativeDifference(const std::map<std::string, torch::Tensor>& a,
                                 const std::map<std::string, torch::Tensor>& b, std::string* where) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    EXPECT_TRUE(it != b.end()) << name;
    if (it == b.end()) continue;
    const double scale = std::max(it->second.abs().max().item<double>(), 1e-30);
    const double d = (t - it->second).abs().max().item<double>() / scale;
    if (d > worst) {
      worst = d;
      *where = name;
    }
  }
  return worst;
}

// The training components of fused plan `p`.
std::vector<std::string> TrainedComponents(const plan::Plan& p) {
  std::vector<std::string> out;
  for (const auto& c : p.sections[0].components) {
    if (c.mode == plan::SectionMode::kTrain) out.push_back(c.name);
  }
  return out;
}

// Fused plan `p` (cp > 1) under mpirun, 2 steps with a checkpoint after
// each, against the one-process reference (run for 1 step, then resumed for
// the second, so it keeps the checkpoint of step 0 too): every step's loss
// within 1e-5 relative; with `gradients` (AdamW whole on every rank), every
// trained component's gradient of step 0 (its AdamW first moment) within
// 1e-5 of the reference's, relative to each tensor's largest element.
void ExpectFusedContextParallelEqualsReference(const std::string& what, plan::Plan p, bool gradients) {
  p.checkpoint_every = 1;
  runtime_testing::PlaceOnThisMachine(p, 2);
  const std::string dir = Fresh(what);
  const std::string plan_path = WritePlan(p, dir);
  const auto run = RunWorkers(p, plan_path, dir + "/run");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* steps : {"1", "2"}) {
    const auto reference = runtime_testing::RunReference(plan_path, dir + "/reference", {"--steps", steps});
    ASSERT_EQ(reference.exit_code, 0) << reference.output;
  }
  const auto a = Losses(dir + "/run"), r = Losses(dir + "/reference");
  ASSERT_EQ(a.size(), 2u) << run.output;
  ASSERT_EQ(r.size(), a.size());
  for (const auto& [step, loss] : a) {
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_NEAR(loss, r.at(step), 1e-5 * std::abs(r.at(step))) << what << " step " << step << " vs the reference";
    std::printf("%s step %lld: loss %.9g, the reference %.9g\n", what.c_str(), static_cast<long long>(step), loss,
                r.at(step));
  }
  EXPECT_LT(a.rbegin()->second, a.begin()->second) << what << ": the loss moves";
  if (!gradients) return;
  const auto mine = CheckpointOfStep(dir + "/run", 0), want = CheckpointOfStep(dir + "/reference", 0);
  for (const std::string& name : TrainedComponents(p)) {
    const auto g = FirstMoments(p, name, mine), w = FirstMoments(p, name, want);
    ASSERT_FALSE(g.empty()) << what << " " << name;
    ASSERT_EQ(g.size(), w.size()) << what << " " << name;
    std::string where;
    const double d = LargestRelativeDifference(g, w, &where);
    std::printf("%s %s: gradients of step 0 vs the reference %.2e (%s)\n", what.c_str(), name.c_str(), d,
                where.c_str());
    EXPECT_LE(d, 1e-5) << what << " " << name << ": " << where;
  }
}

TEST(FusedContextParallelTraining, VlmCp2EqualsTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  ExpectFusedContextParallelEqualsReference("vlm_cp2", FusedPlan("tiny_vlm3.toml", 1, 2, 1, 2), true);
}

// Each CP rank has its own DP group: the gradients summed over CP, then
// all-reduced over DP.
TEST(FusedContextParallelTraining, VlmCp2TimesDp2EqualsTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  ExpectFusedContextParallelEqualsReference("vlm_cp2_dp2", FusedPlan("tiny_vlm3.toml", 1, 2, 2, 2), true);
}

// ZeRO-1 shards every component's AdamW over the DP group after the sum over
// CP (its checkpoint holds shards: losses only).
TEST(FusedContextParallelTraining, VlmCp2TimesDp2WithZero1EqualsTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  ExpectFusedContextParallelEqualsReference("vlm_cp2_dp2_zero1",
                                            FusedPlan("tiny_vlm3.toml", 1, 2, 2, 2, /*zero_stage=*/1), false);
}

// TP 2 inside each CP rank: the ViT and projector split over TP as fused
// sections do at CP 1 (AdamW sharded over TP: losses only).
TEST(FusedContextParallelTraining, VlmCp2TimesTp2EqualsTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  ExpectFusedContextParallelEqualsReference("vlm_tp2_cp2", FusedPlan("tiny_vlm3.toml", 2, 2, 1, 2), false);
}

TEST(FusedContextParallelTraining, KdTeacherAndStudentCp2EqualTheReference) {
  ExpectFusedContextParallelEqualsReference("kd_cp2", FusedPlan("tiny_kd.toml", 1, 2, 1, 2), true);
}

TEST(FusedContextParallelTraining, StopAndResumeIsBitIdenticalToAnUninterruptedRun) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  const plan::Plan p = FusedPlan("tiny_vlm3.toml", 1, 2, 1, 3);
  const std::string dir = Fresh("resume");
  const std::string plan_path = WritePlan(p, dir);
  const auto whole = RunWorkers(p, plan_path, dir + "/whole");
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto first = RunWorkers(p, plan_path, dir + "/split", {"--stop-after-steps", "2"});
  ASSERT_EQ(first.exit_code, 85) << "a stopped run exits 85 (requeue)\n" << first.output;
  const auto second = RunWorkers(p, plan_path, dir + "/split");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const auto a = Losses(dir + "/whole"), b = Losses(dir + "/split");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u) << "the resumed run starts at the next step, not over";
  for (const auto& [step, loss] : a) EXPECT_EQ(loss, b.at(step)) << "step " << step;
  const auto x = LastCheckpoint(dir + "/whole"), y = LastCheckpoint(dir + "/split");
  EXPECT_EQ(x.step, 2);
  for (const std::string& name : TrainedComponents(p)) {
    ASSERT_TRUE(x.sections.count(name)) << name;
    ASSERT_TRUE(y.sections.count(name)) << name;
    EXPECT_TRUE(x.sections.at(name).model == y.sections.at(name).model) << "weights of " << name;
  }
}

// The runtime's rule (CheckContextParallelRuns) that FusedPlanBlocker
// states for the planner: fused CP runs at PP 1 only.
TEST(FusedContextParallelRules, CpWithPipelineStagesIsRefusedNamingTheFix) {
  plan::Plan p = FusedPlan("tiny_kd.toml", 1, 2, 1, 2);
  ASSERT_FALSE(p.sections.empty());
  EXPECT_TRUE(plan::CheckContextParallelRuns(p, p.sections[0]).ok());
  p.sections[0].config.pp = 2;
  const Status refused = plan::CheckContextParallelRuns(p, p.sections[0]);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("cp 2 x pp 2"), std::string::npos) << refused.ToString();
  EXPECT_NE(refused.message().find("--grouping sectioned"), std::string::npos) << refused.ToString();
}

// ---- the compiler ----

// specs/qwen2vl_7b_mllm.toml (ViT + LLM) at 128K-token samples: its
// monolithic baseline runs the LLM at CP > 1 (its samples fit no
// configuration without). At the spec's own 32K tokens it did until the
// chunked vocabulary loss (docs/loss_chunking.md) let the LLM fit at CP 1.
// `support`: a --runtime-support list, "" for this build's.
StatusOr<compiler::CompileResult> CompileQwen2Vl(compiler::Grouping grouping, const std::string& support) {
  const std::string path = std::string(MAESTRO_SOURCE_DIR) + "/specs/qwen2vl_7b_mllm.toml";
  MAESTRO_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, int64_t{1} << 22, "the qwen2vl spec"));
  const std::string seq = "seq_len = 32768";
  const size_t at = text.find(seq);
  if (at == std::string::npos) return Status::Internal(path + " no longer holds '" + seq + "'");
  text.replace(at, seq.size(), "seq_len = 131072");
  auto spec = compiler::ParseSpecString(text, path, std::string(MAESTRO_SOURCE_DIR) + "/specs");
  if (!spec.ok()) return spec.status();
  return runtime_testing::CompileForRuntime(*spec, grouping, support);
}

TEST(FusedContextParallelCompiler, AMonolithicBaselineWithCpIsTheFusedPlanWhenFaster) {
  auto r = CompileQwen2Vl(compiler::Grouping::kAuto, "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->monolithic.found);
  ASSERT_GT(r->monolithic.config.cp, 1) << "the baseline this test is about runs CP";
  const double sectioned = r->simulated.step_seconds, fused = r->monolithic_simulated.step_seconds;
  std::printf("qwen2vl: sectioned %.3f s, monolithic %.3f s (TP%d CP%d PP%d DP%d); %s\n", sectioned, fused,
              r->monolithic.config.tp, r->monolithic.config.cp, r->monolithic.config.pp, r->monolithic.config.dp,
              r->grouping.why.c_str());
  EXPECT_EQ(r->grouping.why.find("cannot run"), std::string::npos) << "the fused plan runs: " << r->grouping.why;
  const auto js = nlohmann::json::parse(r->report_json);
  if (fused < sectioned) {
    EXPECT_TRUE(r->grouping.fused) << r->grouping.why;
    ASSERT_EQ(r->plan.sections.size(), 1u);
    EXPECT_EQ(r->plan.sections[0].config.cp, r->monolithic.config.cp);
    EXPECT_EQ(r->grouping.rejected, "sectioned");
    EXPECT_NEAR(r->grouping.rejected_step_seconds, sectioned, 1e-9 * sectioned);
    EXPECT_DOUBLE_EQ(js["speedup_vs_monolithic"].get<double>(), 1.0);
    EXPECT_NE(r->report.find(fmt::format("CP {}", r->monolithic.config.cp)), std::string::npos) << r->report;
  } else {
    EXPECT_FALSE(r->grouping.fused);
    EXPECT_EQ(r->grouping.rejected, "fused") << "the fused plan can run: it is the rejected alternative";
    EXPECT_NEAR(r->grouping.rejected_step_seconds, fused, 1e-9 * fused);
  }
  EXPECT_GE(js["speedup_vs_monolithic"].get<double>(), 1.0 - 1e-9) << r->report;
  // The report names both groupings and the rejected one's step.
  EXPECT_NE(r->report.find("grouping: "), std::string::npos) << r->report;
  EXPECT_NE(r->report.find("rejected: "), std::string::npos) << r->report;
}

TEST(FusedContextParallelCompiler, GroupingFusedGivesOneSectionWithTheBaselinesCpThatTheRuntimeAccepts) {
  auto r = CompileQwen2Vl(compiler::Grouping::kFused, "");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->plan.sections.size(), 1u);
  const auto& f = r->plan.sections[0];
  EXPECT_TRUE(f.fused());
  EXPECT_GT(f.config.cp, 1);
  EXPECT_EQ(f.config.cp, r->monolithic.config.cp);
  EXPECT_EQ(f.config.pp, 1) << "fused CP runs at PP 1";
  const Status runs = plan::CheckContextParallelRuns(r->plan, f);
  EXPECT_TRUE(runs.ok()) << "the compiler emits only what the runtime runs: " << runs.ToString();
}

TEST(FusedContextParallelCompiler, ARuntimeWithoutCpFusedNamesCpAsTheBlocker) {
  // This build's table less cp_fused: --grouping fused fails naming CP, auto
  // keeps sectioned and says why.
  const std::string without =
      "dp,micro_batch,tp_decoder,pp_decoder,tp_encoder,pp_fused,cp_decoder,cp_encoder,moe,ep,recompute,zero1,"
      "run_ahead,run_ahead_mp";
  auto forced = CompileQwen2Vl(compiler::Grouping::kFused, without);
  ASSERT_FALSE(forced.ok());
  EXPECT_NE(forced.status().message().find("fused sections run CP = 1"), std::string::npos)
      << forced.status().ToString();
  auto automatic = CompileQwen2Vl(compiler::Grouping::kAuto, without);
  ASSERT_TRUE(automatic.ok()) << automatic.status().ToString();
  EXPECT_FALSE(automatic->grouping.fused);
  EXPECT_NE(automatic->grouping.why.find("CP = 1"), std::string::npos) << automatic->grouping.why;
  auto with = CompileQwen2Vl(compiler::Grouping::kAuto, without + ",cp_fused");
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_EQ(with->grouping.why.find("cannot run"), std::string::npos) << with->grouping.why;
}

}  // namespace
}  // namespace maestro
