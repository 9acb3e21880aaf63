// SPDX-License-Identifier: Apache-2.0
// Unit tests of the scheduler: problem validation, FromPlan, the lower bound,
// transfers vs the plan's links, JSON round trip, the simulator on cases
// worked out by hand, deadlock detection, and the trace/SVG outputs.
#include "scheduler/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include "plan/plan.h"
#include "scheduler/simulator.h"
#include "scheduler/synthetic.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::scheduler {
namespace {

// Every micro-batch costs `per_mb` + `per_sample` * samples; backward the
// same; transfers cost `transfer` per sample.
class FlatCosts : public SectionCostModel {
 public:
  FlatCosts(double per_mb, double per_sample, double transfer)
      : per_mb_(per_mb), per_sample_(per_sample), transfer_(transfer) {}
  double ForwardSeconds(int, const std::vector<const Sample*>& s) const override {
    return per_mb_ + per_sample_ * static_cast<double>(s.size());
  }
  double BackwardSeconds(int section, const std::vector<const Sample*>& s) const override {
    return ForwardSeconds(section, s);
  }
  double TransferSeconds(int, const Sample&) const override { return transfer_; }

 private:
  double per_mb_, per_sample_, transfer_;
};

Problem TwoSectionProblem(int n_samples, bool image_every_other) {
  Problem p;
  p.modality_names = {"image"};
  p.sections = {SectionSpec{"vit", true, 0, 1, 2}, SectionSpec{"llm", true, -1, 2, 2}};
  p.edges = {EdgeSpec{0, 1}};
  for (int i = 0; i < n_samples; ++i) {
    Sample s;
    s.id = 1000 + static_cast<uint64_t>(i);
    s.text_tokens = 100;
    if (!image_every_other || i % 2 == 0) {
      s.modalities = 1;
      s.modality_tokens[0] = 64;
    }
    p.samples.push_back(s);
  }
  p.costs = std::make_shared<FlatCosts>(0.0, 1.0, 0.0);
  return p;
}

TEST(SchedulerProblem, RejectsBadInputWithAMessageNamingThePart) {
  Problem p = TwoSectionProblem(4, false);
  p.sections[0].dp = 0;
  Status st = ValidateProblem(p);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("must be >= 1"), std::string::npos) << st.message();

  p = TwoSectionProblem(4, false);
  p.edges.push_back(EdgeSpec{1, 0});
  st = ValidateProblem(p);
  EXPECT_NE(st.message().find("cycle"), std::string::npos) << st.message();

  p = TwoSectionProblem(4, false);
  p.samples[2].id = p.samples[1].id;
  st = ValidateProblem(p);
  EXPECT_NE(st.message().find("appears twice"), std::string::npos) << st.message();

  p = TwoSectionProblem(4, false);
  p.costs.reset();
  EXPECT_FALSE(BuildSchedule(p, {}).ok());

  p = TwoSectionProblem(4, false);
  p.sections[0].micro_batch = 0;
  EXPECT_FALSE(BuildSchedule(p, {}).ok());

