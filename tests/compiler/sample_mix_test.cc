// SPDX-License-Identifier: Apache-2.0
// What a sample of a modality holds ([[data.modality.mix]], compiler/sample_mix.h)
// and what the planner makes of it: each kind's own patches and attention
// sequences (sizes through transformers' smart_resize, worked out by hand in
// the comments), the mean the analytic model prices, the peak the memory
// model prices, the draws the simulation makes, and the spec's mistakes.
#include "compiler/sample_mix.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "compiler/step_simulation.h"
#include "compiler/workload_builder.h"
#include "plan/model_flops.h"
#include "tests/fixtures/specs.h"

namespace maestro::compiler {
namespace {

// The fixture's ViT as a Qwen2-VL tower (2-D RoPE, a 2x2 merger) reading a
// manifest at native resolution, at 16K tokens; `modality` replaces the
// fixture's image modality (a quarter of the samples, 256 tokens).
std::string NativeSpec(const std::string& modality) {
  std::string text = fixtures::WithKeys(fixtures::TwoSectionSpec(), {{"models.vit", "pos_embed", "false"},
                                                                     {"models.vit", "cls_token", "false"},
                                                                     {"models.vit", "patch_bias", "false"},
                                                                     {"models.vit", "final_norm", "false"},
                                                                     {"models.vit", "temporal_patch", "2"},
                                                                     {"models.vit", "spatial_merge", "2"},
                                                                     {"models.vit", "out_dim", "2048"},
                                                                     {"data", "seq_len", "16384"}});
  text = fixtures::WithLines(text, "data",
                             "manifest = \"m.jsonl\"\nimage_token_id = 7\nvideo_token_id = 8\n"
                             "image_resolution = \"native\"\nmax_images_per_sample = 4\n");
  const std::string old = fixtures::ModalityToml("image", "0.25", 256);
  const size_t at = text.find(old);
  if (at == std::string::npos) throw std::logic_error("the fixture's modality moved");
  return text.replace(at, old.size(), modality);
}

// Half the samples carry: one 1080p frame (52 x 94 patches after
// smart_resize: 728 x 1316 pixels), four 448 x 448 images (32 x 32 each),
// or a 64-frame 360p video (32 temporal patches of 26 x 46: 364 x 644).
const char* kMix = R"([[data.modality]]
name = "image"
fraction = 0.5
[[data.modality.mix]]
weight = 2
height = 1080
width = 1920
[[data.modality.mix]]
weight = 1
count = 4
height = 448
width = 448
[[data.modality.mix]]
weight = 1
frames = 64
height = 360
width = 640
)";

Spec ParsedOrDie(const std::string& text) {
  auto s = ParseSpecString(text, "spec.toml", ".");
  if (!s.ok()) throw std::runtime_error(s.status().ToString());
  return *s;
}

std::string ErrorOf(const std::string& text) {
  auto s = ParseSpecString(text, "spec.toml", ".");
  return s.ok() ? "" : s.status().message();
}

TEST(SampleMix, EachKindCostsItsOwnPatchesAndAttentionSequences) {
  const Spec spec = ParsedOrDie(NativeSpec(kMix));
  auto w = ModalityMixWork(spec, "image");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ASSERT_EQ(w->shapes.size(), 3u);
  const plan::ModelDesc& vit = spec.FindModel("vit")->desc;
  const SampleShape& frame = w->shapes[0];
  EXPECT_EQ(frame.encoder_tokens, 52 * 94);
  EXPECT_EQ(frame.llm_tokens, 52 * 94 / 4);
  EXPECT_EQ(frame.longest_sequence, 52 * 94);
  EXPECT_DOUBLE_EQ(frame.forward_flops, plan::SequenceForwardFlops(vit, 52 * 94));
  const SampleShape& four = w->shapes[1];
  EXPECT_EQ(four.encoder_tokens, 4 * 32 * 32);
  EXPECT_EQ(four.llm_tokens, 4 * 32 * 32 / 4);
  EXPECT_EQ(four.longest_sequence, 32 * 32);
  // Four images attend each within itself: cheaper than one of their size.
  EXPECT_DOUBLE_EQ(four.forward_flops, 4 * plan::SequenceForwardFlops(vit, 32 * 32));
  EXPECT_LT(four.forward_flops, plan::SequenceForwardFlops(vit, 4 * 32 * 32));
  const SampleShape& video = w->shapes[2];
  EXPECT_EQ(video.encoder_tokens, 32 * 26 * 46);
  EXPECT_EQ(video.llm_tokens, 32 * 26 * 46 / 4);
  EXPECT_EQ(video.longest_sequence, 26 * 46);  // one sequence per temporal patch (HF's cu_seqlens)
  EXPECT_DOUBLE_EQ(video.forward_flops, 32 * plan::SequenceForwardFlops(vit, 26 * 46));

  // The mean the analytic model prices and the peak the memory model does.
  const double p[] = {0.5, 0.25, 0.25};
  double tokens = 0, llm = 0, flops = 0, mean_work = 0;
  for (size_t i = 0; i < 3; ++i) {
    tokens += p[i] * static_cast<double>(w->shapes[i].encoder_tokens);
    llm += p[i] * static_cast<double>(w->shapes[i].llm_tokens);
    flops += p[i] * w->shapes[i].forward_flops;
    mean_work += p[i] * w->relative_work[i];
  }
  EXPECT_DOUBLE_EQ(w->mean_encoder_tokens, tokens);
  EXPECT_DOUBLE_EQ(w->mean_llm_tokens, llm);
  EXPECT_DOUBLE_EQ(w->mean_forward_flops, flops);
  EXPECT_NEAR(mean_work, 1.0, 1e-12);
  EXPECT_NEAR(w->relative_work[2] / w->relative_work[1], video.forward_flops / four.forward_flops, 1e-12);
  EXPECT_EQ(w->peak_encoder_tokens, video.encoder_tokens);
  EXPECT_EQ(w->peak_sequence, frame.longest_sequence);
  EXPECT_DOUBLE_EQ(w->cdf.back(), 1.0);
  EXPECT_DOUBLE_EQ(w->cdf[0], 0.5);
  // The context at which the mean tokens cost the mean FLOPs.
  EXPECT_NEAR(tokens * plan::ForwardFlopsPerToken(vit, static_cast<double>(w->attention_context)) / flops, 1.0, 1e-3);
}

TEST(SampleMix, DrawsFollowTheWeightsAndArePureFunctions) {
  const std::vector<double> cdf = {0.5, 0.75, 1.0};
  int counts[3] = {0, 0, 0};
  int differ = 0;
  constexpr int kDraws = 200000;
  for (uint64_t id = 0; id < kDraws; ++id) {
    const int e = DrawMixEntry(cdf, 42, id, 0);
    ASSERT_GE(e, 0);
    ASSERT_LT(e, 3);
    ++counts[e];
    EXPECT_EQ(e, DrawMixEntry(cdf, 42, id, 0));
    differ += e != DrawMixEntry(cdf, 42, id, 1) ? 1 : 0;
  }
  EXPECT_NEAR(counts[0] / static_cast<double>(kDraws), 0.5, 0.005);
  EXPECT_NEAR(counts[1] / static_cast<double>(kDraws), 0.25, 0.005);
  EXPECT_NEAR(counts[2] / static_cast<double>(kDraws), 0.25, 0.005);
  // Another modality draws independently: they differ on about 1 - (1/4 + 1/16 + 1/16).
  EXPECT_NEAR(differ / static_cast<double>(kDraws), 0.625, 0.01);
  EXPECT_EQ(DrawMixEntry({}, 1, 2, 0), 0);
  EXPECT_EQ(DrawMixEntry({1.0}, 1, 2, 0), 0);
}

TEST(SampleMix, ThePlanPricesTheMeanTheMemoryThePeakAndTheSimulationDraws) {
  const Spec spec = ParsedOrDie(NativeSpec(kMix));
  auto w = ModalityMixWork(spec, "image");
  ASSERT_TRUE(w.ok());
  // The modality's tokens became the mix's mean placeholders.
  ASSERT_EQ(spec.data.modalities.size(), 1u);
  EXPECT_EQ(spec.data.modalities[0].tokens, std::llround(w->mean_llm_tokens));
  auto compiled = Compile(spec, CompileOptions{});
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const SectionWork& vit = compiled->workload.sections[0];
  ASSERT_EQ(vit.name, "vit");
  const auto mean = static_cast<int64_t>(std::ceil(w->mean_encoder_tokens));
  EXPECT_GE(vit.tokens, mean);
  EXPECT_LT(vit.tokens, mean + 64);
  EXPECT_EQ(vit.tokens % 64, 0);
  EXPECT_EQ(vit.attention_context, w->attention_context);
  EXPECT_EQ(vit.peak_tokens, w->peak_encoder_tokens);
  EXPECT_EQ(vit.peak_context, w->peak_sequence);
  EXPECT_EQ(vit.mix_work, w->relative_work);
  EXPECT_EQ(compiled->plan.data.modalities[0].tokens, spec.data.modalities[0].tokens);
  // The report says what was priced.
  EXPECT_NE(compiled->report.find(fmt::format("mix: section 'vit' reads 3 kinds of sample ([[data.modality.mix]]): "
                                              "priced at their mean, {} tokens at an attention context of {}; memory "
                                              "at the largest, {} tokens (its longest attention sequence {})",
                                              vit.tokens, vit.attention_context, vit.peak_tokens, vit.peak_context)),
            std::string::npos)
      << compiled->report;
  const auto js = nlohmann::json::parse(compiled->report_json);
  EXPECT_EQ(js["sections"][0]["mix"]["kinds"].get<int>(), 3);
  EXPECT_EQ(js["sections"][0]["mix"]["peak_tokens_per_sample"].get<int64_t>(), vit.peak_tokens);
  EXPECT_FALSE(js["sections"][1].contains("mix"));

  // A micro-batch of the peak sample needs more memory than one of the mean.
  const CostModel model(DevicesOf(spec), spec.data.global_batch);
  SectionWork mean_only = vit;
  mean_only.peak_tokens = 0;
  mean_only.peak_context = 0;
  const plan::ParallelConfig c = compiled->assignment.sections[0].cost.config;
  EXPECT_GT(model.EvaluateWith(vit, c, 1, c.micro_batch).memory.total(),
            model.EvaluateWith(mean_only, c, 1, c.micro_batch).memory.total());

  // The simulation's samples carry their drawn kind's placeholders.
  SimulationSettings s;
  s.seed = spec.data.seed;
  s.seq_len = spec.data.seq_len;
  s.modalities = spec.data.modalities;
  s.draws = DrawsOf(spec);
  ASSERT_EQ(s.draws.size(), 1u);
  const auto batch = SampleGlobalBatch(4000, s, 0, {"image"});
  int videos = 0, carriers = 0;
  for (const auto& x : batch) {
    if (!x.Has(0)) continue;
    ++carriers;
    const int e = DrawMixEntry(s.draws[0].cdf, s.seed, x.id, 0);
    EXPECT_EQ(x.modality_tokens[0], w->shapes[static_cast<size_t>(e)].llm_tokens);
    videos += e == 2 ? 1 : 0;
  }
  EXPECT_NEAR(carriers / 4000.0, 0.5, 0.03);
  EXPECT_NEAR(videos / static_cast<double>(carriers), 0.25, 0.03);
}

TEST(SampleMix, WavefrontOrdersAVideoMixNoWorseThanFifo) {
  const Spec spec = ParsedOrDie(NativeSpec(kMix));
  auto compiled = Compile(spec, CompileOptions{});
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  const CostModel model(DevicesOf(spec), spec.data.global_batch);
  SimulationSettings s;
  s.seed = spec.data.seed;
  s.seq_len = spec.data.seq_len;
  s.modalities = spec.data.modalities;
  s.draws = DrawsOf(spec);
  s.batches = 8;
  const SimulatedStep wavefront =
      SimulateSectioned(model, compiled->workload, compiled->assignment, s, scheduler::Policy::kWavefront);
  const SimulatedStep fifo =
      SimulateSectioned(model, compiled->workload, compiled->assignment, s, scheduler::Policy::kFifo);
  ASSERT_TRUE(wavefront.ok) << wavefront.error;
  ASSERT_TRUE(fifo.ok) << fifo.error;
  EXPECT_LE(wavefront.step_seconds, fifo.step_seconds * (1 + 1e-9));
  // Drawn kinds make batches differ: the spread is the mix's, not zero.
  EXPECT_LT(wavefront.min_step_seconds, wavefront.max_step_seconds);
}

TEST(SampleMix, MistakesAreNamedWithTheirFix) {
  const auto has = [](const std::string& e, const std::vector<std::string>& words) {
    for (const auto& w : words) EXPECT_NE(e.find(w), std::string::npos) << "missing '" << w << "' in: " << e;
  };
  const std::string head = "[[data.modality]]\nname = \"image\"\nfraction = 0.5\n";
  has(ErrorOf(NativeSpec(head + "tokens = 256\n[[data.modality.mix]]\ncount = 2\n")), {"drop tokens"});
  has(ErrorOf(NativeSpec(head + "[[data.modality.mix]]\ncount = 2\nframes = 3000\n")),
      {"spec.toml:", "data.seq_len = 16384"});
  has(ErrorOf(NativeSpec(head + "[[data.modality.mix]]\nheight = 20\nwidth = 20000\n")), {"aspect ratio"});
  has(ErrorOf(NativeSpec(head + "[[data.modality.mix]]\nweight = 0\n")), {"weight"});
  has(ErrorOf(NativeSpec(head + "[[data.modality.mix]]\nframe = 2\n")), {"frame"});
  // A fixed-size ViT reads every image at one size, at most K a sample.
  std::string fixed = fixtures::TwoSectionSpec();
  fixed = fixtures::WithLines(fixed, "data", "manifest = \"m.jsonl\"\nimage_token_id = 7\nmax_images_per_sample = 3\n");
  const std::string old = fixtures::ModalityToml("image", "0.25", 256);
  auto fixed_with = [&](const std::string& m) {
    std::string t = fixed;
    return t.replace(t.find(old), old.size(), m);
  };
  has(ErrorOf(fixed_with(head + "[[data.modality.mix]]\nheight = 448\n")), {"image_resolution = \"native\""});
  has(ErrorOf(fixed_with(head + "[[data.modality.mix]]\ncount = 4\n")), {"count = 4", "max_images_per_sample"});
  auto ok = ParseSpecString(fixed_with(head + "[[data.modality.mix]]\ncount = 3\nweight = 1\n[[data.modality.mix]]\n"
                                              "count = 1\nweight = 3\n"),
                            "spec.toml", ".");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto w = ModalityMixWork(*ok, "image");
  ASSERT_TRUE(w.ok());
  EXPECT_DOUBLE_EQ(w->mean_encoder_tokens, 1.5 * 256);  // 224 / 14 = 16: 256 patches an image
  // A mix needs an encoder that reads the modality.
  has(ErrorOf(NativeSpec(std::string(kMix) + "[[data.modality]]\nname = \"audio\"\nfraction = 0.1\n"
                                             "[[data.modality.mix]]\ncount = 2\n")),
      {"modality 'audio'", "no ViT or audio-encoder section"});
}

}  // namespace
}  // namespace maestro::compiler
