// SPDX-License-Identifier: Apache-2.0
// The device profile (compiler/devices/h100_sxm.json: reading, errors,
// interpolation) and the step model from parts against the H100
// measurements (../shared/research/h100-measurements.md, section 1).
#include "compiler/step_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/device_profile.h"
#include "plan/banded_attention.h"
#include "plan/loss_chunk.h"
#include "plan/model_desc.h"
#include "plan/teacher_rows.h"
#include "tests/fixtures/models.h"

namespace maestro::compiler {
namespace {

DeviceProfile H100() {
  auto p = BuiltinDeviceProfile("h100_sxm");
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return *p;
}

plan::ModelDesc Decoder(int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t ffn,
                        int64_t vocab, bool tied, bool qkv_bias) {
  fixtures::DecoderShape shape;
  shape.hidden = hidden;
  shape.layers = layers;
  shape.heads = heads;
  shape.kv_heads = kv_heads;
  shape.ffn_hidden = ffn;
  shape.vocab = vocab;
  plan::ModelDesc d = fixtures::DecoderModel(shape);
  d.head_dim = head_dim;
  d.tie_embeddings = tied;
  if (qkv_bias) d.extra["qkv_bias"] = 1;
  return d;
}

// Public configs (config.json on the Hugging Face hub).
plan::ModelDesc Llama32_1B() {
  return Decoder(2048, 16, 32, 8, 64, 8192, 128256, true, false);
}
plan::ModelDesc Qwen25_05B() {
  return Decoder(896, 24, 14, 2, 64, 4864, 151936, true, true);
}
plan::ModelDesc Llama3_8BLayers8() {
  return Decoder(4096, 8, 32, 8, 128, 14336, 128256, false, false);
}

TEST(DeviceProfile, BuiltinH100CarriesItsNumbersAndValidationCases) {
  const DeviceProfile p = H100();
  EXPECT_EQ(p.name, "h100_sxm");
  EXPECT_DOUBLE_EQ(p.peak_flops, 989.4e12);
  EXPECT_DOUBLE_EQ(p.memory_bytes_per_s, 3.0e12);
  EXPECT_GT(p.kernel_launch_seconds, 0);
  EXPECT_EQ(p.gemm.size(), 13u);
  EXPECT_EQ(p.attention.size(), 3u);
  EXPECT_EQ(p.validation.size(), 6u);
  EXPECT_NE(p.origin.find("h100_sxm.json"), std::string::npos);
  auto missing = BuiltinDeviceProfile("a100_imaginary");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("h100_sxm"), std::string::npos) << missing.status().ToString();
}

// The H200's profile (maestro profile --kernels on the device, 2026-11-30;
// docs/e2e.md, "The H200 campaign"): the H100's grid, so the two files
// compare row by row, and its decoder validation case, which the step
// model prices from the file's own tables within 15% (1 x 2048; the eager
// floor it measured, a + b with no autograd, makes it optimistic).
TEST(DeviceProfile, BuiltinH200IsTheMeasuredOneOnTheH100sGrid) {
  auto h200 = BuiltinDeviceProfile("h200");
  ASSERT_TRUE(h200.ok()) << h200.status().ToString();
  const DeviceProfile h100 = H100();
  EXPECT_EQ(h200->name, "h200");
  EXPECT_GT(h200->memory_bytes_per_s, h100.memory_bytes_per_s);  // HBM3e: 4.2 TB/s copied against 3.0
  ASSERT_EQ(h200->gemm.size(), h100.gemm.size());
  for (size_t i = 0; i < h100.gemm.size(); ++i) {
    EXPECT_EQ(h200->gemm[i].k, h100.gemm[i].k) << i;
    EXPECT_EQ(h200->gemm[i].n, h100.gemm[i].n) << i;
  }
  ASSERT_EQ(h200->validation.size(), 1u);
  const ValidationCase& v = h200->validation[0];
  EXPECT_EQ(v.model, "Llama-3.2-1B");
  auto predicted = PredictDecoderStepFromParts(Llama32_1B(), v.micro_batch, v.seq_len, 1, *h200);
  ASSERT_TRUE(predicted.ok()) << predicted.status().ToString();
  EXPECT_NEAR(predicted->total_seconds / v.seconds_per_step, 1.0, 0.15)
      << predicted->total_seconds << " s predicted, " << v.seconds_per_step << " s measured";
}

// A minimal valid profile to break field by field.
nlohmann::json MinimalProfile() {
  return nlohmann::json::parse(R"({
    "schema": "maestro.device_profile", "schema_version": 1, "name": "tiny", "source": "a test",
    "peak_bf16_tflops": {"value": 100, "source": "t"},
    "memory_bandwidth_tb_per_s": {"value": 1, "source": "t"},
    "kernel_launch_us": {"value": 5, "source": "t"},
    "gemm": {"source": "t", "m": [100, 1000], "rows": [{"k": 64, "n": 64, "tflops": [10, 50]}]},
    "attention": {"source": "t", "t": [128, 1024],
                  "rows": [{"heads": 8, "head_dim": 64, "fwd_tflops": [5, 20], "fwd_bwd_tflops": [4, 15]}]}
  })");
}