  p = TwoSectionProblem(4, false);
  p.costs = std::make_shared<FlatCosts>(0.0, -1.0, 0.0);  // a broken profile
  auto bad = BuildSchedule(p, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("finite and >= 0"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ComputeLowerBound(p).ok());
}

// DP degrees that do not divide one another (plan::EdgeDpRuleHolds): every
// policy's schedule is valid (each sample's replicas are linked:
// IndexSchedule checks it), and the wavefront placement gives every replica
// of both sections its fair share of equal samples: 512 over 43 -> 21
// replicas is 11-12 and 24-25, the fewest the slowest replica can have. (The
// greedy alone once gave a student replica 26.)
TEST(SchedulerPlacement, DpDegreesThatDoNotDivideStayBalancedAndLinked) {
  for (const auto& [a, b, n] :
       std::vector<std::tuple<int, int, int>>{{43, 21, 512}, {2, 3, 64}, {21, 22, 512}, {5, 3, 64}, {13, 7, 100}}) {
    Problem p;
    p.sections = {SectionSpec{"teacher", false, -1, a, 1}, SectionSpec{"student", true, -1, b, 1}};
    p.edges = {EdgeSpec{0, 1}};
    for (int i = 0; i < n; ++i) {
      Sample s;
      s.id = static_cast<uint64_t>(i);
      s.text_tokens = 4096;
      p.samples.push_back(s);
    }
    p.costs = std::make_shared<FlatCosts>(0.0, 1.0, 0.0);
    for (Policy policy : kAllPolicies) {
      ScheduleOptions o;
      o.policy = policy;
      auto sch = BuildSchedule(p, o);
      ASSERT_TRUE(sch.ok()) << PolicyName(policy) << ": " << sch.status().ToString();
      ASSERT_TRUE(IndexSchedule(p, *sch).ok()) << PolicyName(policy) << " " << a << " -> " << b;
      if (policy != Policy::kWavefront) continue;
      for (const RankProgram& r : sch->ranks) {
        size_t samples = 0;
        for (const MicroBatch& mb : r.micro_batches) samples += mb.sample_ids.size();
        const int dp = r.section == 0 ? a : b;
        EXPECT_LE(samples, static_cast<size_t>((n + dp - 1) / dp)) << a << " -> " << b << ", section " << r.section;
        EXPECT_GE(samples, static_cast<size_t>(n / dp)) << a << " -> " << b << ", section " << r.section;
      }
    }
  }
}

TEST(SchedulerProblem, FromPlanMapsSectionsModalitiesAndEdges) {
  plan::Plan pl;
  pl.job_name = "mllm";
  pl.data.modalities = {plan::ModalityDesc{"image", 0.5, 256}};
  plan::SectionPlan vit;
  vit.name = "vit";
  vit.activation = "image";
  vit.mode = plan::SectionMode::kForward;
  vit.config.dp = 2;
  vit.config.micro_batch = 8;
  plan::SectionPlan llm;
  llm.name = "llm";
  llm.config.dp = 4;
  llm.config.micro_batch = 2;
  llm.placement.first_rank = 2;
  llm.placement.het_component = 1;
  pl.sections = {vit, llm};
  pl.edges = {plan::EdgePlan{"vit", "llm", "image_embeddings", 4096, false}};
  auto samples = MakeSyntheticBatch(Problem{{"image"}, {}, {}, {}, nullptr}, SyntheticBatchOptions{64, 0.5, 0.0, 3});
  auto prob = FromPlan(pl, std::make_shared<FlatCosts>(0.1, 0.01, 0.001), samples);
  ASSERT_TRUE(prob.ok()) << prob.status().ToString();
  ASSERT_EQ(prob->sections.size(), 2u);
  EXPECT_EQ(prob->sections[0].modality, 0);
  EXPECT_FALSE(prob->sections[0].trains);
  EXPECT_EQ(prob->sections[0].dp, 2);
  EXPECT_EQ(prob->sections[0].micro_batch, 8);
  EXPECT_EQ(prob->sections[1].modality, -1);
  EXPECT_TRUE(prob->sections[1].trains);
  ASSERT_EQ(prob->edges.size(), 1u);
  EXPECT_EQ(prob->edges[0].from, 0);
  EXPECT_EQ(prob->edges[0].to, 1);

  // Every message of the schedule travels on a link of the plan's fan-out map.
  const Schedule sch = BuildSchedule(*prob, {}).ValueOrDie();
  const auto transfers = ImpliedTransfers(*prob, sch).ValueOrDie();
  std::set<std::pair<int, int>> links;
  for (const plan::Link& l : plan::LinksOfEdge(pl, 0)) links.insert({l.up_dp, l.down_dp});
  size_t carried = 0;
  for (const Transfer& t : transfers) {
    EXPECT_TRUE(links.count({t.up_replica, t.down_replica})) << t.up_replica << "->" << t.down_replica;
    EXPECT_FALSE(t.gradient);  // the vit is frozen
    carried += t.sample_ids.size();
  }
  size_t images = 0;
  for (const Sample& s : samples) images += s.Has(0) ? 1 : 0;
  EXPECT_EQ(carried, images);

  pl.edges[0].to = "nope";
  EXPECT_FALSE(FromPlan(pl, std::make_shared<FlatCosts>(0.1, 0.01, 0.001), samples).ok());
}

TEST(SchedulerProblem, SampleFromTheIndexTokenCounts) {
  const std::vector<std::string> names = {"image", "audio"};
  auto s = SampleFromTokens(7, {{"text", 120}, {"audio", 40}}, names);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->id, 7u);
  EXPECT_EQ(s->text_tokens, 120);
  EXPECT_FALSE(s->Has(0));
  EXPECT_TRUE(s->Has(1));
  EXPECT_EQ(s->modality_tokens[1], 40);
  auto bad = SampleFromTokens(8, {{"video", 3}}, names);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("video"), std::string::npos);
  EXPECT_FALSE(SampleFromTokens(9, {{"text", -1}}, names).ok());
}

