// SPDX-License-Identifier: Apache-2.0
// The planner against the exhaustive oracle on small random instances
// (forests, a cycle in the undirected graph, two GPU types, pinned fan-outs),
// and the constraints every plan must satisfy.
#include "compiler/planner.h"

#include <gtest/gtest.h>

#include <random>
#include <tuple>
#include <vector>

#include "compiler/model.h"
#include "compiler/monolithic.h"
#include "tests/fixtures/workloads.h"

namespace maestro::compiler {
namespace {

DeviceType Gpu(const std::string& name, int nodes, int gpn, double mem_gb, double tflops) {
  DeviceType d = fixtures::H100Like(nodes, tflops, gpn, name);
  d.memory_bytes = mem_gb * 1e9;
  d.reserved_bytes = 1e9;
  d.intra_bytes_per_s = 300e9;
  d.inter_bytes_per_s = 25e9;
  return d;
}

SectionWork Decoder(const std::string& name, int64_t hidden, int64_t layers, bool train, double fraction,
                    int64_t tokens, int device = 0) {
  return fixtures::DecoderWork(name, {hidden, layers, 16, 4, 0, 32000}, train, tokens, fraction, "always", device);
}

EdgeWork Edge(int from, int to, double bytes, bool grad) {
  return fixtures::EdgeBetween(from, to, bytes, grad, 25e9);
}

void ExpectValid(const CostModel& model, const Workload& w, const Assignment& a) {
  std::vector<int> nodes(model.devices().size(), 0);
  for (size_t i = 0; i < w.sections.size(); ++i) {
    const SectionCost& c = a.sections[i].cost;
    EXPECT_TRUE(c.fits) << w.sections[i].name;
    EXPECT_GT(c.nodes, 0);
    EXPECT_EQ(c.gpus, c.config.tp * c.config.pp * c.config.cp * c.config.dp);
    const int gpn = model.devices()[static_cast<size_t>(w.sections[i].device)].gpus_per_node;
    EXPECT_TRUE(c.gpus % gpn == 0 || gpn % c.gpus == 0) << c.gpus;
    nodes[static_cast<size_t>(w.sections[i].device)] += c.nodes;
  }
  for (size_t d = 0; d < nodes.size(); ++d) EXPECT_LE(nodes[d], model.devices()[d].nodes);
  for (const auto& e : w.edges) {
    const int a_dp = a.sections[static_cast<size_t>(e.from)].cost.config.dp;
    const int b_dp = a.sections[static_cast<size_t>(e.to)].cost.config.dp;
    EXPECT_TRUE(b_dp % a_dp == 0 || a_dp % b_dp == 0) << a_dp << " " << b_dp;
    if (e.fanout) {
      EXPECT_EQ(b_dp, a_dp * e.fanout);
    }
    if (e.fanin) {
      EXPECT_EQ(a_dp, b_dp * e.fanin);
    }
  }
}

PlannerOptions SmallOptions() {
  PlannerOptions o;
  o.micro_batches = {1, 2, 4};
  o.max_pp = 2;
  return o;
}

int g_compared = 0;  // instances where both found a plan

void CompareWithOracle(const CostModel& model, const Workload& w, const PlannerOptions& o, const std::string& what) {
  const PlanOutcome fast = PlanSections(model, w, o);
  const PlanOutcome exact = ExhaustiveSearch(model, w, o);
  ASSERT_EQ(fast.ok(), exact.ok()) << what << ": " << fast.failure.message;
  if (!exact.ok()) return;
  ++g_compared;
  ExpectValid(model, w, fast.assignment);
  EXPECT_GE(fast.assignment.throughput, 0.98 * exact.assignment.throughput) << what;
  EXPECT_LE(fast.assignment.throughput, exact.assignment.throughput * (1 + 1e-9)) << what;
}

TEST(Planner, WithinTwoPercentOfExhaustiveSearchOnRandomForests) {
  std::mt19937 rng(20260522);
  std::uniform_int_distribution<int> hidden(4, 32), layers(1, 4), nodes(2, 3), batch(8, 64);
  std::uniform_real_distribution<double> frac(0.1, 1.0);
  for (int trial = 0; trial < 12; ++trial) {
    const CostModel model({Gpu("g", nodes(rng), 4, 40, 300)}, batch(rng));
    Workload w;
    const int n = 2 + trial % 2;
    for (int i = 0; i < n; ++i) {
      w.sections.push_back(Decoder("s" + std::to_string(i), 128 * hidden(rng), 4 * layers(rng), trial % 3 != 0 || i > 0,
                                   i == 0 ? frac(rng) : 1.0, 1024));
    }
    for (int i = 0; i + 1 < n; ++i) w.edges.push_back(Edge(i, n - 1 == i + 1 ? i + 1 : n - 1, 1e6, true));
    CompareWithOracle(model, w, SmallOptions(), "trial " + std::to_string(trial));
  }
  EXPECT_GE(g_compared, 9);  // most random instances are feasible: the comparison happened
}

// CP ranks hold the same parameters: their gradients are summed with the DP
// replicas' (issue #16), so CP 2 at DP 1 still pays a sync, and CP 2 x DP 2
// pays one ring all-reduce over the 4 DP x CP ranks (what the runtime runs,
// docs/gradient_sync.md).
TEST(CostModel, TheGradientSyncSpansDataAndContextParallelRanks) {
  const CostModel model({Gpu("g", 2, 8, 80, 300)}, 32);
  const SectionWork s = Decoder("llm", 1024, 8, true, 1, 4096);
  plan::ParallelConfig c;
  c.micro_batch = 1;
  EXPECT_EQ(model.Evaluate(s, c).dp_sync_seconds, 0.0);
  c.cp = 2;
  const double cp2 = model.Evaluate(s, c).dp_sync_seconds;
  EXPECT_GT(cp2, 0.0);
  c.cp = 1;
  c.dp = 2;
  EXPECT_DOUBLE_EQ(model.Evaluate(s, c).dp_sync_seconds, cp2);  // the same group of 2, the same bytes
  c.cp = 2;
  // One all-reduce over the 4 DP x CP ranks: 2 (n - 1) / n of the bytes.
  EXPECT_NEAR(model.Evaluate(s, c).dp_sync_seconds / cp2, (3.0 / 4) / (1.0 / 2), 1e-9);
  // ZeRO-1 over the same 4 ranks: reduce-scatter of the fp32 gradients and
  // all-gather of the fp32 parameters, (n - 1) / n of each: the same bytes.
  c.zero_stage = 1;
  EXPECT_NEAR(model.Evaluate(s, c).dp_sync_seconds / cp2, (3.0 / 4) / (1.0 / 2), 1e-9);
}

TEST(CostModel, AMeasuredProfileReplacesTheAnalyticTime) {
  const CostModel model({Gpu("g", 2, 4, 40, 300)}, 32);
  SectionWork s = Decoder("llm", 1024, 8, true, 1, 1024);
  plan::ParallelConfig c;
  c.tp = 2;
  c.dp = 2;
  c.micro_batch = 4;
  const SectionCost analytic = model.Evaluate(s, c);
  ProfileSpec point{"llm", 2, 4, 0.5, 0.2, 0.05, {}};
  s.profiles.push_back(point);
  const SectionCost measured = model.Evaluate(s, c);
  EXPECT_FALSE(analytic.measured);
  EXPECT_TRUE(measured.measured);
  EXPECT_DOUBLE_EQ(measured.stage_seconds, 0.5);
  EXPECT_DOUBLE_EQ(measured.forward_share, 0.2 / 0.5);
  EXPECT_DOUBLE_EQ(measured.optimizer_seconds, 0.05);
  // 16 samples / mb 4; the measured optimizer step once per step.
  EXPECT_DOUBLE_EQ(measured.step_seconds, 4 * 0.5 + measured.dp_sync_seconds + 0.05);
  c.micro_batch = 2;  // one point: proportional to the samples
  EXPECT_TRUE(model.Evaluate(s, c).measured);
  EXPECT_DOUBLE_EQ(model.Evaluate(s, c).stage_seconds, 0.25);
  c.tp = 1;  // no profile on replicas of 1 GPU: analytic again
  EXPECT_FALSE(model.Evaluate(s, c).measured);
}

// A configuration whose GPU count the profile did not measure: the model's
// compute there times measured / modelled at the nearest measured count, not
// the model alone beside measured configurations (docs/spec.md, [[profile]]).
TEST(CostModel, AConfigurationTheProfileMissesIsTheModelScaledToTheNearestMeasuredCount) {
  DeviceType d = Gpu("g", 2, 4, 40, 300);
  d.intra_bytes_per_s = d.inter_bytes_per_s = 1e30;  // no communication: the compute alone
  const CostModel model({d}, 32);
  const SectionWork bare = Decoder("llm", 1024, 8, true, 1, 1024);
  SectionWork s = bare;
  s.profiles.push_back(ProfileSpec{"llm", 1, 4, 0.8, 0.3, 0.1, {}});
  plan::ParallelConfig one;
  one.micro_batch = 4;
  ASSERT_TRUE(model.Evaluate(s, one).measured);
  const double scale = 0.8 / model.Evaluate(bare, one).stage_seconds;
  ASSERT_GT(std::abs(scale - 1.0), 0.05) << "the premise: the model and the measurement differ";
  for (const auto& [tp, pp, cp] : std::vector<std::tuple<int, int, int>>{{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {2, 2, 1}}) {
    plan::ParallelConfig c = one;
    c.tp = tp;
    c.pp = pp;
    c.cp = cp;
    const SectionCost got = model.Evaluate(s, c);
    const SectionCost modelled = model.Evaluate(bare, c);
    SCOPED_TRACE(::testing::Message() << "tp " << tp << " pp " << pp << " cp " << cp);
    EXPECT_FALSE(got.measured);
    EXPECT_EQ(got.calibrated_at_gpus, 1);
    EXPECT_NEAR(got.calibration_scale, scale, 1e-12 * scale);
    EXPECT_NEAR(got.stage_seconds, modelled.stage_seconds * scale, 1e-9 * got.stage_seconds);
    EXPECT_DOUBLE_EQ(got.forward_share, 0.3 / 0.8);
    EXPECT_NEAR(got.optimizer_seconds, 0.1 / (tp * pp), 1e-15);  // the measured step per parameter held
  }
  // Profiled at 1 and 4 GPUs: a replica of 2 is as near to both by ratio and
  // takes the smaller; one of 8 takes 4.
  s.profiles.push_back(ProfileSpec{"llm", 4, 4, 0.3, 0.1, 0.03, {}});
  plan::ParallelConfig two = one;
  two.tp = 2;
  EXPECT_EQ(model.Evaluate(s, two).calibrated_at_gpus, 1);
  two.pp = 4;
  EXPECT_EQ(model.Evaluate(s, two).calibrated_at_gpus, 4);
  // No profile at all: the model alone, unscaled.
  EXPECT_EQ(model.Evaluate(bare, two).calibration_scale, 0.0);
}

TEST(CostModel, ProfilesInterpolateLinearlyBetweenMicroBatchSizes) {
  const CostModel model({Gpu("g", 2, 4, 40, 300)}, 32);
  SectionWork s = Decoder("llm", 1024, 8, true, 1, 1024);
  // Micro-batch sizes that divide the 32 samples: every micro-batch is full.
  s.profiles.push_back(ProfileSpec{"llm", 1, 8, 0.9, 0.0, 0.0, {}});
  s.profiles.push_back(ProfileSpec{"llm", 1, 2, 0.3, 0.0, 0.0, {}});  // out of order on purpose
  plan::ParallelConfig c;
  const auto stage = [&](int mb) {
    c.micro_batch = mb;
    return model.Evaluate(s, c).stage_seconds;
  };
  EXPECT_DOUBLE_EQ(stage(2), 0.3);
  EXPECT_NEAR(stage(4), 0.5, 1e-12);   // between the points
  EXPECT_NEAR(stage(16), 1.7, 1e-12);  // beyond: the last segment's line
  EXPECT_NEAR(stage(1), 0.2, 1e-12);   // below: the first segment's line (0.2 > 0.3 / 2)
  c.micro_batch = 8;
  EXPECT_DOUBLE_EQ(model.Evaluate(s, c).forward_share, 0.0);  // no forward split measured: unknown
}

TEST(Planner, ExactOnACycleTwoGpuTypesAndPinnedFanOut) {
  {
    // Undirected cycle a -> b -> c, a -> c: branch and bound.
    const CostModel model({Gpu("g", 3, 4, 40, 300)}, 32);
    Workload w;
    w.sections = {Decoder("a", 1024, 4, false, 0.5, 512), Decoder("b", 768, 4, true, 1, 512),
                  Decoder("c", 2048, 8, true, 1, 1024)};
    w.edges = {Edge(0, 1, 1e6, false), Edge(1, 2, 1e6, true), Edge(0, 2, 1e5, false)};
    CompareWithOracle(model, w, SmallOptions(), "cycle");
  }
  {
    // A frozen teacher pinned to an older GPU type.
    const CostModel model({Gpu("new", 2, 4, 80, 900), Gpu("old", 2, 4, 40, 300)}, 32);
    Workload w;
    w.sections = {Decoder("teacher", 2048, 8, false, 1, 1024, 1), Decoder("student", 1024, 4, true, 1, 1024, 0)};
    w.edges = {Edge(0, 1, 4e6, false)};
    CompareWithOracle(model, w, SmallOptions(), "two types");
    const PlanOutcome p = PlanSections(model, w, SmallOptions());
    ASSERT_TRUE(p.ok());
    EXPECT_LE(p.assignment.nodes_per_device[1], 2);
  }
  {
    const CostModel model({Gpu("g", 3, 4, 40, 300)}, 32);
    Workload w;
    w.sections = {Decoder("enc", 512, 4, true, 0.3, 256), Decoder("llm", 2048, 8, true, 1, 1024)};
    w.edges = {Edge(0, 1, 1e6, true)};
    w.edges[0].fanout = 4;
    CompareWithOracle(model, w, SmallOptions(), "pinned fanout");
    const PlanOutcome p = PlanSections(model, w, SmallOptions());
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p.assignment.sections[1].cost.config.dp, 4 * p.assignment.sections[0].cost.config.dp);
  }
}

TEST(Planner, ReportsNoFitBudgetAndImpossibleFanOut) {
  const CostModel model({Gpu("g", 1, 4, 40, 300)}, 32);
  Workload w;
  w.sections = {Decoder("huge", 16384, 64, true, 1, 4096)};
  PlanOutcome p = PlanSections(model, w, SmallOptions());
  EXPECT_EQ(p.failure.kind, PlanFailure::Kind::kNoConfigFits);
  w.sections = {Decoder("a", 512, 4, true, 1, 512), Decoder("b", 512, 4, true, 1, 512)};
  p = PlanSections(model, w, SmallOptions());
  EXPECT_EQ(p.failure.kind, PlanFailure::Kind::kBudgetTooSmall);
  const CostModel two({Gpu("g", 2, 4, 40, 300)}, 32);
  w.sections[0].pin_dp = 3;  // 3 GPUs: not a divisor of a 4-GPU node
  p = PlanSections(two, w, SmallOptions());
  EXPECT_EQ(p.failure.kind, PlanFailure::Kind::kNoConfigFits);
  w.sections[0].pin_dp = 2;
  w.sections[1].pin_dp = 4;
  w.edges = {Edge(0, 1, 1, true)};
  w.edges[0].fanout = 3;
  p = PlanSections(two, w, SmallOptions());
  EXPECT_EQ(p.failure.kind, PlanFailure::Kind::kFanOutImpossible);
}

TEST(Planner, MonolithicBaselineRunsEverySectionOnAllGpus) {
  const CostModel model({Gpu("g", 2, 8, 80, 900)}, 64);
  Workload w;
  w.sections = {Decoder("teacher", 4096, 16, false, 1, 2048), Decoder("student", 1024, 8, true, 1, 2048)};
  w.edges = {Edge(0, 1, 2048 * 4096 * 2.0, false)};
  const MonolithicPlan m = PlanMonolithic(model, w, 0, PlannerOptions{});
  ASSERT_TRUE(m.found) << m.why_not;
  EXPECT_EQ(m.gpus, 16);
  EXPECT_EQ(m.config.tp * m.config.pp * m.config.cp * m.config.dp, 16);
  EXPECT_NEAR(m.step_seconds, m.sections[0].step_seconds + m.sections[1].step_seconds, 1e-12);
  const PlanOutcome p = PlanSections(model, w, PlannerOptions{});
  ASSERT_TRUE(p.ok());
  EXPECT_GT(p.assignment.throughput, 0);
}

}  // namespace
}  // namespace maestro::compiler
