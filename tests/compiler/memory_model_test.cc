// SPDX-License-Identifier: Apache-2.0
// The memory model (compiler/memory_model.h) term by term: bytes per
// parameter by precision, ZeRO-1 only where the runtime shards (and the
// planner's configurations saying so), TP leaving the embedding and LM head
// whole, a KD student's teacher head and logits, recomputation, forward-only
// sections without a graph, the micro-batches a section waiting for gradients
// keeps. Each expectation is computed from the shapes, not copied from a run.
#include "compiler/memory_model.h"

#include <gtest/gtest.h>

#include "compiler/candidates.h"
#include "compiler/cost_model.h"
#include "plan/model_desc.h"
#include "tests/fixtures/models.h"
#include "tests/fixtures/workloads.h"

namespace maestro::compiler {
namespace {

// hidden 256, 4 layers, 8 heads over 2 KV heads, FFN 768, vocab 1024.
SectionWork Decoder(bool train = true, int64_t tokens = 128) {
  return fixtures::DecoderWork("llm", {256, 4, 8, 2, 768, 1024}, train, tokens);
}

DeviceType Gpu() {
  DeviceType d = fixtures::H100Like(1);
  d.precision = ParamPrecision::kPureBf16;
  return d;
}

plan::ParallelConfig Config(int tp, int dp, int micro_batch = 1, bool recompute = false, int pp = 1) {
  plan::ParallelConfig c = ConfigOf(tp, pp, /*cp=*/1, dp, micro_batch, recompute);
  return c;
}

TEST(MemoryModel, BytesPerParameterFollowThePrecision) {
  const SectionWork s = Decoder();
  const double p = static_cast<double>(s.facts.params);
  const MemoryBreakdown cpu = EstimateSectionMemory(s, Config(1, 1), 1, 1, fixtures::CpuLike());
  EXPECT_DOUBLE_EQ(cpu.weights, 4 * p);
  EXPECT_DOUBLE_EQ(cpu.gradients, 4 * p);
  EXPECT_DOUBLE_EQ(cpu.optimizer, 8 * p);
  EXPECT_DOUBLE_EQ(cpu.reserved, kCpuWorkerBaselineBytes);
  const MemoryBreakdown gpu = EstimateSectionMemory(s, Config(1, 1), 1, 1, Gpu());
  EXPECT_DOUBLE_EQ(gpu.weights, 2 * p);
  EXPECT_DOUBLE_EQ(gpu.gradients, 2 * p);
  EXPECT_DOUBLE_EQ(gpu.optimizer, 4 * p);
  EXPECT_DOUBLE_EQ(gpu.reserved, 2e9);
  // bf16 activations are half of fp32's, up to RMSNorm's fp32 upcast and the
  // fp32 logits chain: strictly between a half and one.
  EXPECT_LT(gpu.activations, cpu.activations);
  EXPECT_GT(gpu.activations, 0.5 * cpu.activations);
}

// What maestro-worker holds on a GPU (--precision bf16, runtime/section_runner.h):
// fp32 master weights, gradients and moments, plus autocast's bf16 copy of
// every weight a matmul reads (not the embedding lookup, not the norms);
// a forward-only section's weights in bf16.
TEST(MemoryModel, MixedBf16CountsFp32StateAndTheBf16CopiesOfMatmulWeights) {
  const SectionWork s = Decoder();
  const double p = static_cast<double>(s.facts.params);
  const auto& m = s.model;
  ASSERT_FALSE(m.tie_embeddings);
  const double embed = static_cast<double>(m.vocab * m.hidden);
  const double norms = static_cast<double>((2 * m.layers + 1) * m.hidden);
  DeviceType mixed = fixtures::H100Like(1);
  mixed.precision = ParamPrecision::kMixedBf16;
  const MemoryBreakdown train = EstimateSectionMemory(s, Config(1, 1), 1, 1, mixed);
  EXPECT_DOUBLE_EQ(train.weights, 4 * p + 2 * (p - embed - norms));
  EXPECT_DOUBLE_EQ(train.gradients, 4 * p);
  EXPECT_DOUBLE_EQ(train.optimizer, 8 * p);
  // More than pure bf16's 8 B and fp32's 16 B per parameter, at most 18 B.
  const double total = train.weights + train.gradients + train.optimizer;
  EXPECT_GT(total, 16 * p);
  EXPECT_LE(total, 18 * p);
  // Activations as pure bf16's: the same bf16 autocast compute.
  EXPECT_DOUBLE_EQ(train.activations, EstimateSectionMemory(s, Config(1, 1), 1, 1, Gpu()).activations);
  const MemoryBreakdown frozen = EstimateSectionMemory(Decoder(/*train=*/false), Config(1, 1), 1, 1, mixed);
  EXPECT_DOUBLE_EQ(frozen.weights, 2 * p);
  EXPECT_DOUBLE_EQ(frozen.gradients, 0.0);
  EXPECT_DOUBLE_EQ(frozen.optimizer, 0.0);
}

TEST(MemoryModel, OptimizerStatesShardOverDpOnlyWhereTheRuntimeDoesIt) {
  const SectionWork s = Decoder();
  const double p = static_cast<double>(s.facts.params);
  RuntimeSupport without = kRuntimeSupport;
  without.zero1_optimizer_sharding = false;
  RuntimeSupport with = kRuntimeSupport;
  with.zero1_optimizer_sharding = true;
  const plan::ParallelConfig replicated = ConfigOf(1, 1, 1, /*dp=*/4, 1, false, without);
  const plan::ParallelConfig sharded = ConfigOf(1, 1, 1, /*dp=*/4, 1, false, with);
  EXPECT_EQ(replicated.zero_stage, 0);
  EXPECT_EQ(sharded.zero_stage, 1);
  EXPECT_DOUBLE_EQ(EstimateSectionMemory(s, replicated, 1, 1, fixtures::CpuLike()).optimizer, 8 * p);
  EXPECT_DOUBLE_EQ(EstimateSectionMemory(s, sharded, 1, 1, fixtures::CpuLike()).optimizer, 8 * p / 4);
  // A runtime without it: a ZeRO-1 configuration is planner-only.
  EXPECT_EQ(PlannerOnlyFeatures(s.model, sharded, without), "ZeRO-1");
  EXPECT_EQ(PlannerOnlyFeatures(s.model, sharded, with), "");
  // This build's runtime shards (runtime/parallel/distributed_optimizer.h):
  // its candidates say zero_stage 1 (tests/runtime/memory_run_test.cc
  // measures a DP 2 run against the estimate).
  EXPECT_TRUE(kRuntimeSupport.zero1_optimizer_sharding);
  EXPECT_EQ(ConfigOf(1, 1, 1, 4, 1, false).zero_stage, 1);
  PlannerOptions options;
  const CostModel model({fixtures::CpuLike()}, 16);
  for (const auto& c : CandidateConfigs(model, s, options)) EXPECT_EQ(c.zero_stage, 1);
}

TEST(MemoryModel, TensorParallelismLeavesTheEmbeddingAndHeadWhole) {
  const SectionWork s = Decoder();
  const double p = static_cast<double>(s.facts.params);
  const double whole = 2.0 * 1024 * 256 + (2 * 4 + 1) * 256;  // embedding, LM head, norms
  const MemoryBreakdown tp2 = EstimateSectionMemory(s, Config(2, 1), 1, 1, fixtures::CpuLike());
  EXPECT_DOUBLE_EQ(tp2.weights, 4 * ((p - whole) / 2 + whole));
  EXPECT_GT(tp2.weights, 4 * p / 2);  // not the naive P / tp
  // Tied: one V x C table fewer.
  SectionWork tied = s;
  tied.model.tie_embeddings = true;
  tied.facts = ComputeModelFacts(tied.model, tied.tokens);
  EXPECT_DOUBLE_EQ(EstimateSectionMemory(tied, Config(2, 1), 1, 1, fixtures::CpuLike()).weights,
                   4 * ((static_cast<double>(tied.facts.params) - whole + 1024 * 256) / 2 + whole - 1024 * 256));
  // Activations: the residual stream stays whole, the heads and FFN split.
  const MemoryBreakdown tp1 = EstimateSectionMemory(s, Config(1, 1), 1, 1, fixtures::CpuLike());
  EXPECT_LT(tp2.activations, tp1.activations);
  EXPECT_GT(tp2.activations, tp1.activations / 2);
}

TEST(MemoryModel, DecoderLayerBytesFollowTheShapes) {
  plan::ModelDesc m = fixtures::DecoderModel({256, 4, 8, 2, 768, 1024});
  // fp32, explicit attention over 128 tokens, per token: block input, RMSNorm's
  // normalised x, its output (3 x 4C) twice; q: projection, rotate_half's cat,
  // rotated (3 x 4Q); k: projection and cat (2 x 4K); GQA copies of k and v
  // (2 x 4Q); probabilities 4 H T; heads reshaped 4Q; SwiGLU 4 x 4F.
  const double c = 256, q = 256, k = 64, h = 8, t = 128, f = 768;
  const double expected = 2 * 3 * 4 * c + 3 * 4 * q + 2 * 4 * k + 2 * 4 * q + 4 * h * t + 4 * q + 4 * 4 * f;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, 1, 128, 4.0, true), expected);
  // Without GQA the rotated k and v themselves are kept (2 x 4K of the wider K).
  m.kv_heads = 8;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, 1, 128, 4.0, true),
                   expected - 2 * 4 * 64 - 2 * 4 * q + 2 * 4 * 256 + 2 * 4 * 256);
  // The T x T probabilities grow with the context; a fused attention keeps none.
  EXPECT_GT(LayerActivationBytes(m, 1, 1024, 4.0, true), LayerActivationBytes(m, 1, 128, 4.0, true));
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, 1, 1024, 4.0, false), LayerActivationBytes(m, 1, 128, 4.0, false));
}