TEST(SchedulerJson, RoundTripsEveryPolicy) {
  SyntheticPlanOptions po;
  po.sections = 5;
  po.max_fanout = 3;
  Problem p = MakeSyntheticPlan(po);
  p.samples = MakeSyntheticBatch(p, SyntheticBatchOptions{300, 0.4, 0.3, 9});
  for (Policy policy : kAllPolicies) {
    ScheduleOptions o;
    o.policy = policy;
    o.seed = 42;
    o.step = 7;
    const Schedule a = BuildSchedule(p, o).ValueOrDie();
    const std::string text = ScheduleToJson(a);
    auto b = ScheduleFromJson(text);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_TRUE(a == *b);
    EXPECT_EQ(b->policy, PolicyName(policy));
    EXPECT_EQ(b->seed, 42u);
    EXPECT_EQ(b->step, 7);
    EXPECT_TRUE(IndexSchedule(p, *b).ok());
  }
  EXPECT_FALSE(ScheduleFromJson("{not json").ok());
  EXPECT_FALSE(ScheduleFromJson(R"({"v":2,"policy":"fifo","seed":0,"step":0,"ranks":[]})").ok());
  auto bad =
      ScheduleFromJson(R"({"v":1,"policy":"fifo","seed":0,"step":0,"ranks":[{"s":0,"r":0,"mb":[[1]],"ops":"F0 X1"}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad op"), std::string::npos);
  EXPECT_FALSE(ScheduleFromJson(R"({"v":1,"policy":"fifo","seed":0,"step":0,"ranks":[{"s":"x"}]})").ok());
}

TEST(SchedulerLowerBound, WorkBoundAndChainOnAHandCase) {
  // 4 samples, all with images. vit dp1 mb2: 2 micro-batches of 2 -> forward
  // 2+2, backward 2+2 = 8 s on one replica. llm dp2 mb2: 8 s over 2 = 4 s.
  // One sample alone: vit F 1, llm F 1, llm B 1, vit B 1 = 4 s.
  const Problem p = TwoSectionProblem(4, false);
  const LowerBound lb = ComputeLowerBound(p).ValueOrDie();
  EXPECT_DOUBLE_EQ(lb.section_seconds[0], 8.0);
  EXPECT_DOUBLE_EQ(lb.section_seconds[1], 4.0);
  EXPECT_DOUBLE_EQ(lb.critical_path_seconds, 4.0);
  EXPECT_DOUBLE_EQ(lb.seconds, 8.0);
  EXPECT_EQ(lb.bottleneck_section, 0);
}

