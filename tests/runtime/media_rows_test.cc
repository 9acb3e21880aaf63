// SPDX-License-Identifier: Apache-2.0
// Variable image counts per sample through ViT -> projector -> decoder
// sections (SectionRunner::Forward, VitRows, SpliceImageRows): samples with 0,
// 1 and 2 images, max_images_per_sample K = 2. The ViT encodes only the real
// images and zero-pads each sample's rows to K images; the decoder splices
// each sample's first count * rows-per-image rows at its placeholder
// positions, in order; the loss equals a direct computation that writes the
// projector's rows into the embeddings by hand; padding rows get exactly zero
// gradient; RowShapeOf carries K images' rows (and CLIP's class token); the
// scheduler's planned cost of a ViT sample follows its own image count. The
// same for audio clips through an audio encoder (AudioRows) spliced at the
// audio placeholder, beside images in one decoder.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <vector>

#include "plan/plan.h"
#include "runtime/cost_model.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "runtime/section_runner.h"
#include "tests/fixtures/models.h"

namespace maestro::runtime {
namespace {

using torch::indexing::Slice;

constexpr int64_t kPlaceholder = 60;
constexpr int64_t kRowsPerImage = 4;  // (8 / 4)^2 patches, no merger, no class token

plan::Plan ImagePlan(int64_t max_images, const std::string& activation) {
  plan::Plan p;
  p.data.seq_len = 16;
  p.data.global_batch = 3;
  p.data.seed = 11;
  p.data.manifest = "train.jsonl";  // not opened here
  p.data.image_token_id = kPlaceholder;
  p.data.max_images_per_sample = max_images;
  {
    auto& vit = plan::AppendSingleNodeSection(p, "vit", 1, 1, 1, 1);
    vit.model = fixtures::VitModel({16, 1, 2, 32, 8, 4, 3});
    vit.activation = activation;
  }
  {
    auto& projector = plan::AppendSingleNodeSection(p, "projector", 1, 1, 1, 1);
    projector.model.kind = plan::ModelKind::kProjector;
    projector.model.in_dim = 16;
    projector.model.out_dim = 32;
    projector.activation = activation;
  }
  {
    auto& llm = plan::AppendSingleNodeSection(p, "llm", 1, 1, 1, 1);
    llm.model = fixtures::DecoderModel({32, 1, 4, 2, 64, 64});
  }
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"vit", "projector"}, {"projector", "llm"}}) {
    plan::EdgePlan e;
    e.from = from;
    e.to = to;
    e.tensor = "image_embeddings";
    e.carries_gradient = true;
    p.edges.push_back(e);
  }
  EXPECT_TRUE(plan::Validate(p).ok()) << plan::Validate(p).ToString();
  plan::FillLayout(p);
  return p;
}

// Three samples: text only; one image at 1..4; two images at 1..4 and 6..9.
MicroBatchData DecoderBatch() {
  MicroBatchData d;
  d.sample_ids = {0, 1, 2};
  auto ids = torch::arange(1, 17, torch::kInt64).repeat({3, 1});  // (3, 16)
  ids.index_put_({1, Slice(1, 5)}, kPlaceholder);
  ids.index_put_({2, Slice(1, 5)}, kPlaceholder);
  ids.index_put_({2, Slice(6, 10)}, kPlaceholder);
  auto targets = torch::full({3, 16}, -100, torch::kInt64);
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t t = 0; t + 1 < 16; ++t) {
      const int64_t cur = ids[b][t].item<int64_t>(), next = ids[b][t + 1].item<int64_t>();
      if (cur != kPlaceholder && next != kPlaceholder) targets[b][t] = next;
    }
  }
  d.input_ids = ids;
  d.target_ids = targets;
  d.image_counts = {0, 1, 2};
  d.answer_positions = {-1, -1, -1};
  d.labels = {-1, -1, -1};
  return d;
}

// The micro-batch of a section that reads images: samples `ids` with their
// counts, images (sum, 3, 8, 8).
MicroBatchData ImageBatch(const std::vector<int64_t>& ids, const std::vector<int64_t>& counts,
                          const torch::Tensor& images) {
  MicroBatchData d;
  d.sample_ids = ids;
  d.image_counts = counts;
  d.images = images;
  d.answer_positions.assign(ids.size(), -1);
  d.labels.assign(ids.size(), -1);
  return d;
}

struct Runners {
  std::unique_ptr<SectionRunner> vit, projector, llm;
};