// Gemma 3 (extra.gemma3) keeps, beyond Llama's block in fp32: the post-
// attention and post-MLP norms' inputs and normalised x (2 x (4C + 4C)) and
// the q/k norms' (4Q + 4Q and 4K + 4K); GeGLU keeps what SwiGLU keeps.
TEST(MemoryModel, Gemma3KeepsItsSandwichAndQkNorms) {
  plan::ModelDesc m = fixtures::DecoderModel({256, 4, 8, 2, 768, 1024});
  const double llama = LayerActivationBytes(m, 1, 128, 4.0, true);
  m.extra[plan::kGemma3Key] = 1;
  m.extra[plan::kQkNormKey] = 1;
  const double c = 256, q = 256, k = 64;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(m, 1, 128, 4.0, true), llama + 2 * 8 * c + 8 * q + 8 * k);
}

TEST(MemoryModel, KdStudentHoldsTheTeacherHeadAndLogits) {
  SectionWork student = Decoder();
  const MemoryBreakdown alone = EstimateSectionMemory(student, Config(1, 1), 1, 2, fixtures::CpuLike());
  student.kd_teacher_hidden = 512;
  const MemoryBreakdown kd = EstimateSectionMemory(student, Config(1, 1), 1, 2, fixtures::CpuLike());
  EXPECT_DOUBLE_EQ(kd.weights - alone.weights, 4.0 * 1024 * 512);  // fp32 V x C_teacher
  // Logits chain: 3 x 4V (CE) -> 6 x 4V (KD), plus the teacher's fp32 rows.
  const double tokens = 2 * 128;
  EXPECT_DOUBLE_EQ(kd.activations - alone.activations, tokens * ((6 - 3) * 4.0 * 1024 + 4.0 * 512));
  student.kd_top_k = 16;
  EXPECT_LT(EstimateSectionMemory(student, Config(1, 1), 1, 2, fixtures::CpuLike()).activations, kd.activations);
}