TEST(SchedulerSimulator, ForwardOnlyChainMatchesAHandComputation) {
  // a (dp1, mb2) -> b (dp1, mb2), both forward only, 1 s per sample, 0.5 s
  // transfer. 4 samples: a runs [0,2] [2,4]; b's first micro-batch can start
  // at 2.5, runs to 4.5; its second needs a's second (ends 4, +0.5) -> 4.5..6.5.
  Problem p;
  p.sections = {SectionSpec{"a", false, -1, 1, 2}, SectionSpec{"b", false, -1, 1, 2}};
  p.edges = {EdgeSpec{0, 1}};
  for (int i = 0; i < 4; ++i) {
    Sample s;
    s.id = static_cast<uint64_t>(i);
    p.samples.push_back(s);
  }
  p.costs = std::make_shared<FlatCosts>(0.0, 1.0, 0.5);
  ScheduleOptions o;
  o.policy = Policy::kFifo;
  const Schedule sch = BuildSchedule(p, o).ValueOrDie();
  const Simulation sim = Simulate(p, sch).ValueOrDie();
  EXPECT_DOUBLE_EQ(sim.step_seconds, 6.5);
  ASSERT_EQ(sim.ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(sim.ranks[0].busy_seconds, 4.0);
  EXPECT_DOUBLE_EQ(sim.ranks[1].busy_seconds, 4.0);
  EXPECT_EQ(sim.ranks[1].bubbles, 1);  // the wait before its first op
  EXPECT_NEAR(sim.sections[1].utilization, 4.0 / 6.5, 1e-12);
  const nlohmann::json summary = nlohmann::json::parse(sim.SummaryJson());
  EXPECT_DOUBLE_EQ(summary.at("step_seconds").get<double>(), 6.5);
  ASSERT_EQ(summary.at("sections").size(), 2u);
  EXPECT_EQ(summary.at("sections")[1].at("name"), "b");
  EXPECT_NEAR(summary.at("sections")[1].at("utilization").get<double>(), 4.0 / 6.5, 1e-12);
  EXPECT_EQ(summary.at("ranks")[1].at("bubbles").get<int>(), 1);
  // The wavefront gets the same answer here (nothing to reorder).
  EXPECT_DOUBLE_EQ(Simulate(p, BuildSchedule(p, {}).ValueOrDie()).ValueOrDie().step_seconds, 6.5);
}

// Per-section flat costs: section s costs per_sample[s] per sample (forward
// and backward alike), optimizer[s] per step; transfers are free.
class PerSectionCosts : public SectionCostModel {
 public:
  PerSectionCosts(std::vector<double> per_sample, std::vector<double> optimizer)
      : per_sample_(std::move(per_sample)), optimizer_(std::move(optimizer)) {}
  double ForwardSeconds(int section, const std::vector<const Sample*>& s) const override {
    return per_sample_[static_cast<size_t>(section)] * static_cast<double>(s.size());
  }
  double BackwardSeconds(int section, const std::vector<const Sample*>& s) const override {
    return ForwardSeconds(section, s);
  }
  double TransferSeconds(int, const Sample&) const override { return 0.0; }
  double OptimizerSeconds(int section) const override { return optimizer_[static_cast<size_t>(section)]; }

 private:
  std::vector<double> per_sample_, optimizer_;
};

// Two independent forward-only sections (micro-batch 1) that both see the
// two samples: a costs 1 s in all, b 2 s.
Problem TwoIndependentSections() {
  Problem p;
  p.sections = {SectionSpec{"a", false, -1, 1, 1}, SectionSpec{"b", false, -1, 1, 1}};
  for (uint64_t i = 0; i < 2; ++i) {
    Sample s;
    s.id = i;
    p.samples.push_back(s);
  }
  p.costs = std::make_shared<PerSectionCosts>(std::vector<double>{0.5, 1.0}, std::vector<double>{0.0, 0.0});
  return p;
}

TEST(SchedulerSimulator, SharedCoresAreSharedAmongTheProcessesComputing) {
  Problem p = TwoIndependentSections();
  const Schedule sch = BuildSchedule(p, {}).ValueOrDie();
  // One device each (the default): a ends at 1, b at 2.
  Simulation alone = Simulate(p, sch).ValueOrDie();
  EXPECT_DOUBLE_EQ(alone.step_seconds, 2.0);
  // Two cores for two processes: nothing changes.
  p.shared_cores = 2;
  EXPECT_DOUBLE_EQ(Simulate(p, sch).ValueOrDie().step_seconds, 2.0);
  // One core: both run at half speed until a ends (1 s of work -> t = 2),
  // then b has 1 s left alone: 3 s, the total work on one core.
  p.shared_cores = 1;
  Simulation shared = Simulate(p, sch).ValueOrDie();
  EXPECT_NEAR(shared.step_seconds, 3.0, 1e-12);
  double a_ends = 0.0;
  for (const OpInterval& op : shared.ops) a_ends = op.rank == 0 ? std::max(a_ends, op.end) : a_ends;
  EXPECT_NEAR(a_ends, 2.0, 1e-12);
  EXPECT_NEAR(shared.ranks[1].busy_seconds, 3.0, 1e-12);  // wall time, slowed down
  // b's replica has two processes (TP 2) on two cores: demand 3 > 2, every
  // process runs at 2/3: a ends at 1.5; b then has 2 - 1 = 1 s left alone
  // on its two cores: 2.5 s.
  p.shared_cores = 2;
  p.sections[1].processes = 2;
  EXPECT_NEAR(Simulate(p, sch).ValueOrDie().step_seconds, 2.5, 1e-12);
  // A negative core count is refused.
  p.shared_cores = -1;
  EXPECT_FALSE(ValidateProblem(p).ok());
}

// KD: a frozen teacher (forward only, `teacher_per_sample` s per sample)
// feeds a trained student (`student_per_sample` s per sample forward and
// backward), micro-batch `mb`, `n` samples, optimizer 0.5 s.
Problem KdProblem(int n, int mb, double teacher_per_sample, double student_per_sample, int run_ahead) {
  Problem p;
  p.sections = {SectionSpec{"teacher", false, -1, 1, mb}, SectionSpec{"student", true, -1, 1, mb}};
  p.sections[0].run_ahead = run_ahead;
  p.edges = {EdgeSpec{0, 1}};
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.id = static_cast<uint64_t>(i);
    p.samples.push_back(s);
  }
  p.costs = std::make_shared<PerSectionCosts>(std::vector<double>{teacher_per_sample, student_per_sample},
                                              std::vector<double>{0.0, 0.5});
  return p;
}