Runners Build(const plan::Plan& p) {
  Runners r;
  auto vit = SectionRunner::Create(p, 0);
  auto projector = SectionRunner::Create(p, 1);
  auto llm = SectionRunner::Create(p, 2);
  EXPECT_TRUE(vit.ok()) << vit.status().ToString();
  EXPECT_TRUE(projector.ok()) << projector.status().ToString();
  EXPECT_TRUE(llm.ok()) << llm.status().ToString();
  r.vit = std::move(*vit);
  r.projector = std::move(*projector);
  r.llm = std::move(*llm);
  return r;
}

// Mean CE over each sample's targets, summed, / global batch.
torch::Tensor DirectLoss(const torch::Tensor& logits, const torch::Tensor& targets, double global_batch) {
  auto ce = torch::nn::functional::cross_entropy(
      logits.reshape({-1, logits.size(2)}), targets.reshape({-1}),
      torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kNone));
  auto mask = targets.ne(-100).to(torch::kFloat32);
  auto per_sample = (ce.reshape(targets.sizes()) * mask).sum(1) / mask.sum(1).clamp_min(1.0);
  return per_sample.sum() / global_batch;
}

TEST(ImageRows, RowShapesHoldKImagesAndClipsClassToken) {
  const auto p = ImagePlan(3, "image");
  EXPECT_EQ(RowShapeOf(p, 0), (std::vector<int64_t>{3 * kRowsPerImage, 16}));
  EXPECT_EQ(RowShapeOf(p, 1), (std::vector<int64_t>{3 * kRowsPerImage, 32}));
  EXPECT_EQ(RowShapeOf(p, 2), (std::vector<int64_t>{16, 32}));
  auto clip = p;
  clip.sections[0].model.extra["vit_layout"] = 1;  // CLIP: a class token row first
  EXPECT_EQ(RowShapeOf(clip, 0), (std::vector<int64_t>{3 * (kRowsPerImage + 1), 16}));
}

