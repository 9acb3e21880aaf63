// SPDX-License-Identifier: Apache-2.0
// Step prediction by simulation: sampled batches, the compiler's cost model
// behind the scheduler's interface (agrees with the analytic model where no
// cross-section effect exists), the monolithic baseline's DP stragglers, and
// the refinement of a plan by simulated step time (a local search: never
// slower, a local optimum of its move set, the pinned counterexample).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "compiler/compile.h"
#include "compiler/model.h"
#include "compiler/step_simulation.h"
#include "tests/fixtures/test_paths.h"
#include "tests/fixtures/workloads.h"

namespace maestro::compiler {
namespace {

const std::string kSpecs = std::string(MAESTRO_SOURCE_DIR) + "/specs/";

DeviceType Gpu() {
  return fixtures::H100Like(4);
}

SectionWork Decoder(const std::string& name, double fraction, const std::string& activation) {
  return fixtures::DecoderWork(name, {2048, 16, 16, 16, 8192, 32000}, true, 2048, fraction, activation);
}

TEST(SampleGlobalBatch, IsDeterministicAndDrawsTheModalityShare) {
  SimulationSettings s;
  s.seed = 3;
  s.seq_len = 128;
  s.modalities = {{"image", 0.25, 64}};
  const std::vector<std::string> names = {"image"};
  const auto a = SampleGlobalBatch(20000, s, 0, names);
  const auto b = SampleGlobalBatch(20000, s, 0, names);
  const auto c = SampleGlobalBatch(20000, s, 1, names);
  ASSERT_EQ(a.size(), 20000u);
  int images = 0, same = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].modalities, b[i].modalities);
    EXPECT_EQ(a[i].text_tokens, 128);
    if (a[i].Has(0)) {
      ++images;
      EXPECT_EQ(a[i].modality_tokens[0], 64);
    }
    same += a[i].modalities == c[i].modalities ? 1 : 0;
  }
  EXPECT_NEAR(images / 20000.0, 0.25, 0.02);
  EXPECT_LT(same, 19000);  // another batch is another draw
}

TEST(Simulation, OneSectionAgreesWithTheCostModel) {
  const CostModel model({Gpu()}, 64);
  Workload w;
  w.sections = {Decoder("llm", 1.0, "always")};
  for (const plan::ParallelConfig& c :
       {plan::ParallelConfig{1, 1, 1, 1, 8, 2, false, 1}, plan::ParallelConfig{2, 2, 1, 1, 4, 4, false, 1}}) {
    Assignment a;
    a.sections.push_back({model.Evaluate(w.sections[0], c), ""});
    Summarize(model, w, a);
    SimulationSettings s;
    s.seq_len = 2048;
    const SimulatedStep sim = SimulateSectioned(model, w, a, s);
    ASSERT_TRUE(sim.ok) << sim.error;
    EXPECT_NEAR(sim.step_seconds, a.sections[0].cost.step_seconds, 1e-6 * a.sections[0].cost.step_seconds)
        << "tp " << c.tp << " pp " << c.pp;
    ASSERT_EQ(sim.sections.size(), 1u);
    EXPECT_EQ(sim.sections[0].replicas, c.dp);
  }
}