TEST(SchedulerSimulator, RunAheadRemovesTheTeachersFillFromAKdStep) {
  // 4 samples, micro-batch up to 2; teacher 1 s per sample, student 1 s
  // forward and 1 s backward per sample. Without run-ahead the student waits
  // for the teacher's first micro-batch (the wavefront makes it one sample:
  // 1 s of fill), then 8 s of its own ops and the optimizer: 1 + 8 + 0.5 =
  // 9.5 s. With the teacher one batch ahead its rows are ready at 0: 8.5 s,
  // and the teacher's 4 s of compute (the next batch's rows) hide under it.
  const Problem off = KdProblem(4, 2, 1.0, 1.0, 0);
  const Problem on = KdProblem(4, 2, 1.0, 1.0, 1);
  const Schedule sch = BuildSchedule(off, {}).ValueOrDie();
  const Simulation without = Simulate(off, sch).ValueOrDie();
  const Simulation with = Simulate(on, sch).ValueOrDie();
  EXPECT_DOUBLE_EQ(without.step_seconds, 9.5);
  EXPECT_DOUBLE_EQ(with.step_seconds, 8.5);
  EXPECT_DOUBLE_EQ(with.ranks[0].busy_seconds, 4.0);  // the teacher still computes every row
  // A teacher slower than the student bounds the step by its own work.
  const Problem slow = KdProblem(4, 2, 3.0, 1.0, 1);
  EXPECT_DOUBLE_EQ(Simulate(slow, BuildSchedule(slow, {}).ValueOrDie()).ValueOrDie().step_seconds, 12.0);
  // A training section may not run ahead.
  Problem bad = KdProblem(4, 2, 1.0, 1.0, 0);
  bad.sections[1].run_ahead = 1;
  EXPECT_FALSE(ValidateProblem(bad).ok());
}