TEST(ImageRows, ZeroOneAndTwoImagesAreEncodedPaddedAndSplicedInOrder) {
  const auto p = ImagePlan(2, "image");
  Runners r = Build(p);
  torch::manual_seed(5);
  const auto images = torch::randn({3, 3, 8, 8});  // sample 1's image, then sample 2's two

  // ViT: only samples 1 and 2 activate it; their rows, K = 2 images each.
  auto vit_out = r.vit->Forward(ImageBatch({1, 2}, {1, 2}, images), {});
  ASSERT_TRUE(vit_out.ok()) << vit_out.status().ToString();
  const auto rows = vit_out->rows;
  ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{2, 2 * kRowsPerImage, 16}));
  torch::Tensor encoded;
  {
    torch::NoGradGuard no_grad;
    encoded = r.vit->module().as<VitEncoderImpl>()->forward(images);  // (3, 4, 16)
  }
  EXPECT_TRUE(torch::allclose(rows[0].narrow(0, 0, kRowsPerImage), encoded[0], 1e-6, 1e-6));
  EXPECT_TRUE(torch::equal(rows[0].narrow(0, kRowsPerImage, kRowsPerImage), torch::zeros({kRowsPerImage, 16})))
      << "the padding of a one-image sample is zero";
  EXPECT_TRUE(torch::allclose(rows[1], torch::cat({encoded[1], encoded[2]}), 1e-6, 1e-6));

  // Projector: maps every row, padding included.
  auto vit_rows = rows.detach().clone().requires_grad_(true);
  auto projected = r.projector->Forward(ImageBatch({1, 2}, {1, 2}, {}), {{0, vit_rows}});
  ASSERT_TRUE(projected.ok()) << projected.status().ToString();
  ASSERT_EQ(projected->rows.sizes(), (std::vector<int64_t>{2, 2 * kRowsPerImage, 32}));

  // Decoder: sample 1 takes its first 4 rows, sample 2 all 8 (4 at 1..4, 4 at 6..9).
  auto projector_rows = projected->rows.detach().clone().requires_grad_(true);
  const MicroBatchData batch = DecoderBatch();
  auto out = r.llm->Forward(batch, {{1, projector_rows}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_TRUE(out->loss.defined());
  auto* lm = r.llm->module().as<DecoderLMImpl>();
  const auto pr = projector_rows.detach();
  auto embeds = lm->Embed(batch.input_ids).detach().clone();
  embeds.index_put_({1, Slice(1, 5)}, pr[0].narrow(0, 0, 4));
  embeds.index_put_({2, Slice(1, 5)}, pr[1].narrow(0, 0, 4));
  embeds.index_put_({2, Slice(6, 10)}, pr[1].narrow(0, 4, 4));
  const auto direct = DirectLoss(lm->Logits(lm->ForwardEmbeds(embeds)), batch.target_ids, 3.0);
  EXPECT_NEAR(out->loss.item<double>(), direct.item<double>(), 1e-6);

  // Gradients: the padding rows of sample 1 get exactly zero, real rows do not.
  out->loss.backward();
  const auto g = projector_rows.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_TRUE(torch::equal(g[0].narrow(0, kRowsPerImage, kRowsPerImage), torch::zeros({kRowsPerImage, 32})));
  EXPECT_GT(g[0].narrow(0, 0, kRowsPerImage).abs().sum().item<double>(), 0.0);
  EXPECT_GT(g[1].abs().min().item<double>(), 0.0) << "every row of the two-image sample is used";
  projected->rows.backward(g);
  const auto gv = vit_rows.grad();
  ASSERT_TRUE(gv.defined());
  EXPECT_TRUE(torch::equal(gv[0].narrow(0, kRowsPerImage, kRowsPerImage), torch::zeros({kRowsPerImage, 16})))
      << "the projector passes no gradient back into padding";
  rows.backward(gv);
  bool any = false;
  for (auto& param : r.vit->Parameters())
    any = any || (param.grad().defined() && param.grad().abs().sum().item<double>() > 0);
  EXPECT_TRUE(any) << "the ViT's weights get the gradient of the real images";
}

TEST(ImageRows, AViTThatRunsForEverySampleGivesATextOnlySampleZeroRowsAndTheSameLoss) {
  torch::manual_seed(6);
  const auto images = torch::randn({3, 3, 8, 8});
  double losses[2] = {0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    const bool always = pass == 1;
    const auto p = ImagePlan(2, always ? "always" : "image");
    Runners r = Build(p);
    const std::vector<int64_t> ids = always ? std::vector<int64_t>{0, 1, 2} : std::vector<int64_t>{1, 2};
    const std::vector<int64_t> counts = always ? std::vector<int64_t>{0, 1, 2} : std::vector<int64_t>{1, 2};
    auto vit_out = r.vit->Forward(ImageBatch(ids, counts, images), {});
    ASSERT_TRUE(vit_out.ok()) << vit_out.status().ToString();
    if (always) {
      ASSERT_EQ(vit_out->rows.size(0), 3);
      EXPECT_TRUE(torch::equal(vit_out->rows[0], torch::zeros_like(vit_out->rows[0])));
    }
    auto projected = r.projector->Forward(ImageBatch(ids, counts, {}), {{0, vit_out->rows}});
    ASSERT_TRUE(projected.ok()) << projected.status().ToString();
    auto out = r.llm->Forward(DecoderBatch(), {{1, projected->rows}});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    losses[pass] = out->loss.item<double>();
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-6);
}

TEST(ImageRows, CountsThatDoNotMatchThePlaceholdersOrKAreErrors) {
  const auto p = ImagePlan(1, "image");
  Runners r = Build(p);
  torch::manual_seed(7);
  // Two images on a sample when K = 1.
  auto too_many = r.vit->Forward(ImageBatch({2}, {2}, torch::randn({2, 3, 8, 8})), {});
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("max_images_per_sample"), std::string::npos)
      << too_many.status().message();
  // Sample 2 has 8 placeholders but one image's rows.
  MicroBatchData batch = DecoderBatch();
  batch.image_counts = {0, 1, 1};
  auto rows = torch::randn({2, kRowsPerImage, 32});
  auto out = r.llm->Forward(batch, {{1, rows}});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("sample 2 has 8 image-token positions"), std::string::npos)
      << out.status().message();
}