TEST(MemoryModel, RecomputationKeepsLayerInputsAndOneLayer) {
  const SectionWork s = Decoder();
  const double tokens = 128;
  const double layer = LayerActivationBytes(s.model, 1, 128, 4.0, true);
  const MemoryBreakdown full = EstimateSectionMemory(s, Config(1, 1), 1, 1, fixtures::CpuLike());
  const MemoryBreakdown recompute = EstimateSectionMemory(s, Config(1, 1, 1, true), 1, 1, fixtures::CpuLike());
  EXPECT_DOUBLE_EQ(full.activations - recompute.activations, tokens * (4 * layer - (4 * 4.0 * 256 + layer)));
}

// Selective recomputation (Korthikanti et al. 2022, section 5): each layer
// keeps all but the attention core's score-sized probabilities (4 H T per
// token on the CPU's explicit attention; a fused attention's output and
// log-sum-exp on GPUs).
TEST(MemoryModel, SelectiveRecomputationDropsTheAttentionCoreOfEveryLayer) {
  const SectionWork s = Decoder();
  const double tokens = 128, heads = 8, context = 128;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(s.model, 1, 128, 4.0, true) -
                       LayerActivationBytes(s.model, 1, 128, 4.0, true, /*attention_core_recomputed=*/true),
                   4.0 * heads * context);
  EXPECT_DOUBLE_EQ(
      LayerActivationBytes(s.model, 1, 128, 2.0, false) - LayerActivationBytes(s.model, 1, 128, 2.0, false, true),
      2.0 * 256 + 4.0 * heads);
  plan::ParallelConfig selective = Config(1, 1);
  selective.set_recompute_granularity(plan::RecomputeGranularity::kSelective);
  const MemoryBreakdown none = EstimateSectionMemory(s, Config(1, 1), 1, 1, fixtures::CpuLike());
  const MemoryBreakdown sel = EstimateSectionMemory(s, selective, 1, 1, fixtures::CpuLike());
  EXPECT_DOUBLE_EQ(none.activations - sel.activations, tokens * 4 * (4.0 * heads * context));  // 4 layers
  const MemoryBreakdown full = EstimateSectionMemory(s, Config(1, 1, 1, true), 1, 1, fixtures::CpuLike());
  EXPECT_LT(full.activations, sel.activations);
}

