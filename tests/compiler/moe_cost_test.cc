// SPDX-License-Identifier: Apache-2.0
// The cost and memory models of MoE and expert parallelism (docs/moe.md),
// each expectation computed from the shapes:
//  - memory per rank: the routed experts' weights and gradients / ep, their
//    AdamW state under ZeRO-1 over the dp / ep ranks that hold the same
//    experts, everything else as at ep = 1;
//  - the all-to-all: 4 per layer in training, each (ep-1)/ep of the rank's
//    tokens * k rows of hidden bf16 values over the EP group's link (the
//    node's when the group fits on it, else the network);
//  - the step model's per-expert GEMMs: E/ep experts per rank at
//    m * k / E * ep rows each (capacity factor 1);
//  - the planner enumerates ep only with --allow-planner-only (the runtime
//    has no EP), ep dividing dp and E.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "compiler/candidates.h"
#include "compiler/cost_model.h"
#include "compiler/device_profile.h"
#include "compiler/memory_model.h"
#include "compiler/runtime_support.h"
#include "compiler/step_model.h"
#include "tests/fixtures/models.h"
#include "tests/fixtures/workloads.h"

namespace maestro::compiler {
namespace {

constexpr int64_t kExperts = 8, kTopK = 2, kExpertFfn = 512, kLayers = 4, kHidden = 256, kTokens = 128;

plan::ModelDesc Moe() {
  plan::ModelDesc d = fixtures::DecoderModel({kHidden, kLayers, 8, 2, 0, 1024});
  d.experts = kExperts;
  d.experts_per_token = kTopK;
  d.moe_ffn_hidden = kExpertFfn;
  return d;
}

double RoutedExpertParams() {
  return static_cast<double>(kLayers * kExperts * 3 * kHidden * kExpertFfn);
}

plan::ParallelConfig Config(int dp, int ep, int zero_stage) {
  plan::ParallelConfig c = ConfigOf(1, 1, 1, dp, 1, false);
  c.ep = ep;
  c.zero_stage = zero_stage;
  return c;
}

TEST(MoeMemoryModel, EpSplitsTheRoutedExpertsAndTheirOptimizerState) {
  const SectionWork s = fixtures::SectionOf("moe", Moe(), true, kTokens);
  const double p = static_cast<double>(s.facts.params), experts = RoutedExpertParams();
  ASSERT_GT(p, experts);
  const MemoryBreakdown one = EstimateSectionMemory(s, Config(4, 1, 0), 1, 1, fixtures::CpuLike());
  const MemoryBreakdown two = EstimateSectionMemory(s, Config(4, 2, 0), 1, 1, fixtures::CpuLike());
  EXPECT_DOUBLE_EQ(one.weights, 4 * p);
  EXPECT_DOUBLE_EQ(two.weights, 4 * (p - experts / 2));
  EXPECT_DOUBLE_EQ(two.gradients, 4 * (p - experts / 2));
  EXPECT_DOUBLE_EQ(two.optimizer, 8 * (p - experts / 2));
  // ZeRO-1 at dp 4, ep 2: the other parameters' moments over 4 ranks, this
  // rank's 4 of 8 experts' over the 2 ranks that hold them.
  const MemoryBreakdown zero = EstimateSectionMemory(s, Config(4, 2, 1), 1, 1, fixtures::CpuLike());
  EXPECT_DOUBLE_EQ(zero.optimizer, 8 * ((p - experts) / 4 + (experts / 2) / 2));
  // The graphs' bytes do not depend on ep. At 64 samples a micro-batch the
  // graphs are the larger of the transients (the gradient sync's shard and
  // buckets, which do depend on ep, are what one sample's micro-batch
  // holds at most).
  const MemoryBreakdown graphs = EstimateSectionMemory(s, Config(4, 2, 1), 1, 64, fixtures::CpuLike());
  const MemoryBreakdown graphs_ep1 = EstimateSectionMemory(s, Config(4, 1, 1), 1, 64, fixtures::CpuLike());
  const MemoryBreakdown zero_ep1 = EstimateSectionMemory(s, Config(4, 1, 1), 1, 1, fixtures::CpuLike());
  ASSERT_GT(graphs.activations, std::max(zero.activations, zero_ep1.activations)) << "the premise: graphs dominate";
  EXPECT_DOUBLE_EQ(graphs.activations, graphs_ep1.activations);
}

TEST(MoeCostModel, AllToAllTimeIsFourPerLayerOverTheEpGroupsLink) {
  DeviceType gpu = fixtures::H100Like(2, 989, 4);  // 4 GPUs a node: ep 2 fits, ep 8 does not
  gpu.precision = ParamPrecision::kPureBf16;
  const CostModel model({gpu}, 64);
  const SectionWork s = fixtures::SectionOf("moe", Moe(), true, kTokens);
  const double samples = 2;
  auto stage = [&](int dp, int ep) {
    plan::ParallelConfig c = Config(dp, ep, 1);
    c.micro_batch = 2;
    return model.EvaluateWith(s, c, 1, samples).stage_seconds;
  };
  const double rows_bytes = samples * kTokens * kHidden * 2.0 * kTopK;  // the rank's routed slots in bf16
  // ep 2 on one node: 4 x layers x 1/2 of the rows over the node's link.
  EXPECT_NEAR(stage(2, 2) - stage(2, 1), 4.0 * kLayers * 0.5 * rows_bytes / gpu.intra_bytes_per_s, 1e-12);
  // ep 8 spans two nodes: 7/8 of the rows over the network.
  EXPECT_NEAR(stage(8, 8) - stage(8, 1), 4.0 * kLayers * 7.0 / 8.0 * rows_bytes / gpu.inter_bytes_per_s, 1e-12);
}

TEST(MoeStepModel, EachRanksExpertsRunAtTheirShareOfTheGroupsSlots) {
  auto h100 = BuiltinDeviceProfile("h100_sxm");
  ASSERT_TRUE(h100.ok()) << h100.status().ToString();
  PassShape shape;
  shape.samples = 4;
  shape.tokens_per_sample = 1024;
  shape.lm_loss = true;
  auto pass = [&](int ep) {
    shape.ep = ep;
    auto p = PredictSectionPass(Moe(), shape, *h100);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    return p.ok() ? *p : PassTimes{};
  };
  auto term = [](const PassTimes& p, const std::string& name) {
    for (const auto& t : p.detail.terms) {
      if (t.name == name) return t;
    }
    ADD_FAILURE() << "no term " << name;
    return StepTerm{};
  };
  const PassTimes one = pass(1), four = pass(4);
  // gate + up: 2 GEMMs per local expert and layer, each 3 kernels in training.
  EXPECT_DOUBLE_EQ(term(one, "gemm moe.experts gate_proj + up_proj").kernels, 2.0 * kLayers * kExperts * 3);
  EXPECT_DOUBLE_EQ(term(four, "gemm moe.experts gate_proj + up_proj").kernels, 2.0 * kLayers * kExperts / 4 * 3);
  // One GEMM of m * k / E * ep rows: the same FLOPs in fewer, larger GEMMs
  // are no slower (the measured tables' efficiency grows with the size).
  const double m = shape.samples * shape.tokens_per_sample;
  const double rows = m * kTopK / kExperts;
  const double down1 = kLayers * kExperts * TrainGemmSeconds(rows, kExpertFfn, kHidden, *h100);
  const double down4 = kLayers * kExperts / 4 * TrainGemmSeconds(rows * 4, kExpertFfn, kHidden, *h100);
  EXPECT_NEAR(term(one, "gemm moe.experts down_proj").seconds, down1, 1e-9 * down1);
  EXPECT_NEAR(term(four, "gemm moe.experts down_proj").seconds, down4, 1e-9 * down4);
  EXPECT_LE(term(four, "gemm moe.experts down_proj").seconds, term(one, "gemm moe.experts down_proj").seconds);
  // The router is priced; the dense MLP (ffn_hidden 0 here) is not.
  EXPECT_GT(term(one, "gemm moe.router").seconds, 0.0);
  for (const auto& t : one.detail.terms) EXPECT_EQ(t.name.find("mlp.gate_proj"), std::string::npos) << t.name;
}

TEST(MoePlanner, EpIsEnumeratedWhereTheRuntimeRunsIt) {
  DeviceType gpu = fixtures::H100Like(1);
  const CostModel model({gpu}, 64);
  const SectionWork s = fixtures::SectionOf("moe", Moe(), true, kTokens);
  PlannerOptions o;
  int eps = 0;
  for (const auto& c : CandidateConfigs(model, s, o)) {
    if (c.ep == 1) continue;
    ++eps;
    EXPECT_EQ(c.dp % c.ep, 0);
    EXPECT_EQ(kExperts % c.ep, 0);
    EXPECT_EQ(PlannerOnlyFeatures(s.model, c), "") << "the runtime runs EP (runtime_support.h)";
  }
  EXPECT_GT(eps, 0);
  // A runtime without EP: planner-only, enumerated with --allow-planner-only.
  o.support.expert_parallel = false;
  int without = 0;
  for (const auto& c : CandidateConfigs(model, s, o)) without += c.ep > 1;
  EXPECT_EQ(without, 0);
  o.allow_planner_only = true;
  for (const auto& c : CandidateConfigs(model, s, o)) {
    if (c.ep == 1) continue;
    ++without;
    EXPECT_NE(PlannerOnlyFeatures(s.model, c, o.support).find("EP="), std::string::npos);
  }
  EXPECT_GT(without, 0);
  EXPECT_EQ(PlannerOnlyFeatures(s.model, Config(2, 1, 1)), "") << "MoE itself runs on the runtime";
}

}  // namespace
}  // namespace maestro::compiler