TEST(Simulation, TheMonolithicBaselineWaitsForTheReplicaWithTheMostImages) {
  // A heavy image encoder that only some samples activate: FIFO deals the data
  // order round-robin, so the DP replicas draw different image counts.
  DeviceType d = Gpu();
  const CostModel model({d}, 256);
  Workload w;
  SectionWork enc = Decoder("encoder", 0.3, "image");
  enc.model.kind = plan::ModelKind::kVit;
  enc.model.image_size = 448;
  enc.model.patch_size = 14;
  enc.model.channels = 3;
  enc.facts = ComputeModelFacts(enc.model, enc.tokens);
  w.sections = {enc, Decoder("llm", 1.0, "always")};
  PlannerOptions o;
  const MonolithicPlan m = PlanMonolithic(model, w, 0, o);
  ASSERT_TRUE(m.found) << m.why_not;
  SimulationSettings s;
  s.seq_len = 2048;
  s.modalities = {{"image", 0.3, 1024}};
  s.batches = 4;
  const SimulatedStep sim = SimulateMonolithic(model, w, m, 0, s);
  ASSERT_TRUE(sim.ok) << sim.error;
  // The step if every replica had drawn exactly the mean share of images.
  const double per_replica = 256.0 / m.config.dp;
  const double mbs = std::ceil(per_replica / m.config.micro_batch);
  double even = 0;
  for (size_t i = 0; i < w.sections.size(); ++i) {
    SectionWork x = w.sections[i];
    const double samples = per_replica * x.active_fraction / mbs;
    even += model.EvaluateWith(x, m.sections[i].config, mbs, samples).step_seconds;
  }
  EXPECT_GT(sim.max_step_seconds, even * 1.001);
  // ... but only the samples that carry an image run the encoder.
  double all_images = 0;
  for (size_t i = 0; i < w.sections.size(); ++i) {
    all_images += model.EvaluateWith(w.sections[i], m.sections[i].config, mbs, per_replica / mbs).step_seconds;
  }
  EXPECT_LT(sim.max_step_seconds, all_images);
}

TEST(Refinement, NeverSlowerKeepsNodesPinsAndFanOutRules) {
  for (const char* name : {"kd_72b_to_7b.toml", "tiny_vlm.toml", "omni_audio_vision_llm.toml"}) {
    auto spec = ParseSpecFile(kSpecs + name);
    ASSERT_TRUE(spec.ok()) << spec.status().message();
    auto [work, model, s] = fixtures::PlanningInputsOf(*spec);
    ASSERT_TRUE(work.ok());
    // A GPU runtime with what these specs need to fit an H100 (CP,
    // recomputation, ZeRO-1), whatever this build's runtime_support.h says.
    PlannerOptions o;
    o.support = *ParseRuntimeSupport("dp,micro_batch,tp_decoder,pp_decoder,cp,recompute,zero1");
    const PlanOutcome planned = PlanSections(model, *work, o);
    ASSERT_TRUE(planned.ok()) << planned.failure.message;
    std::string log;
    const Assignment refined = RefineBySimulation(model, *work, planned.assignment, o, s, &log);
    const SimulatedStep before = SimulateSectioned(model, *work, planned.assignment, s);
    const SimulatedStep after = SimulateSectioned(model, *work, refined, s);
    ASSERT_TRUE(before.ok && after.ok) << before.error << after.error;
    EXPECT_LE(after.step_seconds, before.step_seconds * 1.02) << name;  // searched on 2 batches, judged on 4
    // Single moves keep each section's nodes; a trade moves replicas between
    // sections on one GPU type and keeps within its budget.
    std::vector<int> units(model.devices().size(), 0);
    for (size_t i = 0; i < refined.sections.size(); ++i) {
      const auto& c = refined.sections[i].cost;
      if (log.find("section '" + work->sections[i].name + "': DP ") == std::string::npos) {
        EXPECT_EQ(c.nodes, planned.assignment.sections[i].cost.nodes) << name << "\n" << log;
      }
      units[static_cast<size_t>(work->sections[i].device)] += c.nodes;
      EXPECT_TRUE(c.fits) << name;
      EXPECT_EQ(refined.sections[i].planner_only, "") << name;
    }
    for (size_t d = 0; d < units.size(); ++d) EXPECT_LE(units[d], model.devices()[d].budget_units()) << name;
    for (const auto& e : work->edges) {
      const int a = refined.sections[static_cast<size_t>(e.from)].cost.config.dp;
      const int b = refined.sections[static_cast<size_t>(e.to)].cost.config.dp;
      EXPECT_TRUE(EdgeDpsAllowed(a, b, e.fanout, e.fanin, o)) << name;
    }
    std::vector<int> dps;
    for (const auto& section : refined.sections) dps.push_back(section.cost.config.dp);
    EXPECT_LE(DpSlots(dps), kMostDpSlots) << name;
    // A micro-batch/DP change is kept only when it shortens the step; filling
    // an idle node only when it does not lengthen it.
    bool shortened = false;
    for (size_t at = log.find("simulated step"); at != std::string::npos; at = log.find("simulated step", at + 1)) {
      const size_t line = log.rfind('\n', at);
      shortened =
          shortened || log.substr(line == std::string::npos ? 0 : line, at - line).find("idle") == std::string::npos;
    }
    if (shortened) {
      EXPECT_LT(after.step_seconds, before.step_seconds) << name << "\n" << log;
    }
  }
}