// The wavefront scheduler sees a ViT sample's own images: with K = 2 a
// one-image sample costs half a planned sample, a two-image one a whole; the
// projector (which maps every padded row) and the decoder count per sample.
TEST(ImageRows, TheScheduledViTCostFollowsEachSamplesImages) {
  auto p = ImagePlan(2, "image");
  for (auto& s : p.sections) s.cost = {0.5, 2.0, 0.25, 0.0, false};  // fixed, per sample, forward share
  PlannedCostModel costs(p);
  scheduler::Sample one, two;
  one.modalities = two.modalities = 1u;  // "image" is modality 0
  one.modality_tokens[0] = 1 * kRowsPerImage;
  two.modality_tokens[0] = 2 * kRowsPerImage;
  EXPECT_DOUBLE_EQ(costs.ForwardSeconds(0, {&one}), 0.25 * (0.5 + 1.0));
  EXPECT_DOUBLE_EQ(costs.ForwardSeconds(0, {&two}), 0.25 * (0.5 + 2.0));
  EXPECT_DOUBLE_EQ(costs.ForwardSeconds(0, {&one, &two}), 0.25 * (0.5 + 3.0));
  EXPECT_DOUBLE_EQ(costs.BackwardSeconds(0, {&one}), 0.75 * (0.5 + 1.0));
  EXPECT_DOUBLE_EQ(costs.ForwardSeconds(1, {&one}), costs.ForwardSeconds(1, {&two}));
  EXPECT_DOUBLE_EQ(costs.ForwardSeconds(2, {&one, &two}), 0.25 * (0.5 + 4.0));
}

// ---- audio clips ----

constexpr int64_t kAudioPlaceholder = 61;
constexpr int64_t kRowsPerClip = 4;  // ceil(8 frames / 2)

// An audio encoder (8 mel bins x 8 frames) -> projector -> the LLM, with
// K = 2 clips per sample; the LLM also reads a ViT's rows (ImagePlan's) when
// `with_images`.
plan::Plan AudioPlan(bool with_images) {
  plan::Plan p = with_images ? ImagePlan(2, "image") : plan::Plan();
  if (!with_images) {
    p.data.seq_len = 16;
    p.data.global_batch = 3;
    p.data.seed = 11;
    p.data.manifest = "train.jsonl";
  }
  p.data.audio_token_id = kAudioPlaceholder;
  p.data.max_audios_per_sample = 2;
  auto& audio = plan::AppendSingleNodeSection(p, "audio", 1, 1, 1, 1);
  audio.model = fixtures::AudioEncoderModel({16, 1, 2, 32, 8, 8});
  audio.activation = "audio";
  auto& projector = plan::AppendSingleNodeSection(p, "audio_proj", 1, 1, 1, 1);
  projector.model.kind = plan::ModelKind::kProjector;
  projector.model.in_dim = 16;
  projector.model.out_dim = 32;
  projector.activation = "audio";
  if (!with_images) {
    auto& llm = plan::AppendSingleNodeSection(p, "llm", 1, 1, 1, 1);
    llm.model = fixtures::DecoderModel({32, 1, 4, 2, 64, 64});
  }
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"audio", "audio_proj"}, {"audio_proj", "llm"}}) {
    plan::EdgePlan e;
    e.from = from;
    e.to = to;
    e.tensor = "audio_embeddings";
    e.carries_gradient = true;
    p.edges.push_back(e);
  }
  EXPECT_TRUE(plan::Validate(p).ok()) << plan::Validate(p).ToString();
  plan::FillLayout(p);
  return p;
}