// The CPU's issue cost of a training kernel (training_issue_us) is optional
// (files without it price no such bound) and, like every figure, cited; it
// leaves the per-kernel floor (kernel_launch_us) as it is.
TEST(DeviceProfile, TheIssueCostIsOptionalAndCited) {
  auto without = ParseDeviceProfile(MinimalProfile().dump(), "tiny.json");
  ASSERT_TRUE(without.ok()) << without.status().ToString();
  EXPECT_DOUBLE_EQ(without->kernel_launch_seconds, 5e-6);
  EXPECT_EQ(without->training_issue_seconds, 0);
  auto j = MinimalProfile();
  j["training_issue_us"] = {{"value", 30}, {"source", "t"}};
  auto with = ParseDeviceProfile(j.dump(), "tiny.json");
  ASSERT_TRUE(with.ok()) << with.status().ToString();
  EXPECT_DOUBLE_EQ(with->training_issue_seconds, 30e-6);
  EXPECT_DOUBLE_EQ(with->kernel_launch_seconds, 5e-6);
  j["training_issue_us"] = {{"value", 30}};
  auto bad = ParseDeviceProfile(j.dump(), "tiny.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("/training_issue_us/source"), std::string::npos) << bad.status().ToString();
}

TEST(DeviceProfile, ErrorsNameTheFileAndTheField) {
  ASSERT_TRUE(ParseDeviceProfile(MinimalProfile().dump(), "tiny.json").ok());
  {
    auto j = MinimalProfile();
    j["peak_bf16_tflops"].erase("source");
    auto p = ParseDeviceProfile(j.dump(), "dev/tiny.json");
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("dev/tiny.json"), std::string::npos);
    EXPECT_NE(p.status().message().find("/peak_bf16_tflops/source"), std::string::npos) << p.status().ToString();
  }
  {
    auto j = MinimalProfile();
    j["gemm"]["rows"][0]["tflops"] = {10, 20, 30};
    auto p = ParseDeviceProfile(j.dump(), "tiny.json");
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("/gemm/rows/0/tflops"), std::string::npos) << p.status().ToString();
  }
  {
    auto j = MinimalProfile();
    j["schema_version"] = 2;
    auto p = ParseDeviceProfile(j.dump(), "tiny.json");
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("schema_version"), std::string::npos) << p.status().ToString();
  }
  {
    auto j = MinimalProfile();
    j["attention"]["t"] = {1024, 128};
    auto p = ParseDeviceProfile(j.dump(), "tiny.json");
    ASSERT_FALSE(p.ok());
    EXPECT_NE(p.status().message().find("/attention/t must be strictly ascending"), std::string::npos);
  }
  auto bad = ParseDeviceProfile("{\"schema\": ", "broken.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("broken.json"), std::string::npos);
  EXPECT_FALSE(LoadDeviceProfileFile("/nonexistent/dir/x.json").ok());
}

TEST(DeviceProfile, GemmInterpolationHitsTablePointsSkipsTheNoisyOneAndClamps) {
  const DeviceProfile p = H100();
  EXPECT_DOUBLE_EQ(p.GemmFlopsPerSecond(1024, 1280, 640), 129e12);    // ViT-H MLP TP 8
  EXPECT_DOUBLE_EQ(p.GemmFlopsPerSecond(8192, 4096, 14336), 701e12);  // Llama-8B FFN TP 1
  // The starred 386 at (2048, 2048, 8192) is skipped: halfway in log M between 583 and 728.
  EXPECT_NEAR(p.GemmFlopsPerSecond(2048, 2048, 8192), (583e12 + 728e12) / 2, 1e9);
  // Clamped: past the table's largest M and N, its corner.
  EXPECT_DOUBLE_EQ(p.GemmFlopsPerSecond(1e6, 4096, 1e6), 724e12);
  EXPECT_DOUBLE_EQ(p.GemmFlopsPerSecond(16, 896, 100), 17e12);
  // Between two N rows of the same K: between their values.
  const double mid = p.GemmFlopsPerSecond(1024, 896, 1700);
  EXPECT_GT(mid, 145e12);
  EXPECT_LT(mid, 233e12);
  EXPECT_DOUBLE_EQ(p.AttentionFlopsPerSecond(128, 4096, true), 489e12);
  EXPECT_DOUBLE_EQ(p.AttentionFlopsPerSecond(64, 2048, false), 400e12);
  EXPECT_DOUBLE_EQ(p.AttentionFlopsPerSecond(80, 64, true), 96e12);  // clamped below T = 256
}

