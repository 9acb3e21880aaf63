// SPDX-License-Identifier: Apache-2.0
// runtime/section_work.h: a section's work counted from the real items of
// its samples (no padding), on a hand-built ViT -> projector -> decoder plan,
// sectioned and fused: a sample without an image brings the ViT and the
// projector nothing, the decoder its real tokens; model FLOPs per real
// sequence, x3 when training.
#include "runtime/section_work.h"

#include <gtest/gtest.h>

#include "plan/model_flops.h"

namespace maestro::runtime {
namespace {

plan::SectionPlan Section(const std::string& name, plan::ModelKind kind, plan::SectionMode mode,
                          const std::string& activation) {
  plan::SectionPlan s;
  s.name = name;
  s.mode = mode;
  s.activation = activation;
  s.model.kind = kind;
  return s;
}

// vit: the built-in tower, 8x8 images in 4x4 patches (4 rows per image, no
// class token), trained; proj (8 -> 6), forward-only; llm, a small decoder.
plan::Plan TinyVlm() {
  plan::Plan p;
  auto vit = Section("vit", plan::ModelKind::kVit, plan::SectionMode::kTrain, "image");
  vit.model.hidden = 8;
  vit.model.layers = 1;
  vit.model.heads = 2;
  vit.model.ffn_hidden = 16;
  vit.model.image_size = 8;
  vit.model.patch_size = 4;
  vit.model.channels = 3;
  auto proj = Section("proj", plan::ModelKind::kProjector, plan::SectionMode::kForward, "image");
  proj.model.in_dim = 8;
  proj.model.out_dim = 6;
  auto llm = Section("llm", plan::ModelKind::kDecoder, plan::SectionMode::kTrain, "always");
  llm.model.hidden = 6;
  llm.model.layers = 1;
  llm.model.heads = 2;
  llm.model.kv_heads = 2;
  llm.model.ffn_hidden = 12;
  llm.model.vocab = 20;
  p.sections = {vit, proj, llm};
  plan::EdgePlan a, b;
  a.from = "vit";
  a.to = "proj";
  b.from = "proj";
  b.to = "llm";
  p.edges = {a, b};
  return p;
}

// A text sample of 10 tokens, one with 2 images (7 tokens), one with 1 (3).
std::vector<SampleWorkItems> Samples() {
  std::vector<SampleWorkItems> s(3);
  s[0].real_tokens = 10;
  s[1].real_tokens = 7;
  s[1].media.images = 2;
  s[2].real_tokens = 3;
  s[2].media.images = 1;
  return s;
}

void ExpectTinyVlmWork(const plan::Plan& p, const std::vector<SectionWork>& vit, const std::vector<SectionWork>& proj,
                       const std::vector<SectionWork>& llm) {
  const plan::ModelDesc& vit_model = p.sections[0].fused() ? p.sections[0].components[0].model : p.sections[0].model;
  const plan::ModelDesc& llm_model = p.sections[0].fused() ? p.sections[0].components[2].model : p.sections[2].model;
  ASSERT_EQ(vit.size(), 1u);
  ASSERT_EQ(proj.size(), 1u);
  ASSERT_EQ(llm.size(), 1u);
  EXPECT_EQ(vit[0].tokens, 3 * 4);  // 3 images of 4 patches; the text sample none
  EXPECT_DOUBLE_EQ(vit[0].model_flops, 3 * 3 * plan::SequenceForwardFlops(vit_model, 4));
  EXPECT_EQ(proj[0].tokens, 3 * 4);                                   // the ViT's 4 rows per image
  EXPECT_DOUBLE_EQ(proj[0].model_flops, 12 * 2.0 * (8 * 6 + 6 * 6));  // 2 x its weights per row; forward-only: x1
  EXPECT_EQ(llm[0].tokens, 10 + 7 + 3);
  EXPECT_DOUBLE_EQ(llm[0].model_flops,
                   3 * (plan::SequenceForwardFlops(llm_model, 10) + plan::SequenceForwardFlops(llm_model, 7) +
                        plan::SequenceForwardFlops(llm_model, 3)));
  // Per sequence, not over the padded batch: attention is quadratic in each.
  EXPECT_LT(llm[0].model_flops, 3 * 3 * plan::SequenceForwardFlops(llm_model, 10));
}

TEST(SectionWork, SectionedCountsRealItems) {
  const plan::Plan p = TinyVlm();
  EXPECT_EQ(WorkSlotNames(p), (std::vector<std::string>{"vit", "proj", "llm"}));
  EXPECT_EQ(FirstWorkSlot(p, 2), 2u);
  ExpectTinyVlmWork(p, WorkOfSamples(p, 0, Samples()), WorkOfSamples(p, 1, Samples()), WorkOfSamples(p, 2, Samples()));
}

TEST(SectionWork, FusedCountsEachComponent) {
  const plan::Plan sectioned = TinyVlm();
  plan::Plan p;
  plan::SectionPlan fused = Section("all", plan::ModelKind::kDecoder, plan::SectionMode::kTrain, "always");
  fused.components = sectioned.sections;
  fused.component_edges = sectioned.edges;
  p.sections = {fused};
  EXPECT_EQ(WorkSlotNames(p), (std::vector<std::string>{"vit", "proj", "llm"}));
  EXPECT_EQ(WorkSlotsOf(p, 0), 3u);
  const std::vector<SectionWork> work = WorkOfSamples(p, 0, Samples());
  ASSERT_EQ(work.size(), 3u);
  ExpectTinyVlmWork(p, {work[0]}, {work[1]}, {work[2]});
}

TEST(SectionWork, NoSamplesNoWork) {
  const plan::Plan p = TinyVlm();
  for (int s = 0; s < 3; ++s) {
    const auto work = WorkOfSamples(p, s, {});
    ASSERT_EQ(work.size(), 1u);
    EXPECT_EQ(work[0].tokens, 0);
    EXPECT_EQ(work[0].model_flops, 0);
  }
}

}  // namespace
}  // namespace maestro::runtime