TEST(MemoryModel, ForwardOnlyKeepsNoGraphAndNoOptimizer) {
  const SectionWork train = Decoder(true);
  SectionWork teacher = Decoder(false);
  const MemoryBreakdown t = EstimateSectionMemory(train, Config(1, 1), 1, 4, fixtures::CpuLike());
  const MemoryBreakdown f = EstimateSectionMemory(teacher, Config(1, 1), 1, 4, fixtures::CpuLike());
  EXPECT_DOUBLE_EQ(f.weights, t.weights);
  EXPECT_EQ(f.gradients, 0.0);
  EXPECT_EQ(f.optimizer, 0.0);
  // One layer's working set instead of four layers' graphs and the logits.
  EXPECT_LT(f.activations, t.activations / 4);
  EXPECT_GT(f.activations, 0.0);
  // A teacher feeding a student keeps every micro-batch's rows of the step.
  teacher.sink = false;
  EXPECT_DOUBLE_EQ(EstimateSectionMemory(teacher, Config(1, 1), 3, 4, fixtures::CpuLike()).activations -
                       EstimateSectionMemory(Decoder(false), Config(1, 1), 3, 4, fixtures::CpuLike()).activations,
                   3 * 4 * 128 * 4.0 * 256);
}

TEST(MemoryModel, ASectionWaitingForGradientsKeepsEveryMicroBatch) {
  SectionWork vit = fixtures::SectionOf("vit", fixtures::VitModel({64, 2, 4, 128, 64, 8, 1}), true, 64);
  const MemoryBreakdown sink = EstimateSectionMemory(vit, Config(1, 1, 2), 4, 2, fixtures::CpuLike());
  vit.sink = false;
  const MemoryBreakdown upstream = EstimateSectionMemory(vit, Config(1, 1, 2), 4, 2, fixtures::CpuLike());
  EXPECT_NEAR(upstream.activations, 4 * sink.activations, 1e-9 * sink.activations);
}