TEST(Refinement, SmallerTeacherMicroBatchesLetTheStudentStartEarlier) {
  // A large teacher micro-batch: with ~10 samples per teacher replica that is
  // one micro-batch the student waits for. The simulation sees the fill and
  // shrinks it (the planner's own choice may already be small: the test
  // starts from a large one).
  auto spec = ParseSpecFile(kSpecs + "kd_72b_to_7b.toml");
  ASSERT_TRUE(spec.ok());
  [[maybe_unused]] auto [work, model, settings] = fixtures::PlanningInputsOf(*spec);
  ASSERT_TRUE(work.ok());
  PlannerOptions o;
  o.support = *ParseRuntimeSupport("dp,micro_batch,tp_decoder,pp_decoder,cp,recompute,zero1");
  // Nested DP degrees: the teacher at 8 replicas of 10 GPUs (32 samples
  // each) has room for a much larger micro-batch. (With any degrees the
  // planner gives it 20 replicas of TP 2 PP 2.)
  o.nested_dp_edges = true;
  const PlanOutcome planned = PlanSections(model, *work, o);
  ASSERT_TRUE(planned.ok()) << planned.failure.message;
  Assignment large = planned.assignment;
  const int teacher = spec->section_index("teacher");
  ASSERT_GE(teacher, 0);
  SectionChoice& t = large.sections[static_cast<size_t>(teacher)];
  plan::ParallelConfig c = t.cost.config;
  const int per_replica = static_cast<int>(std::ceil(double(spec->data.global_batch) / c.dp));
  const int planned_mb = c.micro_batch;
  // The largest power of two up to one micro-batch per replica that fits.
  int top = 1;
  while (2 * top <= per_replica) top *= 2;
  for (int mb = top; mb > planned_mb; mb /= 2) {
    c.micro_batch = mb;
    t.cost = model.Evaluate(work->sections[static_cast<size_t>(teacher)], c);
    if (t.cost.fits) break;
  }
  ASSERT_TRUE(t.cost.fits);
  ASSERT_GE(c.micro_batch, 4 * planned_mb) << "the test needs a much larger teacher micro-batch than planned";
  SimulationSettings s;
  s.seq_len = spec->data.seq_len;
  s.seed = spec->data.seed;
  std::string log;
  const Assignment refined = RefineBySimulation(model, *work, large, o, s, &log);
  EXPECT_NE(log.find("teacher"), std::string::npos) << log;
  EXPECT_LT(refined.sections[static_cast<size_t>(teacher)].cost.config.micro_batch, c.micro_batch) << log;
  const SimulatedStep before = SimulateSectioned(model, *work, large, s);
  const SimulatedStep after = SimulateSectioned(model, *work, refined, s);
  ASSERT_TRUE(before.ok && after.ok) << before.error << after.error;
  EXPECT_LT(after.step_seconds, before.step_seconds) << log;
}

// The realistic specs' target runtime (docs/step_model.md).
constexpr const char* kGpuRuntime = "dp,micro_batch,tp_decoder,pp_decoder,cp,recompute,zero1";

