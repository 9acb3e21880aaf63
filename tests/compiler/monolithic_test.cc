// SPDX-License-Identifier: Apache-2.0
// The monolithic baseline's named terms (docs/monolithic.md): each effect of
// one configuration for every section on every GPU, checked against the
// cost model's own numbers: the stage-0 bottleneck of an encoder on pipeline
// stage 0, the encoder at the LLM's TP degree, DP stragglers from per-replica
// image counts, co-located memory forcing a higher TP, GPU types in
// lockstep; and the fair comparison on the GPUs the sectioned plan holds.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "compiler/compile.h"
#include "compiler/model.h"
#include "compiler/planner.h"
#include "compiler/step_simulation.h"
#include "tests/fixtures/test_paths.h"
#include "tests/fixtures/workloads.h"

namespace maestro::compiler {
namespace {

const std::string kSpecs = std::string(MAESTRO_SOURCE_DIR) + "/specs/";

DeviceType Gpu(const std::string& name = "h100", double tflops = 989, int nodes = 4) {
  return fixtures::H100Like(nodes, tflops, 8, name);
}

SectionWork Decoder(const std::string& name, int64_t hidden, int64_t layers, bool train, int64_t tokens = 2048) {
  return fixtures::DecoderWork(name, {hidden, layers, 32, 8, 0, 32000}, train, tokens);
}

SectionWork Vit(double fraction) {
  return fixtures::SectionOf("vit", fixtures::LargeVitModel(), true, 4096, fraction, "image");
}

plan::ParallelConfig Config(int tp, int pp, int dp, int mb) {
  return fixtures::ConfigOf(tp, pp, dp, mb);
}

// What a GPU runtime runs (PP on decoders too).
PlannerOptions GpuRuntime() {
  PlannerOptions o;
  o.support.pipeline_parallel_decoder = true;
  return o;
}

double TermOf(const MonolithicPlan& m, const std::string& name) {
  for (const auto& t : m.terms) {
    if (t.name == name) return t.seconds;
  }
  return -1;
}

// ViT on every image (no stragglers) + an LLM, 32 GPUs, TP 1 PP 4 DP 8.
TEST(Monolithic, AnEncoderOnStageZeroPacesThePipeline) {
  const CostModel model({Gpu()}, 64);
  Workload w;
  w.sections = {Vit(1.0), Decoder("llm", 4096, 32, true)};
  const PlannerOptions o = GpuRuntime();
  const plan::ParallelConfig c = Config(1, 4, 8, 1);
  const MonolithicPlan m = EvaluateMonolithic(model, w, {{0, 32}}, c, o);
  ASSERT_TRUE(m.found) << m.why_not;
  ASSERT_EQ(m.sections.size(), 2u);
  // The ViT cannot be pipelined by our runtime: whole, on stage 0.
  EXPECT_EQ(m.sections[0].config.pp, 1);
  EXPECT_EQ(m.sections[1].config.pp, 4);
  const double mbs = 64.0 / 8;
  const double vit = m.sections[0].stage_seconds, llm = m.sections[1].stage_seconds;
  const double sync = m.sections[0].dp_sync_seconds + m.sections[1].dp_sync_seconds;
  EXPECT_NEAR(m.stage0_seconds, vit + llm, 1e-12);
  // 1F1B at stage 0's pace: (8 + 3) stage-0 times.
  EXPECT_NEAR(m.step_seconds, (mbs + 3) * (vit + llm) + sync, 1e-9 * m.step_seconds);
  MonolithicEffects balanced;
  balanced.stage0_bottleneck = false;
  const MonolithicPlan spread = EvaluateMonolithic(model, w, {{0, 32}}, c, o, balanced);
  // The bottleneck: the ViT's work on one stage instead of a quarter on each.
  const double bottleneck = (mbs + 3) * vit * (1 - 1.0 / 4);
  EXPECT_NEAR(m.step_seconds - spread.step_seconds, bottleneck, 1e-9 * m.step_seconds);
  EXPECT_GT(bottleneck, 0.05 * m.step_seconds);  // a ViT-sized encoder is not negligible here
}

// The runtime splits encoders over TP (docs/encoder_tp.md): the baseline's
// ViT runs at the LLM's TP, priced with its narrow GEMMs and all-reduces.
TEST(Monolithic, AnEncoderAtTheLlmsTpIsSplitLikeTheRuntimeSplitsIt) {
  const CostModel model({Gpu()}, 64);
  Workload w;
  w.sections = {Vit(1.0), Decoder("llm", 4096, 32, true)};
  const PlannerOptions o;
  ASSERT_TRUE(o.support.tensor_parallel_encoder);
  const plan::ParallelConfig c = Config(4, 1, 8, 1);
  const MonolithicPlan m = EvaluateMonolithic(model, w, {{0, 32}}, c, o);
  ASSERT_TRUE(m.found) << m.why_not;
  EXPECT_EQ(m.sections[0].config.tp, 4);
  EXPECT_EQ(PlannerOnlyFeatures(w.sections[0].model, m.sections[0].config, o.support), "");
  // A TP the ViT's heads do not divide: it runs whole on every TP rank.
  Workload odd = w;
  odd.sections[0].model.heads = 6;
  const MonolithicPlan whole = EvaluateMonolithic(model, odd, {{0, 32}}, c, o);
  ASSERT_TRUE(whole.found) << whole.why_not;
  EXPECT_EQ(whole.sections[0].config.tp, 1);
}

// A runtime without encoder TP: the encoder runs whole on every TP rank.
TEST(Monolithic, AnEncoderAtTheLlmsTpRunsWholeWithoutEncoderTp) {
  const CostModel model({Gpu()}, 64);
  Workload w;
  w.sections = {Vit(1.0), Decoder("llm", 4096, 32, true)};
  PlannerOptions o;
  o.support.tensor_parallel_encoder = false;
  const plan::ParallelConfig c = Config(4, 1, 8, 1);
  const MonolithicPlan m = EvaluateMonolithic(model, w, {{0, 32}}, c, o);
  ASSERT_TRUE(m.found) << m.why_not;
  EXPECT_EQ(m.sections[0].config.tp, 1);  // replicated over the TP group
  MonolithicEffects split;
  split.encoder_tp = false;
  const MonolithicPlan ideal = EvaluateMonolithic(model, w, {{0, 32}}, c, o, split);
  const double mbs = 64.0 / 8;
  EXPECT_NEAR(m.step_seconds - ideal.step_seconds, mbs * m.sections[0].stage_seconds * (1 - 1.0 / 4),
              1e-9 * m.step_seconds);
}

TEST(Monolithic, ReplicasThatDrawMoreImagesAreStragglers) {
  // Memory is not what this checks: a GPU large enough for the runtime's
  // footprint of both sections at DP 32 (compiler/memory_model.h).
  DeviceType big = Gpu();
  big.memory_bytes = 160e9;
  const CostModel model({big}, 256);
  Workload w;
  w.sections = {Vit(1.0 / 3), Decoder("llm", 4096, 32, true)};
  const PlannerOptions o;
  const plan::ParallelConfig c = Config(1, 1, 32, 1);
  const MonolithicPlan m = EvaluateMonolithic(model, w, {{0, 32}}, c, o);
  ASSERT_TRUE(m.found) << m.why_not;
  MonolithicEffects even;
  even.dp_straggler = false;
  const MonolithicPlan mean = EvaluateMonolithic(model, w, {{0, 32}}, c, o, even);
  // 8 samples per replica, a third with an image: the busiest of 32
  // replicas draws ~ 8/3 + sqrt(8 * 1/3 * 2/3 * 2 ln 32) = 5.2 images, in
  // its 8 micro-batches.
  const double busiest = 8.0 / 3 + std::sqrt(8.0 / 3 * 2 / 3 * 2 * std::log(32.0));
  const auto vit = [&](double images) { return 8 * model.EvaluateWith(w.sections[0], c, 8, images / 8).stage_seconds; };
  EXPECT_NEAR(m.step_seconds - mean.step_seconds, vit(busiest) - vit(8.0 / 3), 1e-9 * m.step_seconds);
  EXPECT_GT(m.step_seconds, mean.step_seconds);
}

TEST(Monolithic, ATeacherThatDoesNotFitBesideTheStudentForcesAHigherTp) {
  // A 32B forward-only teacher fits one 80 GB GPU alone (64 GB of bf16
  // weights), but not beside a 3B student's training states.
  const CostModel model({Gpu("h100", 989, 2)}, 512);
  Workload w;
  w.sections = {Decoder("teacher", 8192, 40, false), Decoder("student", 4096, 16, true)};
  const PlannerOptions o;
  const MonolithicPlan tp1 = EvaluateMonolithic(model, w, {{0, 16}}, Config(1, 1, 16, 1), o);
  EXPECT_FALSE(tp1.found);
  EXPECT_GT(tp1.memory.total(), 80e9);
  MonolithicEffects own;
  own.colocated_memory = false;
  const MonolithicPlan alone = EvaluateMonolithic(model, w, {{0, 16}}, Config(1, 1, 16, 1), o, own);
  EXPECT_TRUE(alone.found) << alone.why_not;  // each section alone fits at TP 1
  const MonolithicPlan m = PlanMonolithicOn(model, w, {{0, 16}}, o);
  ASSERT_TRUE(m.found) << m.why_not;
  EXPECT_GT(m.config.tp * m.config.pp, 1);
  EXPECT_LE(m.memory.total(), 80e9);
  EXPECT_GT(TermOf(m, "colocated_memory"), 0.0);
  EXPECT_NE(DescribeMonolithic(m).find("colocated_memory"), std::string::npos);
}

// Every option the runtime has (docs/monolithic.md), ZeRO-1 too: with the
// support row on, the baseline shards AdamW over its DP replicas and holds
// 1/DP of the replicated optimizer state per GPU; with it off, it does not.
TEST(Monolithic, TheBaselineShardsAdamWOverDpWhereTheRuntimeDoes) {
  const CostModel model({Gpu("h100", 989, 2)}, 512);
  Workload w;
  w.sections = {Decoder("teacher", 8192, 40, false), Decoder("student", 4096, 16, true)};
  PlannerOptions with;
  with.support.zero1_optimizer_sharding = true;
  PlannerOptions without;
  without.support.zero1_optimizer_sharding = false;
  const MonolithicPlan m = PlanMonolithicOn(model, w, {{0, 16}}, with);
  ASSERT_TRUE(m.found) << m.why_not;
  EXPECT_EQ(m.config.zero_stage, 1);
  ASSERT_GT(m.config.dp, 1);
  plan::ParallelConfig replicated = m.config;
  replicated.zero_stage = 0;
  const MonolithicPlan r = EvaluateMonolithic(model, w, {{0, 16}}, replicated, without);
  EXPECT_GT(r.memory.optimizer, 0.0);
  EXPECT_NEAR(m.memory.optimizer * m.config.dp, r.memory.optimizer, 1e-6 * r.memory.optimizer);
  EXPECT_EQ(PlanMonolithicOn(model, w, {{0, 16}}, without).config.zero_stage, 0);
}

TEST(Monolithic, DataDependentMemoryIsSizedForTheFullestMicroBatch) {
  const CostModel model({Gpu()}, 256);
  Workload w;
  w.sections = {Vit(0.1), Decoder("llm", 2048, 16, true)};
  const PlannerOptions o;
  const MonolithicPlan m = EvaluateMonolithic(model, w, {{0, 32}}, Config(1, 1, 32, 8), o);
  // Eight images in one micro-batch, though the mean is 0.8.
  const SectionCost full = model.EvaluateWith(w.sections[0], Config(1, 1, 32, 8), 1, 8);
  EXPECT_NEAR(m.sections[0].memory.activations, full.memory.activations, 1e-6 * full.memory.activations);
}

TEST(Monolithic, SeveralGpuTypesRunInLockstepAtTheSlowestPace) {
  const CostModel model({Gpu("h100", 989, 1), Gpu("a100", 312, 1)}, 64);
  Workload w;
  w.sections = {Decoder("teacher", 4096, 16, false), Decoder("student", 2048, 16, true)};
  const PlannerOptions o;
  const plan::ParallelConfig c = Config(2, 1, 8, 1);
  const MonolithicPlan both = EvaluateMonolithic(model, w, {{0, 8}, {1, 8}}, c, o);
  ASSERT_TRUE(both.found) << both.why_not;
  plan::ParallelConfig half = c;
  half.dp = 4;
  // Each replica gets 4 samples in both; the A100 replica is the slower.
  const MonolithicPlan a100 = EvaluateMonolithic(model, w, {{1, 8}}, c.dp == 8 ? half : c, o);
  ASSERT_TRUE(a100.found);
  EXPECT_GT(both.step_seconds, 0.5 * a100.step_seconds);
  EXPECT_EQ(both.gpus, 16);
  EXPECT_NEAR(both.peak_flops, 8 * 989e12 + 8 * 312e12, 1.0);
  MonolithicEffects proportional;
  proportional.gpu_type_lockstep = false;
  const MonolithicPlan balanced = EvaluateMonolithic(model, w, {{0, 8}, {1, 8}}, c, o, proportional);
  EXPECT_LT(balanced.step_seconds, both.step_seconds);
  const MonolithicPlan best = PlanMonolithicOn(model, w, {{0, 8}, {1, 8}}, o);
  ASSERT_TRUE(best.found);
  EXPECT_GT(TermOf(best, "gpu_type_lockstep"), 0.0);
}

TEST(Monolithic, AWorkloadOnTwoGpuTypesIsComparedOnTheGpusTheSectionedPlanHolds) {
  const CostModel model({Gpu("h100", 989, 4), Gpu("a100", 312, 4)}, 64);
  Workload w;
  w.sections = {Decoder("teacher", 4096, 16, false), Decoder("student", 2048, 16, true)};
  w.sections[0].device = 1;  // the teacher pinned to the A100s
  EdgeWork e;
  e.from = 0;
  e.to = 1;
  e.bytes_per_sample = 2048 * 4096 * 2.0;
  e.link_bytes_per_s = 25e9;
  w.edges = {e};
  const PlannerOptions o;
  const PlanOutcome held = PlanSections(model, w, o);
  ASSERT_TRUE(held.ok()) << held.failure.message;
  const MonolithicPlan m = PlanMonolithic(model, w, 0, o);
  ASSERT_TRUE(m.found) << m.why_not;
  int on_h100 = 0, on_a100 = 0;
  for (const auto& d : m.devices) (d.device == 0 ? on_h100 : on_a100) += d.gpus;
  EXPECT_LE(on_h100, held.assignment.nodes_per_device[0] * 8);
  EXPECT_LE(on_a100, held.assignment.nodes_per_device[1] * 8);
  EXPECT_NE(m.basis.find("the sectioned plan holds"), std::string::npos) << m.basis;
  // The simulation runs it on the same GPU types.
  SimulationSettings s;
  s.seq_len = 2048;
  const SimulatedStep sim = SimulateMonolithic(model, w, m, 0, s);
  ASSERT_TRUE(sim.ok) << sim.error;
  EXPECT_NEAR(sim.step_seconds, m.step_seconds, 0.02 * m.step_seconds);
}

// The example specs: what each term adds (docs/monolithic.md has the table).
TEST(Monolithic, RealisticSpecsReportTheirTerms) {
  for (const char* name : {"qwen2vl_7b_mllm.toml", "kd_72b_to_7b.toml", "omni_audio_vision_llm.toml",
                           "kd_72b_to_7b_two_partitions.toml"}) {
    for (const bool everything : {false, true}) {
      auto spec = ParseSpecFile(kSpecs + name);
      ASSERT_TRUE(spec.ok()) << spec.status().message();
      CompileOptions o;
      o.allow_planner_only = everything;  // CP, recomputation, encoder TP/PP on both sides
      auto r = Compile(*spec, o);
      if (!everything && !r.ok()) {
        // This build's runtime cannot start these: they need more than an
        // H100 holds of what this runtime keeps (replicated AdamW, whole
        // fp32 logits; compiler/memory_model.h). The error says which
        // section and the fix.
        EXPECT_NE(r.status().message().find("fits in memory at no configuration"), std::string::npos)
            << r.status().message();
        EXPECT_NE(r.status().message().find("--allow-planner-only"), std::string::npos) << r.status().message();
        continue;
      }
      ASSERT_TRUE(r.ok()) << r.status().message();
      const MonolithicPlan& m = r->monolithic;
      if (!everything && !m.found) {
        // The sectioned plan fits where no single configuration does: with
        // ZeRO-1 the KD student fits beside nothing else, while the
        // baseline puts the 72B teacher's weights beside the student's
        // states on every GPU, without PP in this build's runtime.
        EXPECT_NE(m.why_not.find("no single configuration fits"), std::string::npos) << name << ": " << m.why_not;
        continue;
      }
      ASSERT_TRUE(m.found) << name << ": " << m.why_not;
      ASSERT_TRUE(r->simulated.ok && r->monolithic_simulated.ok) << name;
      std::cout << name << (everything ? " (--allow-planner-only)" : "") << ": sectioned " << r->simulated.step_seconds
                << " s, monolithic " << r->monolithic_simulated.step_seconds << " s simulated (" << m.step_seconds
                << " analytic), "
                << "speed-up " << r->monolithic_simulated.step_seconds / r->simulated.step_seconds << "x; TP "
                << m.config.tp << " PP " << m.config.pp << " CP " << m.config.cp << " DP " << m.config.dp << " mb "
                << m.config.micro_batch << "\n"
                << DescribeMonolithic(m);
      for (const auto& t : m.terms) EXPECT_GE(t.seconds, -1e-9 * m.step_seconds) << name << " " << t.name;
      if (std::string(name) == "kd_72b_to_7b_two_partitions.toml") {
        // Not the 128 H100s the sectioned plan leaves to other jobs: the 16
        // A100 and 2 H100 nodes it holds.
        EXPECT_LE(m.gpus, r->assignment.gpus) << m.basis;
        for (const auto& d : m.devices) {
          EXPECT_LE(d.gpus, r->assignment.nodes_per_device[static_cast<size_t>(d.device)] * 8) << m.basis;
        }
        EXPECT_NE(m.basis.find("the sectioned plan holds"), std::string::npos) << m.basis;
      }
    }
  }
}

}  // namespace
}  // namespace maestro::compiler