// A forward-only pipelined section (a frozen teacher): a stage before the
// last holds each micro-batch's activation as an fp32 wire copy until the
// step's sends drain (runtime/parallel/pipeline_parallel.h), the last keeps
// the output rows it sends downstream, and a later stage of a pipeline
// streaming ahead (runtime/run_ahead.h) holds one more received input.
TEST(MemoryModel, AForwardOnlyPipelineHoldsItsSendsAndAStreamingStageItsNextInput) {
  SectionWork teacher = Decoder(false);  // 128 tokens, hidden 256
  teacher.sink = false;                  // it feeds a student
  const plan::ParallelConfig c = Config(1, 1, 2, false, 2);
  const double wire = 128.0 * 2 * 4.0 * 256;  // one micro-batch of 2 samples, fp32
  const MemoryBreakdown first3 = EstimateStageMemory(teacher, c, 0, 3, 2, fixtures::CpuLike());
  const MemoryBreakdown first1 = EstimateStageMemory(teacher, c, 0, 1, 2, fixtures::CpuLike());
  EXPECT_NEAR(first3.activations - first1.activations, 2 * wire, 1.0) << "each micro-batch's send";
  const MemoryBreakdown last = EstimateStageMemory(teacher, c, 1, 3, 2, fixtures::CpuLike());
  teacher.pipeline_streams_ahead = 3;
  const MemoryBreakdown streaming_last = EstimateStageMemory(teacher, c, 1, 3, 2, fixtures::CpuLike());
  const MemoryBreakdown streaming_first = EstimateStageMemory(teacher, c, 0, 3, 2, fixtures::CpuLike());
  EXPECT_NEAR(streaming_last.activations - last.activations, wire, 1.0) << "the input held across a step";
  EXPECT_DOUBLE_EQ(streaming_first.activations, first3.activations) << "the first stage receives nothing";
}

// Pipeline stages (EstimateStageMemory): each stage holds its own layers
// (plan::StageLayerSpan: pp_layers when set); the first the embedding, the
// last the head, the final norm and the logits chain; a stage s keeps
// min(pp - s, micro-batches) micro-batches in flight. The section is its
// heaviest stage.
TEST(MemoryModel, PipelineStagesArePricedWithTheirOwnLayers) {
  const SectionWork s = Decoder();  // a sink: 4 layers, vocab 1024, untied
  const double embed = static_cast<double>(s.model.vocab * s.model.hidden);
  plan::ParallelConfig c = Config(1, 1, 1, false, 2);
  const MemoryBreakdown first = EstimateStageMemory(s, c, 0, 4, 1, fixtures::CpuLike());
  const MemoryBreakdown last = EstimateStageMemory(s, c, 1, 4, 1, fixtures::CpuLike());
  const MemoryBreakdown whole = EstimateSectionMemory(s, Config(1, 1), 4, 1, fixtures::CpuLike());
  // Weights: the two stages together hold the model once (fp32, 4 B) and
  // the final norm's and head's parameters sit on the last.
  EXPECT_NEAR(first.weights + last.weights, whole.weights, 1.0);
  EXPECT_NEAR(last.weights - first.weights, 4.0 * static_cast<double>(s.model.hidden), 1.0)
      << "2 + 2 layers, embedding and head of equal size: the last adds the final norm";
  // 1F1B in flight: the first of 2 stages keeps 2 micro-batches, the last 1.
  EXPECT_NEAR(first.activations, 2.0 * EstimateStageMemory(s, c, 0, 1, 1, fixtures::CpuLike()).activations, 1.0);
  EXPECT_NEAR(last.activations, EstimateStageMemory(s, c, 1, 1, 1, fixtures::CpuLike()).activations, 1.0);
  // Moving a layer to the first stage moves its parameters there.
  c.pp_layers = {3, 1};
  const MemoryBreakdown first3 = EstimateStageMemory(s, c, 0, 4, 1, fixtures::CpuLike());
  const MemoryBreakdown last1 = EstimateStageMemory(s, c, 1, 4, 1, fixtures::CpuLike());
  const double layer_bytes = (whole.weights - 4.0 * (2.0 * embed + static_cast<double>(s.model.hidden))) / 4.0;
  EXPECT_NEAR(first3.weights - first.weights, layer_bytes, 1.0);
  EXPECT_NEAR(last.weights - last1.weights, layer_bytes, 1.0);
  // The section: its heaviest stage.
  const MemoryBreakdown section = EstimateSectionMemory(s, c, 4, 1, fixtures::CpuLike());
  EXPECT_DOUBLE_EQ(section.total(), std::max(first3.total(), last1.total()));
  // Not a pipelined decoder: the stage is the section.
  EXPECT_DOUBLE_EQ(EstimateStageMemory(s, Config(1, 1), 0, 4, 1, fixtures::CpuLike()).total(), whole.total());
}

}  // namespace
}  // namespace maestro::compiler