TEST(AudioRows, ClipsAreEncodedPaddedAndSplicedAtTheAudioPlaceholderBesideImages) {
  const auto p = AudioPlan(/*with_images=*/true);
  const int audio = p.section_index("audio"), audio_proj = p.section_index("audio_proj");
  const int vit = p.section_index("vit"), proj = p.section_index("projector"), llm = p.section_index("llm");
  EXPECT_EQ(RowShapeOf(p, audio), (std::vector<int64_t>{2 * kRowsPerClip, 16}));
  auto make = [&](int s) {
    auto r = SectionRunner::Create(p, s);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::move(*r);
  };
  auto audio_runner = make(audio), audio_proj_runner = make(audio_proj), llm_runner = make(llm);
  auto vit_runner = make(vit), proj_runner = make(proj);
  torch::manual_seed(8);
  const auto clips = torch::randn({3, 8, 8});  // sample 0's clip, then sample 2's two

  // Sample 0: text and one clip at 10..13; sample 1: one image at 1..4;
  // sample 2: one image at 1..4 and two clips at 6..9 and 10..13 (back to
  // back: one run of two clips' placeholders).
  MicroBatchData batch = DecoderBatch();
  auto ids = torch::arange(1, 17, torch::kInt64).repeat({3, 1});
  ids.index_put_({0, Slice(10, 14)}, kAudioPlaceholder);
  ids.index_put_({1, Slice(1, 5)}, kPlaceholder);
  ids.index_put_({2, Slice(1, 5)}, kPlaceholder);
  ids.index_put_({2, Slice(6, 10)}, kAudioPlaceholder);
  ids.index_put_({2, Slice(10, 14)}, kAudioPlaceholder);
  batch.input_ids = ids;
  const auto next = torch::roll(ids, -1, 1);
  const auto placeholder = [](const torch::Tensor& t) {
    return t.eq(kPlaceholder).logical_or(t.eq(kAudioPlaceholder));
  };
  batch.target_ids = torch::where(placeholder(ids).logical_or(placeholder(next)), torch::full_like(ids, -100), next);
  batch.target_ids.index_put_({Slice(), 15}, -100);
  batch.image_counts = {0, 1, 1};
  batch.audio_counts = {1, 0, 2};

  MicroBatchData clip_batch = ImageBatch({0, 2}, {0, 1}, {});
  clip_batch.audio_counts = {1, 2};
  clip_batch.audios = clips;
  auto audio_out = audio_runner->Forward(clip_batch, {});
  ASSERT_TRUE(audio_out.ok()) << audio_out.status().ToString();
  const auto rows = audio_out->rows;
  ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{2, 2 * kRowsPerClip, 16}));
  torch::Tensor encoded;
  {
    torch::NoGradGuard no_grad;
    encoded = audio_runner->module().as<AudioEncoderImpl>()->forward(clips);  // (3, 4, 16)
  }
  EXPECT_TRUE(torch::allclose(rows[0].narrow(0, 0, kRowsPerClip), encoded[0], 1e-6, 1e-6));
  EXPECT_TRUE(torch::equal(rows[0].narrow(0, kRowsPerClip, kRowsPerClip), torch::zeros({kRowsPerClip, 16})));
  EXPECT_TRUE(torch::allclose(rows[1], torch::cat({encoded[1], encoded[2]}), 1e-6, 1e-6));
  auto audio_projected = audio_proj_runner->Forward(clip_batch, {{0, rows.detach()}});
  ASSERT_TRUE(audio_projected.ok()) << audio_projected.status().ToString();

  const auto images = torch::randn({2, 3, 8, 8});
  auto vit_out = vit_runner->Forward(ImageBatch({1, 2}, {1, 1}, images), {});
  ASSERT_TRUE(vit_out.ok()) << vit_out.status().ToString();
  auto image_projected = proj_runner->Forward(ImageBatch({1, 2}, {1, 1}, {}), {{0, vit_out->rows.detach()}});
  ASSERT_TRUE(image_projected.ok()) << image_projected.status().ToString();

  // The LLM's in-edges: vit's projector's (edge 1), the audio projector's (edge 3).
  auto audio_rows = audio_projected->rows.detach().clone().requires_grad_(true);
  const auto image_rows = image_projected->rows.detach();
  auto out = llm_runner->Forward(batch, {{1, image_rows}, {3, audio_rows}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  auto* lm = llm_runner->module().as<DecoderLMImpl>();
  const auto ar = audio_rows.detach();
  auto embeds = lm->Embed(batch.input_ids).detach().clone();
  embeds.index_put_({0, Slice(10, 14)}, ar[0].narrow(0, 0, 4));
  embeds.index_put_({1, Slice(1, 5)}, image_rows[0].narrow(0, 0, 4));
  embeds.index_put_({2, Slice(1, 5)}, image_rows[1].narrow(0, 0, 4));
  embeds.index_put_({2, Slice(6, 10)}, ar[1].narrow(0, 0, 4));
  embeds.index_put_({2, Slice(10, 14)}, ar[1].narrow(0, 4, 4));
  const auto direct = DirectLoss(lm->Logits(lm->ForwardEmbeds(embeds)), batch.target_ids, 3.0);
  EXPECT_NEAR(out->loss.item<double>(), direct.item<double>(), 1e-6);
  out->loss.backward();
  const auto g = audio_rows.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_TRUE(torch::equal(g[0].narrow(0, kRowsPerClip, kRowsPerClip), torch::zeros({kRowsPerClip, 32})))
      << "the padding of a one-clip sample gets no gradient";
  EXPECT_GT(g[1].abs().min().item<double>(), 0.0) << "every row of the two-clip sample is used";

  // A sample whose audio placeholders do not match its clips is an error
  // naming it.
  batch.audio_counts = {1, 0, 1};
  auto wrong = llm_runner->Forward(batch, {{1, image_rows}, {3, audio_rows.detach()}});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("sample 2 has 8 audio-token positions"), std::string::npos)
      << wrong.status().message();
}