// Issue #16's counterexample: on KD 32B -> 1.5B, pinning the teacher's
// micro-batch to 1 made a plan 13% faster than the planner's choice. The
// refined plan is at least as fast as the pinned one (both simulated on the
// same 4 batches, which the search also compares on at 512 samples).
TEST(Refinement, IsAtLeastAsFastAsPinningTheTeacherMicroBatchOnKd32To1_5) {
  auto spec = ParseSpecFile(kSpecs + "kd_32b_to_1_5b.toml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  CompileOptions options;
  options.support = *ParseRuntimeSupport(kGpuRuntime);
  options.support_given = true;
  options.grouping = Grouping::kSectioned;
  auto planned = Compile(*spec, options);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  options.pins.push_back(*ParsePin("teacher.micro_batch=1"));
  auto pinned = Compile(*spec, options);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  ASSERT_TRUE(planned->simulated.ok && pinned->simulated.ok) << planned->simulated.error << pinned->simulated.error;
  EXPECT_LE(planned->simulated.step_seconds, pinned->simulated.step_seconds)
      << "planned:\n"
      << planned->report << planned->refinement_log << "\npinned:\n"
      << pinned->report;
}

// After the refinement no single move of its move set (recomputed here
// through NeighbourAssignments and simulated as the search does) shortens
// the simulated step by more than the tolerance, the moves are single and
// feasible, and the search is deterministic.
TEST(Refinement, EndsAtALocalOptimumOfItsMoveSet) {
  std::set<RefinementMove> kinds;
  int neighbours = 0;
  for (const char* name : {"kd_32b_to_1_5b.toml", "omni_audio_vision_llm.toml", "tiny_vlm3.toml"}) {
    auto spec = ParseSpecFile(kSpecs + name);
    ASSERT_TRUE(spec.ok()) << spec.status().message();
    auto [work, model, s] = fixtures::PlanningInputsOf(*spec);
    ASSERT_TRUE(work.ok());
    PlannerOptions o;
    o.support = *ParseRuntimeSupport(kGpuRuntime);
    const PlanOutcome planned = PlanSections(model, *work, o);
    ASSERT_TRUE(planned.ok()) << planned.failure.message;
    std::string log;
    RefinementStats stats;
    const Assignment refined = RefineBySimulation(model, *work, planned.assignment, o, s, &log, &stats);
    ASSERT_TRUE(stats.converged) << name << ": the cap ended the search after " << stats.simulations << " simulations\n"
                                 << log;
    const SimulationSettings search = RefinementSearchSettings(s, spec->data.global_batch);
    const SimulatedStep at = SimulateSectioned(model, *work, refined, search);
    ASSERT_TRUE(at.ok) << at.error;
    for (size_t i = 0; i < refined.sections.size(); ++i) {
      const plan::ParallelConfig& now = refined.sections[i].cost.config;
      for (const RefinementNeighbour& n : NeighbourAssignments(model, *work, refined, i, o)) {
        ++neighbours;
        kinds.insert(n.move);
        const SectionCost& c = n.assignment.sections[i].cost;
        EXPECT_TRUE(c.fits) << name;
        EXPECT_EQ(c.nodes, refined.sections[i].cost.nodes) << name;
        // One of TP, PP, CP and recomputation at most; DP and micro-batch along.
        const int changed = (c.config.tp != now.tp) + (c.config.pp != now.pp) + (c.config.cp != now.cp) +
                            (c.config.recompute_granularity() != now.recompute_granularity());
        EXPECT_LE(changed, 1) << name << " " << RefinementMoveName(n.move);
        if (n.move == RefinementMove::kDp) {
          EXPECT_EQ(c.config.micro_batch, now.micro_batch) << name;
        }
        for (size_t j = 0; j < refined.sections.size(); ++j) {
          if (j == i) continue;
          EXPECT_EQ(n.assignment.sections[j].cost.config.dp, refined.sections[j].cost.config.dp) << name;
        }
        for (const auto& e : work->edges) {
          EXPECT_TRUE(plan::EdgeDpRuleHolds(n.assignment.sections[static_cast<size_t>(e.from)].cost.config.dp,
                                            n.assignment.sections[static_cast<size_t>(e.to)].cost.config.dp, e.fanout,
                                            e.fanin))
              << name;
        }
        const SimulatedStep sim = SimulateSectioned(model, *work, n.assignment, search);
        if (!sim.ok) continue;
        bool links = true;
        for (double t : n.assignment.edge_seconds) links = links && t <= sim.step_seconds;
        if (!links) continue;
        EXPECT_GE(sim.step_seconds, at.step_seconds * (1 - kRefinementTolerance))
            << name << ": section '" << work->sections[i].name << "' " << RefinementMoveName(n.move) << " move to TP "
            << c.config.tp << " PP " << c.config.pp << " CP " << c.config.cp << " DP " << c.config.dp << " micro-batch "
            << c.config.micro_batch << (c.config.recompute ? " rc" : "") << "\n"
            << log;
      }
    }
    // Same spec, same plan, the same moves and simulations counted, whatever
    // the threads that simulate a section's neighbours ahead (one: in order).
    for (const int threads : {1, 3}) {
      SimulationSettings t = s;
      t.threads = threads;
      std::string again_log;
      RefinementStats again_stats;
      const Assignment again = RefineBySimulation(model, *work, planned.assignment, o, t, &again_log, &again_stats);
      EXPECT_EQ(again_log, log) << name << " on " << threads << " thread(s)";
      EXPECT_EQ(again_stats.simulations, stats.simulations) << name << " on " << threads << " thread(s)";
      for (size_t i = 0; i < refined.sections.size(); ++i) {
        const plan::ParallelConfig& x = refined.sections[i].cost.config;
        const plan::ParallelConfig& y = again.sections[i].cost.config;
        EXPECT_TRUE(x.tp == y.tp && x.pp == y.pp && x.cp == y.cp && x.dp == y.dp && x.micro_batch == y.micro_batch &&
                    x.recompute_granularity() == y.recompute_granularity())
            << name << " on " << threads << " thread(s)";
      }
    }
  }
  // The property is not vacuous: the specs offer many moves of most kinds.
  EXPECT_GE(neighbours, 20);
  for (RefinementMove m :
       {RefinementMove::kMicroBatch, RefinementMove::kTp, RefinementMove::kCp, RefinementMove::kRecompute}) {
    EXPECT_EQ(kinds.count(m), 1u) << RefinementMoveName(m);
  }
}

// The micro-batch moves reach every size of PlannerOptions::micro_batches
// that fits, not only the halved and doubled one.
TEST(Refinement, MicroBatchMovesReachEveryCandidateSize) {
  auto spec = ParseSpecFile(kSpecs + "kd_32b_to_1_5b.toml");
  ASSERT_TRUE(spec.ok());
  [[maybe_unused]] auto [work, model, settings] = fixtures::PlanningInputsOf(*spec);
  ASSERT_TRUE(work.ok());
  PlannerOptions o;
  o.support = *ParseRuntimeSupport(kGpuRuntime);
  const PlanOutcome planned = PlanSections(model, *work, o);
  ASSERT_TRUE(planned.ok()) << planned.failure.message;
  const int teacher = spec->section_index("teacher");
  ASSERT_GE(teacher, 0);
  const size_t t = static_cast<size_t>(teacher);
  const SectionCost& now = planned.assignment.sections[t].cost;
  std::set<int> expected, got;
  for (int mb : o.micro_batches) {
    plan::ParallelConfig c = now.config;
    c.micro_batch = mb;
    const double per_replica = std::ceil(double(spec->data.global_batch) / c.dp);
    if (mb == now.config.micro_batch || (mb > 1 && mb / 2 >= per_replica)) continue;
    if (model.Evaluate(work->sections[t], c).fits) expected.insert(mb);
  }
  for (const RefinementNeighbour& n : NeighbourAssignments(model, *work, planned.assignment, t, o)) {
    const plan::ParallelConfig& c = n.assignment.sections[t].cost.config;
    if (n.move == RefinementMove::kMicroBatch && c.dp == now.config.dp) got.insert(c.micro_batch);
  }
  EXPECT_EQ(got, expected);
  int far = 0;  // sizes more than a factor 2 away
  for (int mb : got) far += (mb > 2 * now.config.micro_batch || 2 * mb < now.config.micro_batch) ? 1 : 0;
  EXPECT_GE(far, 1) << "teacher micro-batch " << now.config.micro_batch;
}

}  // namespace
}  // namespace maestro::compiler
