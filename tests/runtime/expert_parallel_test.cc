// SPDX-License-Identifier: Apache-2.0
// Expert parallelism (labels mpi;runtime; docs/moe.md, runtime/parallel/
// expert_parallel.h): maestro-worker ranks under mpirun train the tiny KD
// student of specs/tiny_kd.toml turned into a MoE (Mixtral shape: top 2 of
// 4; Qwen2-MoE shape with a shared expert) with its experts split over EP
// groups carved from its DP ranks, and every step's loss equals the
// one-process reference's (runtime/reference.h, no EP) within 1e-5
// relative: EP 2 x DP 2 (dp = 2, ep = 2), EP 2 with DP 4 and ZeRO-1 (the
// routed experts' gradients reduced and their AdamW state sharded over the
// 2 ranks holding the same experts), EP 2 x TP 2, EP 2 x PP 2. A run stopped
// and resumed from its checkpoint ends with the losses and weights of an
// uninterrupted one. runtime_ep_probe checks the exchange itself against
// experts run locally, and that a broken lockstep (one EP rank runs a MoE
// layer fewer) ends with the launcher's timeout naming the ep group.
// No torch here.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
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

using launcher::testing::MpirunArgs;
using launcher::testing::RunCaptured;
using runtime_testing::Losses;
using runtime_testing::WritePlan;
const std::string kProbe = std::string(MAESTRO_BIN_DIR) + "/runtime_ep_probe";

enum class Shape { kMixtral, kQwen2Moe };

struct Layout {
  int dp = 2, ep = 2, tp = 1, pp = 1, zero_stage = 0;
};