// The interpolation as the header states it, straight from the rows (the
// profile's GemmFlopsPerSecond answers from an index built once: IndexGemm).
double DirectLogInterp(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (xs.size() == 1 || x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  size_t hi = 1;
  while (xs[hi] < x) ++hi;
  const double w = (std::log(x) - std::log(xs[hi - 1])) / (std::log(xs[hi]) - std::log(xs[hi - 1]));
  return ys[hi - 1] + w * (ys[hi] - ys[hi - 1]);
}
double DirectGemmFlopsPerSecond(const DeviceProfile& p, double m, double k, double n) {
  double best_k = p.gemm.front().k;
  for (const auto& row : p.gemm) {
    if (std::fabs(std::log(row.k / k)) < std::fabs(std::log(best_k / k))) best_k = row.k;
  }
  std::vector<const GemmRow*> group;
  for (const auto& row : p.gemm) {
    if (row.k == best_k) group.push_back(&row);
  }
  std::stable_sort(group.begin(), group.end(), [](const GemmRow* a, const GemmRow* b) { return a->n < b->n; });
  std::vector<double> ns, effs;
  for (const GemmRow* row : group) {
    if (!ns.empty() && ns.back() == row->n) continue;
    ns.push_back(row->n);
    effs.push_back(DirectLogInterp(row->m, row->tflops, m));
  }
  return DirectLogInterp(ns, effs, n) * 1e12;
}

TEST(DeviceProfile, TheIndexedGemmLookupEqualsTheDirectInterpolationEverywhere) {
  const DeviceProfile p = H100();
  ASSERT_FALSE(p.gemm_groups.empty()) << "the parser indexes the table";
  std::vector<double> ks, ns;
  for (const auto& row : p.gemm) {
    ks.push_back(row.k);
    ns.push_back(row.n);
  }
  // Every table K and N, the geometric midpoints between them (ties in log
  // K: the first group wins), and points off and past the table.
  const size_t table_ks = ks.size();
  for (size_t i = 0; i + 1 < table_ks; ++i) ks.push_back(std::sqrt(ks[i] * ks[i + 1]));
  for (double x : {1.0, 7.0, 100.0, 3000.0, 1e5}) ks.push_back(x), ns.push_back(x);
  int compared = 0;
  for (const double m : {1.0, 16.0, 100.0, 1024.0, 2048.0, 3000.0, 65536.0, 1e7}) {
    for (const double k : ks) {
      for (const double n : ns) {
        ASSERT_EQ(p.GemmFlopsPerSecond(m, k, n), DirectGemmFlopsPerSecond(p, m, k, n))
            << "m " << m << " k " << k << " n " << n;
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 1000);
  // A profile scaled to another peak keeps its index and scales the rates.
  const DeviceProfile half = ScaledToPeak(p, p.peak_flops / 2);
  EXPECT_DOUBLE_EQ(half.GemmFlopsPerSecond(1024, 1280, 640), 129e12 / 2);
}

struct Case {
  const char* model;
  int64_t micro_batch, seq_len;
};

TEST(StepModel, SixMeasuredH100CasesWithin15Percent) {
  const DeviceProfile p = H100();
  const std::map<std::string, plan::ModelDesc> models = {{"Llama-3.2-1B", Llama32_1B()},
                                                         {"Qwen2.5-0.5B", Qwen25_05B()},
                                                         {"Llama-3-8B layer shape, 8 layers", Llama3_8BLayers8()}};
  ASSERT_EQ(p.validation.size(), 6u);
  for (const ValidationCase& c : p.validation) {
    ASSERT_TRUE(models.count(c.model)) << c.model;
    auto step = PredictDecoderStepFromParts(models.at(c.model), c.micro_batch, c.seq_len, 1, p);
    ASSERT_TRUE(step.ok()) << step.status().ToString();
    const double ratio = step->total_seconds / c.seconds_per_step;
    // The table of docs/step_model.md.
    std::printf("%-34s %2lld x %5lld  predicted %.4f s  measured %.4f s  ratio %.3f  mfu %.3f\n", c.model.c_str(),
                static_cast<long long>(c.micro_batch), static_cast<long long>(c.seq_len), step->total_seconds,
                c.seconds_per_step, ratio, step->mfu);
    EXPECT_NEAR(ratio, 1.0, 0.15) << c.model << " " << c.micro_batch << " x " << c.seq_len << ": predicted "
                                  << step->total_seconds << " s, measured " << c.seconds_per_step << " s (gemm "
                                  << step->gemm_seconds << ", attention " << step->attention_seconds << ", memory "
                                  << step->memory_seconds << ", optimizer " << step->optimizer_seconds << ")";
    double sum = 0;
    for (const auto& term : step->terms) sum += term.seconds;
    EXPECT_NEAR(sum, step->total_seconds, 1e-9 * step->total_seconds);
  }
}

TEST(StepModel, SmallSectionRunsAtAboutHalfTheMfuOfAnEightBShapedOne) {
  const DeviceProfile p = H100();
  auto small = PredictDecoderStepFromParts(Qwen25_05B(), 4, 2048, 1, p);
  auto large = PredictDecoderStepFromParts(Llama3_8BLayers8(), 2, 4096, 1, p);
  ASSERT_TRUE(small.ok() && large.ok());
  const double ratio = small->mfu / large->mfu;  // measured: 0.220 / 0.428 = 0.51
  EXPECT_GT(ratio, 0.4);
  EXPECT_LT(ratio, 0.65);
  // The memory-bound share grows as hidden shrinks.
  EXPECT_GT((small->memory_seconds + small->optimizer_seconds) / small->total_seconds,
            (large->memory_seconds + large->optimizer_seconds) / large->total_seconds);
}

TEST(StepModel, TensorParallelEightOnAVitHMlpIsFarLessEfficientThanOne) {
  const DeviceProfile p = H100();
  for (double tokens : {1024.0, 2048.0}) {
    // GPU-seconds of the two MLP GEMMs (fc1 1280 -> 5120, fc2 5120 -> 1280).
    const double tp1 = TrainGemmSeconds(tokens, 1280, 5120, p) + TrainGemmSeconds(tokens, 5120, 1280, p);
    const double tp8 = 8 * (TrainGemmSeconds(tokens, 1280, 640, p) + TrainGemmSeconds(tokens, 640, 1280, p));
    EXPECT_GT(tp8 / tp1, 2.0) << tokens << " tokens";
  }
  // And a decoder section at TP 8 takes more GPU-seconds than at TP 1.
  auto t1 = PredictDecoderStepFromParts(Qwen25_05B(), 1, 2048, 1, p);
  auto t2 = PredictDecoderStepFromParts(Qwen25_05B(), 1, 2048, 2, p);
  ASSERT_TRUE(t1.ok() && t2.ok());
  EXPECT_GT(2 * t2->gemm_seconds, 1.3 * t1->gemm_seconds);
  EXPECT_LT(t2->total_seconds, t1->total_seconds);
}

TEST(StepModel, RejectsWhatItDoesNotModel) {
  const DeviceProfile p = H100();
  plan::ModelDesc moe = Llama32_1B();
  moe.experts = 8;
  moe.experts_per_token = 2;
  EXPECT_FALSE(PredictDecoderStepFromParts(moe, 1, 2048, 1, p).ok());
  EXPECT_FALSE(PredictDecoderStepFromParts(Qwen25_05B(), 1, 2048, 4, p).ok());  // 14 heads
  EXPECT_FALSE(PredictDecoderStepFromParts(Llama32_1B(), 0, 2048, 1, p).ok());
}

// ../shared/research/h100-measurements.md section 2: the same decoder step
// with each of the three fusions and all three, MFU (3 x compiler forward
// FLOPs / time / 989.4 TFLOP/s). The runtime's variants (today's, and "all
// three" once #19 lands) must be within 15% like the six cases of section 1;
// a single fusion on its own (never the runtime's variant) within 20%, the
// issue's bound for shapes the model was not fitted to. Known gap
// (docs/step_model.md): fused AdamW alone saves 17-23 ms in the model where
// the measurement saved 8-9 ms.
TEST(StepModel, TheThreeFusedVariantsWithin15Percent) {
  const DeviceProfile p = H100();
  struct Variant {
    const char* name;
    FusedOps fused;
    double llama_1b_mfu, qwen_05b_mfu;
    double bound;
  };
  const Variant variants[] = {
      {"as on main", {false, false, false}, 0.340, 0.220, 0.15},
      {"+ GQA in SDPA", {true, false, false}, 0.344, 0.220, 0.20},
      {"+ fused RMSNorm", {false, true, false}, 0.391, 0.255, 0.20},
      {"+ fused AdamW", {false, false, true}, 0.357, 0.235, 0.20},
      {"all three", {true, true, true}, 0.416, 0.279, 0.15},
  };
  for (const Variant& v : variants) {
    auto llama = PredictDecoderStepFromParts(Llama32_1B(), 4, 2048, 1, p, v.fused);
    auto qwen = PredictDecoderStepFromParts(Qwen25_05B(), 4, 2048, 1, p, v.fused);
    ASSERT_TRUE(llama.ok() && qwen.ok());
    std::printf("%-16s Llama-1B mfu %.3f (measured %.3f)  Qwen-0.5B mfu %.3f (measured %.3f)\n", v.name, llama->mfu,
                v.llama_1b_mfu, qwen->mfu, v.qwen_05b_mfu);
    EXPECT_NEAR(llama->mfu / v.llama_1b_mfu, 1.0, v.bound) << v.name;
    EXPECT_NEAR(qwen->mfu / v.qwen_05b_mfu, 1.0, v.bound) << v.name;
  }
  // Each fusion only removes work.
  auto base = PredictDecoderStepFromParts(Llama32_1B(), 4, 2048, 1, p);
  auto all = PredictDecoderStepFromParts(Llama32_1B(), 4, 2048, 1, p, {true, true, true});
  ASSERT_TRUE(base.ok() && all.ok());
  EXPECT_LT(all->memory_seconds, base->memory_seconds);
  EXPECT_LT(all->optimizer_seconds, base->optimizer_seconds);
}

// ---- PredictSectionPass: the terms follow what each section runs.

// The seconds of the step term named exactly `name` (-1 when absent).
double ExactTermSeconds(const PassTimes& t, const std::string& name) {
  double seconds = -1;
  for (const StepTerm& x : t.detail.terms) {
    if (x.name == name) seconds = x.seconds;
  }
  return seconds;
}

PassShape Train(double samples, double tokens) {
  PassShape s;
  s.samples = samples;
  s.tokens_per_sample = tokens;
  s.lm_loss = true;
  return s;
}

// Dropping the terms (what the cost model's evaluations do) changes no time.
TEST(SectionPass, WithoutTermsTheTimesAreTheSame) {
  const DeviceProfile p = H100();
  PassShape shape = Train(2, 4096);
  auto with = PredictSectionPass(Llama3_8BLayers8(), shape, p);
  shape.keep_terms = false;
  auto without = PredictSectionPass(Llama3_8BLayers8(), shape, p);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_FALSE(with->detail.terms.empty());
  EXPECT_TRUE(without->detail.terms.empty());
  EXPECT_EQ(with->forward_seconds, without->forward_seconds);
  EXPECT_EQ(with->backward_seconds, without->backward_seconds);
  EXPECT_EQ(with->optimizer_seconds, without->optimizer_seconds);
  EXPECT_EQ(with->detail.total_seconds, without->detail.total_seconds);
}

TEST(SectionPass, ForwardOnlyHasNoBackwardNoOptimizerAndAForwardNoSlowerThanTraining) {
  const DeviceProfile p = H100();
  PassShape fwd = Train(2, 4096);
  fwd.train = false;
  fwd.lm_loss = false;  // a teacher hands its hidden state on
  auto teacher = PredictSectionPass(Llama3_8BLayers8(), fwd, p);
  auto trained = PredictSectionPass(Llama3_8BLayers8(), Train(2, 4096), p);
  ASSERT_TRUE(teacher.ok() && trained.ok());
  EXPECT_EQ(teacher->backward_seconds, 0.0);
  EXPECT_EQ(teacher->optimizer_seconds, 0.0);
  EXPECT_GT(teacher->forward_seconds, 0.0);
  EXPECT_LT(teacher->forward_seconds, trained->forward_seconds);  // no LM head, no loss
  // Training: backward about twice the forward (two GEMMs per projection).
  EXPECT_GT(trained->backward_seconds / trained->forward_seconds, 1.6);
  EXPECT_LT(trained->backward_seconds / trained->forward_seconds, 2.6);
}

// The chunked vocabulary loss (plan/loss_chunk.h): past kLossWholeTokens a
// micro-batch's head and loss forwards run again in backward, and the
// step model charges exactly those; at or below it nothing changes.
TEST(SectionPass, AChunkedLossChargesTheHeadAndLossForwardsAgainInBackward) {
  const DeviceProfile p = H100();
  for (int64_t kd_hidden : {int64_t{0}, int64_t{4096}}) {
    PassShape whole = Train(4, 4096);  // 16384 tokens: eight chunks
    whole.kd_teacher_hidden = kd_hidden;
    whole.loss_in_chunks = false;
    PassShape chunked = whole;
    chunked.loss_in_chunks = true;
    auto w = PredictSectionPass(Llama3_8BLayers8(), whole, p);
    auto c = PredictSectionPass(Llama3_8BLayers8(), chunked, p);
    ASSERT_TRUE(w.ok() && c.ok());
    EXPECT_EQ(ExactTermSeconds(*w, "gemm lm_head (recomputed)"), -1.0);
    const double head_again = ExactTermSeconds(*c, "gemm lm_head (recomputed)");
    ASSERT_GT(head_again, 0.0) << "the chunks' head GEMMs run again";
    double again = head_again + ExactTermSeconds(*c, "memory logits fp32 + cross-entropy (recomputed) backward");
    if (kd_hidden > 0) {
      ASSERT_GT(ExactTermSeconds(*c, "gemm kd teacher_head (frozen) (recomputed)"), 0.0);
      again += ExactTermSeconds(*c, "gemm kd teacher_head (frozen) (recomputed)") +
               ExactTermSeconds(*c, "memory kd KL (recomputed) backward");
    }
    // The chunks' GEMMs run at 2048 rows, the whole one's at 16384: the
    // forwards differ by that rate alone (under 10% here), the backwards
    // by the recomputation too.
    EXPECT_NEAR(c->forward_seconds, w->forward_seconds, 0.1 * w->forward_seconds);
    EXPECT_GT(c->backward_seconds - w->backward_seconds, 0.8 * again);
    EXPECT_LT(c->backward_seconds - w->backward_seconds, 1.2 * again);
    // Up to kLossWholeTokens the loss runs whole: no recomputation.
    PassShape small = Train(1, plan::kLossWholeTokens);
    small.kd_teacher_hidden = kd_hidden;
    auto s = PredictSectionPass(Llama3_8BLayers8(), small, p);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(ExactTermSeconds(*s, "gemm lm_head (recomputed)"), -1.0);
  }
}

// The teacher row forms (plan/teacher_rows.h): top-K or sampled rows move
// the teacher head's GEMM from the student to the teacher (forward only
// there), and the student's KL no longer reads teacher logits.
TEST(SectionPass, TopKAndSampledRowsRunTheTeacherHeadOnTheTeacher) {
  const DeviceProfile p = H100();
  PassShape hidden_student = Train(2, 4096);
  hidden_student.kd_teacher_hidden = 4096;
  PassShape rows_student = Train(2, 4096);
  rows_student.kd_sparse_rows = true;
  auto h = PredictSectionPass(Llama3_8BLayers8(), hidden_student, p);
  auto r = PredictSectionPass(Llama3_8BLayers8(), rows_student, p);
  ASSERT_TRUE(h.ok() && r.ok());
  EXPECT_GT(ExactTermSeconds(*h, "gemm kd teacher_head (frozen)"), 0.0);
  EXPECT_EQ(ExactTermSeconds(*r, "gemm kd teacher_head (frozen)"), -1.0)
      << "a student of top-K rows holds no teacher head";
  EXPECT_GT(ExactTermSeconds(*r, "memory kd KL (rows) forward"), 0.0);
  EXPECT_LT(r->forward_seconds, h->forward_seconds);
  EXPECT_LT(r->backward_seconds, h->backward_seconds);
  for (auto form : {plan::TeacherRowsForm::kTopK, plan::TeacherRowsForm::kSampled}) {
    PassShape plain;
    plain.samples = 2;
    plain.tokens_per_sample = 4096;
    plain.train = false;
    PassShape sending = plain;
    sending.teacher_rows_form = static_cast<int>(form);
    auto a = PredictSectionPass(Llama3_8BLayers8(), plain, p);
    auto b = PredictSectionPass(Llama3_8BLayers8(), sending, p);
    ASSERT_TRUE(a.ok() && b.ok());
    const double head = ExactTermSeconds(*b, "gemm kd teacher head (rows)");
    ASSERT_GT(head, 0.0);
    // 8192 tokens x 4096 x 128256 at the GEMM's rate: the head's FLOPs are
    // the student's old teacher-head GEMM's, now forward only on the teacher.
    EXPECT_NEAR(head, ExactTermSeconds(*h, "gemm kd teacher_head (frozen)"), 0.25 * head);
    EXPECT_GT(b->forward_seconds - a->forward_seconds, head);
    EXPECT_EQ(b->backward_seconds, 0.0);
  }
}

TEST(SectionPass, RecomputeAddsTheBlocksForwardToTheBackward) {
  const DeviceProfile p = H100();
  PassShape r = Train(2, 4096);
  r.recompute = true;
  auto plain = PredictSectionPass(Llama3_8BLayers8(), Train(2, 4096), p);
  auto again = PredictSectionPass(Llama3_8BLayers8(), r, p);
  ASSERT_TRUE(plain.ok() && again.ok());
  EXPECT_DOUBLE_EQ(again->forward_seconds, plain->forward_seconds);
  const double added = again->backward_seconds - plain->backward_seconds;
  EXPECT_GT(added, 0.6 * plain->forward_seconds);  // the blocks: most of the forward (8 layers + a 128K head)
  EXPECT_LT(added, plain->forward_seconds);        // not the LM head and the loss
}

// Selective recomputation: the attention kernels' forward again in
// backward, a small share of the blocks' forward at 4K tokens, more at 32K.
TEST(SectionPass, SelectiveRecomputeAddsTheAttentionForwardToTheBackward) {
  const DeviceProfile p = H100();
  for (int tokens : {4096, 32768}) {
    PassShape s = Train(1, tokens);
    s.recompute_attention_core = true;
    PassShape f = Train(1, tokens);
    f.recompute = true;
    auto plain = PredictSectionPass(Llama3_8BLayers8(), Train(1, tokens), p);
    auto selective = PredictSectionPass(Llama3_8BLayers8(), s, p);
    auto full = PredictSectionPass(Llama3_8BLayers8(), f, p);
    ASSERT_TRUE(plain.ok() && selective.ok() && full.ok());
    EXPECT_DOUBLE_EQ(selective->forward_seconds, plain->forward_seconds);
    const double added = selective->backward_seconds - plain->backward_seconds;
    EXPECT_GT(added, 0.0) << tokens;
    EXPECT_LT(added, full->backward_seconds - plain->backward_seconds) << tokens;
  }
}

TEST(SectionPass, PipelineAndContextParallelismSplitTheWork) {
  const DeviceProfile p = H100();
  auto one = PredictSectionPass(Llama3_8BLayers8(), Train(2, 8192), p);
  PassShape pp2 = Train(2, 8192);
  pp2.pp = 2;
  PassShape cp2 = Train(2, 8192);
  cp2.cp = 2;
  auto staged = PredictSectionPass(Llama3_8BLayers8(), pp2, p);
  auto split = PredictSectionPass(Llama3_8BLayers8(), cp2, p);
  ASSERT_TRUE(one.ok() && staged.ok() && split.ok());
  const double whole = one->forward_seconds + one->backward_seconds;
  const double stage = staged->forward_seconds + staged->backward_seconds;
  EXPECT_LT(stage, 0.75 * whole);  // half the blocks plus the LM head's end
  EXPECT_GT(stage, 0.5 * whole);
  EXPECT_NEAR(staged->optimizer_seconds, one->optimizer_seconds / 2, 1e-12);
  const double cp = split->forward_seconds + split->backward_seconds;
  EXPECT_LT(cp, 0.6 * whole);
  EXPECT_GT(cp, 0.45 * whole);
}

TEST(SectionPass, AVitAttendsWithinEachImageNotAcrossTheSample) {
  const DeviceProfile p = H100();
  const plan::ModelDesc vit = fixtures::LargeVitModel();  // 64 x 64 = 4096 patches per image
  PassShape per_image;
  per_image.samples = 4;
  per_image.tokens_per_sample = 4 * 4096;  // K = 4 images per sample
  per_image.attention_context = 4096;
  PassShape across = per_image;
  across.attention_context = 4 * 4096;
  auto a = PredictSectionPass(vit, per_image, p);
  auto b = PredictSectionPass(vit, across, p);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  EXPECT_NEAR(b->detail.attention_seconds / a->detail.attention_seconds, 4.0, 1.0);
  EXPECT_DOUBLE_EQ(b->detail.gemm_seconds, a->detail.gemm_seconds);
}

// A sliding window shorter than the sequence but longer than half of it
// (Mistral, no band: plan::BandedAttention): the runtime masks the whole
// T x T scores, so the attention core is priced as the square,
// twice the causal triangle's FLOPs (the kernel rate is the same table's);
// within the window, nothing changes. The GEMMs are the same either way.
TEST(SectionPass, ASlidingWindowShorterThanTheSequenceIsPricedAsTheMaskedSquare) {
  const DeviceProfile p = H100();
  const plan::ModelDesc plain = Llama3_8BLayers8();
  plan::ModelDesc windowed = plain;
  windowed.extra[plan::kSlidingWindowKey] = 2048;
  auto a = PredictSectionPass(plain, Train(2, 4096), p);
  auto b = PredictSectionPass(windowed, Train(2, 4096), p);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  EXPECT_NEAR(b->detail.attention_seconds / a->detail.attention_seconds, 2.0, 0.05);
  EXPECT_DOUBLE_EQ(b->detail.gemm_seconds, a->detail.gemm_seconds);
  auto inside = PredictSectionPass(windowed, Train(2, 2048), p);
  auto inside_plain = PredictSectionPass(plain, Train(2, 2048), p);
  ASSERT_TRUE(inside.ok() && inside_plain.ok());
  EXPECT_DOUBLE_EQ(inside->detail.attention_seconds, inside_plain->detail.attention_seconds);
}

// A window of 512 over 4096 tokens runs banded (plan/banded_attention.h):
// chunks of 512 queries over at most 1023 keys, about 959 keys per query
// where the causal triangle has 2048 and the masked square 4096; priced
// per chunk. Under CP the runtime keeps the masked square.
TEST(SectionPass, AWindowFarShorterThanTheSequenceIsPricedAsItsBand) {
  const DeviceProfile p = H100();
  const plan::ModelDesc plain = Llama3_8BLayers8();
  plan::ModelDesc windowed = plain;
  windowed.extra[plan::kSlidingWindowKey] = 512;
  ASSERT_TRUE(plan::BandedAttention(4096, 512));
  EXPECT_NEAR(plan::BandedKeysPerQuery(4096, 512), (512.0 * 512 + 7 * 512.0 * 1023) / 4096, 1e-9);
  auto causal = PredictSectionPass(plain, Train(2, 4096), p);
  auto banded = PredictSectionPass(windowed, Train(2, 4096), p);
  ASSERT_TRUE(causal.ok() && banded.ok()) << banded.status().ToString();
  EXPECT_LT(banded->detail.attention_seconds, 0.75 * causal->detail.attention_seconds);
  EXPECT_DOUBLE_EQ(banded->detail.gemm_seconds, causal->detail.gemm_seconds);
  PassShape cp2 = Train(2, 4096);
  cp2.cp = 2;
  PassShape cp2_plain = cp2;
  auto square = PredictSectionPass(windowed, cp2, p);
  auto causal_cp2 = PredictSectionPass(plain, cp2_plain, p);
  ASSERT_TRUE(square.ok() && causal_cp2.ok()) << square.status().ToString();
  EXPECT_NEAR(square->detail.attention_seconds / causal_cp2->detail.attention_seconds, 2.0, 0.05);
}

// Gemma 3's local and global layers (plan::IsSlidingLayer): with one layer
// of 4 global, 6 of the 8 layers run the masked square and 2 the causal
// triangle, 1.75 times the causal cost; its sandwich and q/k norms, GeGLU
// and scales move more bytes than Llama's block, with the same GEMMs.
TEST(SectionPass, Gemma3PricesItsLocalLayersAsTheMaskedSquareAndItsGlobalOnesCausal) {
  const DeviceProfile p = H100();
  const plan::ModelDesc plain = Llama3_8BLayers8();
  plan::ModelDesc gemma = plain;
  gemma.extra[plan::kGemma3Key] = 1;
  gemma.extra[plan::kQkNormKey] = 1;
  gemma.extra[plan::kSlidingWindowKey] = 2048;
  gemma.extra[plan::kSlidingWindowPatternKey] = 4;
  ASSERT_EQ(plan::SlidingLayerCount(gemma), 6);
  auto a = PredictSectionPass(plain, Train(2, 4096), p);
  auto b = PredictSectionPass(gemma, Train(2, 4096), p);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status().ToString();
  EXPECT_NEAR(b->detail.attention_seconds / a->detail.attention_seconds, 1.75, 0.05);
  EXPECT_DOUBLE_EQ(b->detail.gemm_seconds, a->detail.gemm_seconds);
  EXPECT_GT(b->detail.memory_seconds, a->detail.memory_seconds);
}

TEST(SectionPass, EveryKindIsPricedAndFp32MovesMoreBytes) {
  const DeviceProfile p = H100();
  plan::ModelDesc projector;
  projector.kind = plan::ModelKind::kProjector;
  projector.in_dim = 1280;
  projector.out_dim = 3584;
  const std::vector<std::pair<plan::ModelDesc, double>> models = {
      {Qwen25_05B(), 2048},
      {fixtures::LargeVitModel(), 4096},
      {fixtures::AudioEncoderModel({1280, 32, 20, 5120, 128, 3000}), 1500},
      {projector, 1024}};
  for (const auto& [m, tokens] : models) {
    PassShape bf16 = Train(2, tokens);
    bf16.lm_loss = m.kind == plan::ModelKind::kDecoder;
    PassShape fp32 = bf16;
    fp32.activation_bytes = 4;
    auto a = PredictSectionPass(m, bf16, p);
    auto b = PredictSectionPass(m, fp32, p);
    ASSERT_TRUE(a.ok() && b.ok()) << plan::ModelKindName(m.kind) << ": " << a.status().ToString();
    EXPECT_GT(a->forward_seconds, 0) << plan::ModelKindName(m.kind);
    EXPECT_GT(a->backward_seconds, 0) << plan::ModelKindName(m.kind);
    EXPECT_GT(a->optimizer_seconds, 0) << plan::ModelKindName(m.kind);
    EXPECT_GT(b->detail.memory_seconds, a->detail.memory_seconds) << plan::ModelKindName(m.kind);
    EXPECT_GT(b->optimizer_seconds, a->optimizer_seconds) << plan::ModelKindName(m.kind);
    double sum = 0;
    for (const auto& term : a->detail.terms) sum += term.seconds;
    EXPECT_NEAR(sum, a->detail.total_seconds, 1e-9 * a->detail.total_seconds);
  }
  PassShape bad = Train(2, 2048);
  bad.tp = 3;
  EXPECT_FALSE(PredictSectionPass(Qwen25_05B(), bad, p).ok());
  bad.tp = 1;
  bad.samples = 0;
  EXPECT_FALSE(PredictSectionPass(Qwen25_05B(), bad, p).ok());
}

double TermSeconds(const PassTimes& t, const std::string& name) {
  double s = 0;
  for (const auto& term : t.detail.terms) {
    if (term.name.find(name) != std::string::npos) s += term.seconds;
  }
  return s;
}

// Mixed precision (fp32 masters, bf16 activations: what maestro-worker runs
// on a GPU) runs under autocast: the weights' casts to bf16 once per step
// (with the optimizer: the same for any micro-batch), the norm outputs'
// casts before the linears and the weight gradients' casts back in every
// micro-batch; none of it in pure bf16 or in fp32. Every
// kind pays them, and the terms still sum to the total.
TEST(SectionPass, MixedPrecisionPaysAutocastsCastsOncePerStepAndPerMicroBatch) {
  const DeviceProfile p = H100();
  const std::vector<std::pair<plan::ModelDesc, double>> models = {
      {Qwen25_05B(), 2048}, {fixtures::LargeVitModel(), 4096}, {fixtures::Qwen2VlTowerModel(), 1024}};
  for (const auto& [m, tokens] : models) {
    const std::string kind = plan::ModelKindName(m.kind);
    PassShape pure = Train(2, tokens);
    pure.lm_loss = m.kind == plan::ModelKind::kDecoder;
    PassShape mixed = pure;
    mixed.param_bytes = 4;
    PassShape fp32 = mixed;
    fp32.activation_bytes = 4;
    PassShape mixed_larger = mixed;
    mixed_larger.samples = 4;
    auto a = PredictSectionPass(m, pure, p);
    auto b = PredictSectionPass(m, mixed, p);
    auto c = PredictSectionPass(m, fp32, p);
    auto d = PredictSectionPass(m, mixed_larger, p);
    ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok()) << kind << ": " << b.status().ToString();
    EXPECT_EQ(TermSeconds(*a, "autocast"), 0) << kind;
    EXPECT_EQ(TermSeconds(*c, "autocast"), 0) << kind;
    const double per_step = TermSeconds(*b, "autocast weight casts");
    EXPECT_GT(per_step, 0) << kind;
    EXPECT_DOUBLE_EQ(TermSeconds(*d, "autocast weight casts"), per_step) << kind;
    const double per_micro_batch = TermSeconds(*b, "autocast") - per_step;
    EXPECT_GT(per_micro_batch, 0) << kind;
    // The norm outputs' casts grow with the tokens (or stay at the launch
    // floor); the gradients' casts are one per weight whatever the size.
    EXPECT_GE(TermSeconds(*d, "norm outputs"), TermSeconds(*b, "norm outputs")) << kind;
    EXPECT_GT(TermSeconds(*b, "norm outputs"), 0) << kind;
    EXPECT_DOUBLE_EQ(TermSeconds(*d, "gradient casts to fp32"), TermSeconds(*b, "gradient casts to fp32")) << kind;
    EXPECT_GT(b->forward_seconds, a->forward_seconds) << kind;
    EXPECT_GT(b->backward_seconds, a->backward_seconds) << kind;
    double sum = 0;
    for (const auto& term : b->detail.terms) sum += term.seconds;
    EXPECT_NEAR(sum, b->detail.total_seconds, 1e-9 * b->detail.total_seconds) << kind;
  }
}

// Qwen2-VL's tower rotates q and k in fp32 (2-D RoPE) where the built-in
// ViT adds learned positions: the rotation's kernels are priced for it only.
TEST(SectionPass, Qwen2VlsTowerPaysItsRopeInFp32) {
  const DeviceProfile p = H100();
  PassShape shape = Train(4, 1024);
  shape.lm_loss = false;
  shape.attention_context = 1024;
  plan::ModelDesc builtin = fixtures::Qwen2VlTowerModel();
  builtin.extra[plan::kVitLayoutKey] = plan::kVitLayoutBuiltin;
  // A spec that declares the tower by its flags alone (pos_embed = 0, no
  // vit_layout: specs/qwen2vl_7b_mllm.toml) is the same tower (plan::VitLayout).
  plan::ModelDesc inferred = fixtures::Qwen2VlTowerModel();
  inferred.extra.erase(plan::kVitLayoutKey);
  auto by_flags = PredictSectionPass(inferred, shape, p);
  ASSERT_TRUE(by_flags.ok()) << by_flags.status().ToString();
  EXPECT_GT(TermSeconds(*by_flags, "rope q (fp32)"), 0);
  auto qwen = PredictSectionPass(fixtures::Qwen2VlTowerModel(), shape, p);
  auto plain = PredictSectionPass(builtin, shape, p);
  ASSERT_TRUE(qwen.ok() && plain.ok()) << qwen.status().ToString();
  EXPECT_GT(TermSeconds(*qwen, "rope q (fp32)"), 0);
  EXPECT_GT(TermSeconds(*qwen, "rope k (fp32)"), 0);
  EXPECT_EQ(TermSeconds(*plain, "rope"), 0);
}

}  // namespace
}  // namespace maestro::compiler
