// SPDX-License-Identifier: Apache-2.0
// MoE decoders trained by maestro-worker ranks under mpirun (labels
// mpi;runtime; docs/moe.md): the tiny KD student of specs/tiny_kd.toml
// turned into a MoE (Mixtral shape: top 2 of 4 renormalized; Qwen2-MoE
// shape: top 2 of 4 as they are plus a gated shared expert) at DP 2 and at
// TP 2 x DP 2 (experts sharded like a dense MLP), with
// the load-balancing loss: every step's loss equals the one-process
// reference's (runtime/reference.h) within 1e-5 relative, and the
// load-balancing term is in that loss (the same run with
// router_aux_loss_coef = 0 is lower at step 0 by coef * balance, balance in
// [k/2, E]). No torch here.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using runtime_testing::Losses;

constexpr int64_t kExperts = 4, kTopK = 2;
constexpr double kAuxCoef = 0.05;

enum class Shape { kMixtral, kQwen2Moe };

// specs/tiny_kd.toml placed on this machine: the teacher (from the seed) on
// one rank, the student a MoE of `shape` at TP `tp` x DP `dp` with
// micro-batches of 4 and `zero_stage`.
plan::Plan MoePlan(Shape shape, int dp, int zero_stage, double aux_coef, int64_t steps, int tp = 1) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_kd.toml", compiler::Grouping::kSectioned);
  if (plan::SectionPlan* s = runtime_testing::ShapeTinyKd(p, {tp, 1, 1, dp, 4}, {1, 1, 1, 1, 8}, zero_stage)) {
    runtime_testing::UseTinyMoe(s->model, shape == Shape::kQwen2Moe, aux_coef);
    EXPECT_EQ(s->model.experts, kExperts);
    EXPECT_EQ(s->model.experts_per_token, kTopK);
    if (shape == Shape::kQwen2Moe) s->model.extra["qkv_bias"] = 1;
  }
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

using runtime_testing::WritePlan;

// Fresh(name): <test-tmp>/runtime_moe/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_moe"};

// The losses of a run under mpirun in `run_dir` (a failure unless it exits 0).
std::map<int64_t, double> TrainedLosses(const plan::Plan& p, const std::string& plan_path, const std::string& run_dir) {
  const auto run = runtime_testing::RunWorkers(p, plan_path, run_dir);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  return Losses(run_dir);
}

void ExpectEqualsReference(const std::string& what, const plan::Plan& p) {
  runtime_testing::ExpectRunEqualsReference(what, p, Fresh(what));
}

TEST(MoeTraining, MixtralShapeStudentDp2Zero1EqualsTheReference) {
  ExpectEqualsReference("mixtral_dp2_zero1", MoePlan(Shape::kMixtral, 2, 1, kAuxCoef, 4));
}

TEST(MoeTraining, Qwen2MoeShapeStudentDp2EqualsTheReference) {
  ExpectEqualsReference("qwen2_moe_dp2", MoePlan(Shape::kQwen2Moe, 2, 0, kAuxCoef, 4));
}

// TP shards every expert and the shared expert like a dense MLP.
TEST(MoeTraining, Qwen2MoeShapeStudentTp2Dp2EqualsTheReference) {
  ExpectEqualsReference("qwen2_moe_tp2_dp2", MoePlan(Shape::kQwen2Moe, 2, 1, kAuxCoef, 3, 2));
}

// The load-balancing term is part of the loss the runtime trains on: with
// the same weights (step 0), loss(coef) - loss(0) = coef * mean_b balance_b,
// and balance_b lies in [k/2, E] for any routing that is not degenerate
// (k when it is even, E at most).
TEST(MoeTraining, TheLoadBalancingTermIsInTheLoss) {
  const plan::Plan with = MoePlan(Shape::kMixtral, 2, 0, kAuxCoef, 1);
  const plan::Plan without = MoePlan(Shape::kMixtral, 2, 0, 0.0, 1);
  const std::string dir = Fresh("aux_term");
  const auto a = TrainedLosses(with, WritePlan(with, dir + "/with"), dir + "/with/run");
  const auto b = TrainedLosses(without, WritePlan(without, dir + "/without"), dir + "/without/run");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  const double balance = (a.at(0) - b.at(0)) / kAuxCoef;
  EXPECT_GE(balance, 0.5 * kTopK) << a.at(0) << " vs " << b.at(0);
  EXPECT_LE(balance, static_cast<double>(kExperts)) << a.at(0) << " vs " << b.at(0);
}

}  // namespace
}  // namespace maestro