// specs/tiny_kd.toml on this machine: the teacher (from the seed) on one
// rank, the student a MoE of 4 experts, top 2, at `layout`, micro-batches
// of 2 (so a replica runs several, and the balanced placement may give the
// replicas of an EP group different counts).
plan::Plan EpPlan(Shape shape, Layout layout, int64_t steps, double aux_coef = 0.05) {
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_kd.toml", compiler::Grouping::kSectioned);
  plan::SectionPlan* student =
      runtime_testing::ShapeTinyKd(p, {layout.tp, layout.pp, 1, layout.dp, 2}, {1, 1, 1, 1, 8}, layout.zero_stage);
  for (auto& s : p.sections) s.config.ep = &s == student ? layout.ep : 1;
  if (student != nullptr) runtime_testing::UseTinyMoe(student->model, shape == Shape::kQwen2Moe, aux_coef);
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// Fresh(name): <test-tmp>/runtime_ep/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_ep"};

// Per step, the number of micro-batches each rank of section `pid` (its
// index) computed, from the run's trace.json (the "F<i>" intervals; an empty
// micro-batch of the EP lockstep is not one).
std::map<int64_t, std::map<int, int>> ForwardsPerStep(const std::string& run_dir, int pid) {
  std::map<int64_t, std::map<int, int>> out;
  const auto trace = nlohmann::json::parse(runtime_testing::ReadText(run_dir + "/trace.json"), nullptr, false);
  if (!trace.is_object() || !trace.contains("traceEvents")) return out;
  for (const auto& e : trace["traceEvents"]) {
    if (!e.contains("name") || !e.contains("pid") || !e.contains("tid") || !e.contains("args")) continue;
    const std::string name = e["name"].get<std::string>();
    if (e["pid"].get<int>() != pid || name.empty() || name[0] != 'F' || !e["args"].contains("step")) continue;
    ++out[e["args"]["step"].get<int64_t>()][e["tid"].get<int>()];
  }
  return out;
}

void ExpectEqualsReference(const std::string& what, const plan::Plan& p) {
  ASSERT_TRUE(plan::Validate(p).ok()) << plan::Validate(p).ToString();
  runtime_testing::ExpectRunEqualsReference(what, p, Fresh(what));
}

// EP 4 over all 4 DP ranks: the balanced placement gives the replicas 3, 3,
// 2 and 2 micro-batches, so the ranks with fewer run empty ones in lockstep
// (their experts serve the others' rows, forward and backward).
TEST(ExpertParallel, MixtralShapeEp4Dp4WithUnequalReplicasEqualsTheReference) {
  const plan::Plan p = EpPlan(Shape::kMixtral, {4, 4, 1, 1, 1}, 3);
  ExpectEqualsReference("mixtral_ep4_dp4", p);
  const auto forwards =
      ForwardsPerStep(std::string(MAESTRO_TEST_TMP) + "/runtime_ep/mixtral_ep4_dp4/run", p.section_index("student"));
  ASSERT_EQ(static_cast<int64_t>(forwards.size()), p.data.steps);
  bool unequal = false;
  for (const auto& [step, per_rank] : forwards) {
    std::set<int> counts;
    for (const auto& [rank, n] : per_rank) counts.insert(n);
    unequal |= counts.size() > 1;
  }
  EXPECT_TRUE(unequal) << "the case must give an EP group's replicas different micro-batch counts";
}

TEST(ExpertParallel, MixtralShapeEp2Dp2EqualsTheReference) {
  ExpectEqualsReference("mixtral_ep2_dp2", EpPlan(Shape::kMixtral, {}, 4));
}

// Expert-DP 2: experts 0-1 on DP ranks 0 and 2, experts 2-3 on 1 and 3.
TEST(ExpertParallel, MixtralShapeEp2Dp4Zero1EqualsTheReference) {
  ExpectEqualsReference("mixtral_ep2_dp4_zero1", EpPlan(Shape::kMixtral, {4, 2, 1, 1, 1}, 4));
}

TEST(ExpertParallel, Qwen2MoeShapeEp2Tp2EqualsTheReference) {
  ExpectEqualsReference("qwen2_moe_ep2_tp2", EpPlan(Shape::kQwen2Moe, {2, 2, 2, 1, 1}, 3));
}

// With the load-balancing term: each pipeline stage adds its own MoE layers'
// part of it (their sum over the model's MoE layer count) as a loss beside
// its activation, so the stages' parts add up to the reference's term.
TEST(ExpertParallel, MixtralShapeEp2Pp2EqualsTheReference) {
  ExpectEqualsReference("mixtral_ep2_pp2", EpPlan(Shape::kMixtral, {2, 2, 1, 2, 1}, 3));
}

TEST(ExpertParallel, MixtralShapePp2Dp2WithoutEpEqualsTheReference) {
  ExpectEqualsReference("mixtral_pp2_dp2", EpPlan(Shape::kMixtral, {2, 1, 1, 2, 1}, 3));
}

// Checkpoints hold every expert (gathered over the EP group) and each EP
// rank's optimizer state: a stopped and resumed run ends as an
// uninterrupted one, loss for loss and byte for byte.
void ExpectStopAndResumeBitIdentical(const std::string& what, const plan::Plan& p) {
  const std::string dir = Fresh(what);
  ASSERT_NO_FATAL_FAILURE(runtime_testing::ExpectStopAndResumeLossesEqual(what, p, dir, 2));
  const auto x = runtime_testing::LastCheckpoint(dir + "/whole");
  ASSERT_TRUE(x.sections.count("student")) << what;
  EXPECT_FALSE(x.sections.at("student").model.empty());
  runtime_testing::ExpectSameSectionWeights(what, dir + "/whole", dir + "/split", "student");
}

TEST(ExpertParallel, StopAndResumeEp2Dp2IsBitIdentical) {
  ExpectStopAndResumeBitIdentical("resume_ep2_dp2", EpPlan(Shape::kMixtral, {}, 4));
}

TEST(ExpertParallel, StopAndResumeEp2Dp4Zero1IsBitIdentical) {
  ExpectStopAndResumeBitIdentical("resume_ep2_dp4_zero1", EpPlan(Shape::kMixtral, {4, 2, 1, 1, 1}, 4));
}

launcher::testing::RunResult RunProbe(const std::string& what, const std::string& scenario, double timeout_s) {
  const plan::Plan p = EpPlan(Shape::kMixtral, {}, 1);
  const std::string plan_path = WritePlan(p, Fresh(what));
  auto argv = MpirunArgs(p.world_size());
  argv.insert(argv.end(), {kProbe, plan_path, scenario});
  return RunCaptured(argv, {{"MAESTRO_COMM_TIMEOUT_S", std::to_string(timeout_s)}});
}

TEST(ExpertParallel, TheExchangeEqualsExpertsRunLocally) {
  const auto r = RunProbe("probe_exchange", "exchange", 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PROBE OK"), std::string::npos) << r.output;
}

// A broken lockstep ends within the timeout with the launcher's error,
// naming the EP group and the rank that waited.
TEST(ExpertParallel, ALockstepMismatchEndsWithTheNamedTimeout) {
  const auto r = RunProbe("probe_mismatch", "mismatch", 2);
  EXPECT_EQ(r.exit_code, 86) << r.output;  // kExitPeerFailure
  EXPECT_LT(r.seconds, 2 + 20) << r.output;
  EXPECT_NE(r.output.find("on ep group of section 'student'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not complete within 2.0 s"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace maestro