// Only the sections that encode media read it (MediaPartsOf, LoadMicroBatch
// with parts): a ViT's samples come with pixels, an audio encoder's with
// features; the projector's and the LLM's come through
// SampleSource::LoadParts as layouts (counts, native grids), no pixels and
// no features, and the full Load is never called for them.
class CountingSource : public datasets::SampleSource {
 public:
  int64_t NumSamples(datasets::Split) const override { return 2; }
  StatusOr<datasets::SampleRecord> Load(datasets::Split, int64_t id) const override {
    ++full;
    return Make(id, datasets::MediaParts());
  }
  StatusOr<datasets::SampleRecord> LoadParts(datasets::Split, int64_t id,
                                             const datasets::MediaParts& parts) const override {
    ++partial;
    return Make(id, parts);
  }
  datasets::SampleTokens TokensOf(int64_t) const override { return {}; }
  mutable int full = 0, partial = 0;

 private:
  // Sample id: id + 1 native images of 1 x 2 x (2 + id) patches of 3
  // values, one clip of 2 x 3 features.
  static datasets::SampleRecord Make(int64_t id, const datasets::MediaParts& parts) {
    datasets::SampleRecord r;
    r.id = id;
    r.input_ids.assign(16, 1);
    r.target_ids.assign(16, -100);
    for (int64_t k = 0; k <= id; ++k) {
      datasets::SampleImage image;
      image.channels = 3;
      image.grid_t = 1;
      image.grid_h = 2;
      image.grid_w = 2 + id;
      image.patch_dim = 3;
      if (parts.pixels) image.pixels.assign(static_cast<size_t>(2 * (2 + id) * 3), 0.5F);
      r.images.push_back(image);
    }
    datasets::SampleAudio clip;
    clip.mel_bins = 2;
    clip.frames = 3;
    if (parts.audio_features) clip.features.assign(6, 0.25F);
    r.audios.push_back(clip);
    return r;
  }
};

TEST(MediaParts, OnlyTheSectionsThatEncodeMediaReadIt) {
  const plan::Plan p = ImagePlan(2, "image");
  EXPECT_TRUE(MediaPartsOf(p.sections[0]).pixels);  // the ViT
  EXPECT_FALSE(MediaPartsOf(p.sections[0]).audio_features);
  for (size_t s : {size_t{1}, size_t{2}}) {  // the projector, the LLM
    EXPECT_FALSE(MediaPartsOf(p.sections[s]).pixels) << p.sections[s].name;
    EXPECT_FALSE(MediaPartsOf(p.sections[s]).audio_features) << p.sections[s].name;
  }
  plan::SectionPlan audio;
  audio.model.kind = plan::ModelKind::kAudioEncoder;
  EXPECT_TRUE(MediaPartsOf(audio).audio_features);
  EXPECT_FALSE(MediaPartsOf(audio).pixels);
  plan::SectionPlan fused;
  fused.components = {p.sections[0], p.sections[2]};  // a ViT fused with its LLM reads pixels
  EXPECT_TRUE(MediaPartsOf(fused).pixels);

  const CountingSource source;
  auto layout = LoadMicroBatch(source, {0, 1}, datasets::Split::kTrain, MediaPartsOf(p.sections[2]));
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(source.full, 0);
  EXPECT_EQ(source.partial, 2);
  EXPECT_FALSE(layout->images.defined());
  EXPECT_FALSE(layout->audios.defined());
  EXPECT_EQ(layout->image_counts, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(layout->audio_counts, (std::vector<int64_t>{1, 1}));
  ASSERT_EQ(layout->image_grids.size(), 3u);
  EXPECT_EQ(layout->image_grids[2].w, 3);
  EXPECT_EQ(SelectSamples(*layout, {1}).image_grids.size(), 2u);
  EXPECT_FALSE(SelectSamples(*layout, {1}).images.defined());

  auto pixels = LoadMicroBatch(source, {0, 1}, datasets::Split::kTrain, MediaPartsOf(p.sections[0]));
  ASSERT_TRUE(pixels.ok()) << pixels.status().ToString();
  EXPECT_EQ(source.partial, 4);  // pixels without features: still a partial load
  ASSERT_TRUE(pixels->images.defined());
  EXPECT_EQ(pixels->images.sizes(), (std::vector<int64_t>{4 + 2 * 6, 3}));
  EXPECT_FALSE(pixels->audios.defined());
  auto all = LoadMicroBatch(source, {0, 1});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(source.full, 2);
  EXPECT_EQ(all->audios.sizes(), (std::vector<int64_t>{2, 2, 3}));
}

}  // namespace
}  // namespace maestro::runtime