TEST(SchedulerSimulator, RunAheadNeverLengthensAKdStep) {
  // Over teacher / student speed ratios, micro-batch sizes, batch sizes,
  // transfers and DP fan-outs, with and without shared cores: run-ahead
  // shortens the step or leaves it as it is, and the step is never below the
  // teacher's own work (it still computes every row).
  int shorter = 0, cases = 0;
  for (double teacher : {0.2, 1.0, 3.0}) {
    for (int mb : {1, 2, 4}) {
      for (int n : {4, 12}) {
        for (int student_dp : {1, 2}) {
          Problem off = KdProblem(n, mb, teacher, 1.0, 0);
          off.sections[1].dp = student_dp;
          off.costs = std::make_shared<FlatCosts>(0.0, teacher, 0.1);
          Problem on = off;
          on.sections[0].run_ahead = 2;
          const Schedule sch = BuildSchedule(off, {}).ValueOrDie();
          const double before = Simulate(off, sch).ValueOrDie().step_seconds;
          const Simulation after = Simulate(on, sch).ValueOrDie();
          EXPECT_LE(after.step_seconds, before + 1e-12) << teacher << " " << mb << " " << n << " " << student_dp;
          EXPECT_GE(after.step_seconds, after.ranks[0].busy_seconds - 1e-12);
          shorter += after.step_seconds < before - 1e-9 ? 1 : 0;
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(shorter, cases);  // the teacher's first micro-batch (and its transfer) is always a fill
}

TEST(SchedulerSimulator, DpReplicasStartTheirOptimizerStepTogether) {
  // One training section with two replicas: replica 0 gets 3 samples,
  // replica 1 one (1 s per sample, forward and backward); the optimizer
  // step costs 0.5 s. The gradient all-reduce makes replica 1 wait for
  // replica 0's backward (ends at 6): both optimizer steps run 6..6.5.
  Problem p;
  p.sections = {SectionSpec{"llm", true, -1, 2, 4}};
  for (uint64_t i = 0; i < 4; ++i) {
    Sample s;
    s.id = i;
    p.samples.push_back(s);
  }
  p.costs = std::make_shared<PerSectionCosts>(std::vector<double>{1.0}, std::vector<double>{0.5});
  Schedule s;
  s.policy = "hand";
  s.ranks = {
      RankProgram{
          0, 0, {MicroBatch{{0, 1, 2}}}, {{OpKind::kForward, 0}, {OpKind::kBackward, 0}, {OpKind::kOptimizer, -1}}},
      RankProgram{0, 1, {MicroBatch{{3}}}, {{OpKind::kForward, 0}, {OpKind::kBackward, 0}, {OpKind::kOptimizer, -1}}}};
  const Simulation sim = Simulate(p, s).ValueOrDie();
  EXPECT_DOUBLE_EQ(sim.step_seconds, 6.5);
  for (const OpInterval& op : sim.ops) {
    if (op.kind == OpKind::kOptimizer) {
      EXPECT_DOUBLE_EQ(op.start, 6.0) << "replica " << op.rank;
    }
  }
  EXPECT_EQ(sim.ranks[1].bubbles, 1);  // the wait for the all-reduce
  // The same under shared cores (1 core for 2 processes): F/B of replica 1
  // (2 s of work) and replica 0 (6 s) share one core: replica 1's ops end at
  // 4; replica 0 has 4 s left alone: 8; then both optimizer steps (0.5 s
  // each) share the core: 9.
  p.shared_cores = 1;
  const Simulation shared = Simulate(p, s).ValueOrDie();
  EXPECT_NEAR(shared.step_seconds, 9.0, 1e-12);
}

TEST(SchedulerSimulator, DetectsADeadlockingOrder) {
  // vit (dp1, mb2) trains; llm (dp2, mb2). Put vit's B0 before F1 while an
  // llm micro-batch mixes samples of vit's micro-batches 0 and 1: vit's B0
  // waits for llm's backward, which waits for vit's F1 -> deadlock.
  const Problem p = TwoSectionProblem(4, false);
  Schedule s;
  s.policy = "hand";
  RankProgram vit{0, 0, {MicroBatch{{1000, 1001}}, MicroBatch{{1002, 1003}}}, {}};
  vit.ops = {{OpKind::kForward, 0},
             {OpKind::kBackward, 0},
             {OpKind::kForward, 1},
             {OpKind::kBackward, 1},
             {OpKind::kOptimizer, -1}};
  RankProgram llm0{
      1, 0, {MicroBatch{{1000, 1002}}}, {{OpKind::kForward, 0}, {OpKind::kBackward, 0}, {OpKind::kOptimizer, -1}}};
  RankProgram llm1{
      1, 1, {MicroBatch{{1001, 1003}}}, {{OpKind::kForward, 0}, {OpKind::kBackward, 0}, {OpKind::kOptimizer, -1}}};
  s.ranks = {vit, llm0, llm1};
  auto sim = Simulate(p, s);
  ASSERT_FALSE(sim.ok());
  EXPECT_NE(sim.status().message().find("deadlock"), std::string::npos) << sim.status().message();
  // The same micro-batches with all forwards first run fine.
  s.ranks[0].ops = {{OpKind::kForward, 0},
                    {OpKind::kForward, 1},
                    {OpKind::kBackward, 0},
                    {OpKind::kBackward, 1},
                    {OpKind::kOptimizer, -1}};
  EXPECT_TRUE(Simulate(p, s).ok());
  // A sample missing from the schedule is caught before simulating.
  s.ranks[1].micro_batches[0].sample_ids = {1000};
  auto missing = Simulate(p, s);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("never processed"), std::string::npos) << missing.status().message();
}

TEST(SchedulerSimulator, WritesAChromeTraceAndAGanttSvg) {
  SyntheticPlanOptions po;
  po.sections = 3;
  Problem p = MakeSyntheticPlan(po);
  p.samples = MakeSyntheticBatch(p, SyntheticBatchOptions{40, 0.5, 0.0, 2});
  const Schedule sch = BuildSchedule(p, {}).ValueOrDie();
  const Simulation sim = Simulate(p, sch).ValueOrDie();
  const std::filesystem::path dir = std::filesystem::path(MAESTRO_TEST_TMP) / "scheduler";
  std::filesystem::create_directories(dir);
  ASSERT_TRUE(sim.WriteChromeTrace((dir / "trace.json").string()).ok());
  ASSERT_TRUE(sim.WriteGanttSvg((dir / "gantt.svg").string(), "test <&> title").ok());
  std::ifstream tf(dir / "trace.json");
  const nlohmann::json trace = nlohmann::json::parse(tf);
  size_t complete = 0;
  std::set<int> pids;
  for (const auto& ev : trace.at("traceEvents")) {
    if (ev.at("ph") == "X") {
      ++complete;
      pids.insert(ev.at("pid").get<int>());
      EXPECT_GE(ev.at("dur").get<double>(), 0.0);
    }
  }
  EXPECT_EQ(complete, sim.ops.size());
  EXPECT_EQ(pids.size(), p.sections.size());
  std::ifstream sf(dir / "gantt.svg");
  std::stringstream svg;
  svg << sf.rdbuf();
  const std::string text = svg.str();
  EXPECT_EQ(text.rfind("<svg", 0), 0u);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  EXPECT_NE(text.find("test &lt;&amp;&gt; title"), std::string::npos);  // escaped
  for (const SectionSpec& s : p.sections) EXPECT_NE(text.find(">" + s.name + "<"), std::string::npos) << s.name;
  size_t rects = 0;
  for (size_t at = text.find("<rect"); at != std::string::npos; at = text.find("<rect", at + 1)) ++rects;
  EXPECT_GE(rects, sim.ops.size());
  EXPECT_FALSE(sim.WriteGanttSvg("/nonexistent-dir/x.svg").ok());
}

TEST(SchedulerEdgeCases, EmptyBatchAndSamplesThatActivateNothing) {
  Problem p = TwoSectionProblem(0, false);
  for (Policy policy : kAllPolicies) {
    ScheduleOptions o;
    o.policy = policy;
    auto sch = BuildSchedule(p, o);
    ASSERT_TRUE(sch.ok());
    auto sim = Simulate(p, *sch);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  }
  // Only a modality section: samples without the modality run nowhere.
  Problem q;
  q.modality_names = {"image"};
  q.sections = {SectionSpec{"vit", true, 0, 2, 2}};
  for (int i = 0; i < 6; ++i) {
    Sample s;
    s.id = static_cast<uint64_t>(i);
    if (i < 3) {
      s.modalities = 1;
      s.modality_tokens[0] = 10;
    }
    q.samples.push_back(s);
  }
  q.costs = std::make_shared<FlatCosts>(0.0, 1.0, 0.0);
  const Schedule sch = BuildSchedule(q, {}).ValueOrDie();
  size_t total = 0;
  for (const RankProgram& r : sch.ranks)
    for (const MicroBatch& mb : r.micro_batches) total += mb.sample_ids.size();
  EXPECT_EQ(total, 3u);
  EXPECT_TRUE(Simulate(q, sch).ok());
}

TEST(SchedulerPolicy, NamesRoundTrip) {
  for (Policy policy : kAllPolicies) {
    EXPECT_EQ(PolicyFromName(PolicyName(policy)).ValueOrDie(), policy);
  }
  EXPECT_FALSE(PolicyFromName("lifo").ok());
}

TEST(SchedulerPolicy, FifoStridedDealsSamplesLikeDistributedSampler) {
  // One section, dp 3, micro-batch 2, 10 samples in data order: replica r gets
  // indices r, r+3, r+6, ... (indices[rank::world]) and cuts them into
  // contiguous micro-batches in that order; Megatron's round-robin (fifo)
  // deals whole micro-batches instead.
  Problem p;
  p.sections = {SectionSpec{"llm", true, -1, 3, 2}};
  for (int i = 0; i < 10; ++i) {
    Sample s;
    s.id = 100 + static_cast<uint64_t>(i);
    p.samples.push_back(s);
  }
  p.costs = std::make_shared<FlatCosts>(0.0, 1.0, 0.0);
  ScheduleOptions o;
  o.policy = Policy::kFifoStrided;
  const Schedule sch = BuildSchedule(p, o).ValueOrDie();
  ASSERT_EQ(sch.ranks.size(), 3u);
  EXPECT_EQ(sch.policy, "fifo-strided");
  const std::vector<std::vector<std::vector<uint64_t>>> want = {
      {{100, 103}, {106, 109}}, {{101, 104}, {107}}, {{102, 105}, {108}}};
  for (size_t r = 0; r < 3; ++r) {
    ASSERT_EQ(sch.ranks[r].micro_batches.size(), want[r].size()) << "replica " << r;
    for (size_t b = 0; b < want[r].size(); ++b) {
      EXPECT_EQ(sch.ranks[r].micro_batches[b].sample_ids, want[r][b]) << "replica " << r << " micro-batch " << b;
    }
  }
  o.policy = Policy::kFifo;
  const Schedule rr = BuildSchedule(p, o).ValueOrDie();
  EXPECT_EQ(rr.ranks[0].micro_batches[0].sample_ids, (std::vector<uint64_t>{100, 101}));
  EXPECT_EQ(rr.ranks[1].micro_batches[0].sample_ids, (std::vector<uint64_t>{102, 103}));
}

TEST(SchedulerSynthetic, UniformLengthsKeepTheSamplesAndSetEveryLengthToTheMean) {
  SyntheticPlanOptions po;
  po.sections = 4;  // an image and an audio branch
  const Problem plan = MakeSyntheticPlan(po);
  SyntheticBatchOptions bo;
  bo.samples = 500;
  bo.image_ratio = 0.5;
  bo.seed = 5;
  const std::vector<Sample> real = MakeSyntheticBatch(plan, bo);
  bo.uniform_lengths = true;
  const std::vector<Sample> flat = MakeSyntheticBatch(plan, bo);
  ASSERT_EQ(real.size(), flat.size());
  std::set<int64_t> text_lengths, image_lengths;
  for (size_t i = 0; i < real.size(); ++i) {
    EXPECT_EQ(real[i].id, flat[i].id);
    EXPECT_EQ(real[i].modalities, flat[i].modalities) << "sample " << i;
    EXPECT_EQ(flat[i].text_tokens, 844);
    if (flat[i].Has(0)) {
      EXPECT_EQ(flat[i].modality_tokens[0], 625);
    }
    if (flat[i].Has(1)) {
      EXPECT_EQ(flat[i].modality_tokens[1], 500);
    }
    text_lengths.insert(real[i].text_tokens);
    if (real[i].Has(0)) image_lengths.insert(real[i].modality_tokens[0]);
  }
  // The realistic batch does vary (long-tailed text, dynamic-resolution images).
  EXPECT_GT(text_lengths.size(), 100u);
  EXPECT_GT(image_lengths.size(), 50u);
}

TEST(SchedulerSynthetic, SeveralImagesPerSampleAddTheirTokens) {
  SyntheticPlanOptions po;
  po.sections = 3;
  const Problem plan = MakeSyntheticPlan(po);
  SyntheticBatchOptions bo;
  bo.samples = 2000;
  bo.image_ratio = 1.0;
  bo.seed = 9;
  int64_t max_one = 0, max_multi = 0;
  double sum_one = 0, sum_multi = 0;
  for (const Sample& s : MakeSyntheticBatch(plan, bo)) {
    ASSERT_TRUE(s.Has(0));
    EXPECT_GE(s.modality_tokens[0], 64);
    max_one = std::max(max_one, s.modality_tokens[0]);
    sum_one += static_cast<double>(s.modality_tokens[0]);
  }
  bo.max_images = 4;
  for (const Sample& s : MakeSyntheticBatch(plan, bo)) {
    ASSERT_TRUE(s.Has(0));
    EXPECT_GE(s.modality_tokens[0], 64);
    EXPECT_LE(s.modality_tokens[0], 4 * 2304);
    max_multi = std::max(max_multi, s.modality_tokens[0]);
    sum_multi += static_cast<double>(s.modality_tokens[0]);
  }
  EXPECT_LE(max_one, 2304);
  EXPECT_GT(max_multi, 2304);
  // E[images] = 1 + 1/2 + 1/4 + 1/8 = 1.875 with max_images 4.
  EXPECT_NEAR(sum_multi / sum_one, 1.875, 0.15);
}

}  // namespace
}  // namespace maestro::scheduler
