// SPDX-License-Identifier: Apache-2.0
// plan/mrope.h: the Qwen2-VL family's 3-D positions (get_rope_index's rule,
// worked by hand below), each frequency's position row (chunked and
// interleaved), the checks, and which vision section feeds a decoder.
#include "plan/mrope.h"

#include <gtest/gtest.h>

#include <vector>

#include "plan/model_desc.h"

namespace maestro::plan {
namespace {

constexpr int64_t kImage = 9;  // the placeholder id in these samples

std::vector<int64_t> Positions(const std::vector<int64_t>& ids, const std::vector<LlmGrid>& images) {
  std::vector<int64_t> out(3 * ids.size(), -1);
  const Status st = MropePositions(ids.data(), static_cast<int64_t>(ids.size()), kImage, images, out.data());
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

TEST(MropePositions, TextOnlyIsOneDimensional) {
  const auto p = Positions({1, 2, 3, 4}, {});
  EXPECT_EQ(p, (std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
}

// Two text tokens, a 1x2x2 image, two text tokens: the image starts at 2 on
// every row, its rows (h) and columns (w) add to it, and the text after it
// continues from 2 + max(1, 2, 2) = 4 (get_rope_index: max + 1).
TEST(MropePositions, ImageTakesItsGridThenTextContinuesPastItsLargest) {
  const auto p = Positions({1, 2, kImage, kImage, kImage, kImage, 3, 4}, {{1, 2, 2}});
  EXPECT_EQ(p, (std::vector<int64_t>{0, 1, 2, 2, 2, 2, 4, 5,     // time
                                     0, 1, 2, 2, 3, 3, 4, 5,     // height
                                     0, 1, 2, 3, 2, 3, 4, 5}));  // width
}

// Two images back to back (no text between, so one run of placeholders) are
// told apart by their grids: the second starts one past the first's largest
// position. A video of 2 temporal patches advances time.
TEST(MropePositions, AdjacentImagesAndVideoFrames) {
  const auto p = Positions({kImage, kImage, kImage, kImage, kImage, kImage, 5}, {{1, 1, 2}, {2, 1, 2}});
  EXPECT_EQ(p, (std::vector<int64_t>{0, 0, 2, 2, 3, 3, 4,     // time: image 1 at 0; video base 2, frames 2, 3
                                     0, 0, 2, 2, 2, 2, 4,     // height
                                     0, 1, 2, 3, 2, 3, 4}));  // width; text from 2 + max(2, 1, 2) = 4
}

TEST(MropePositions, RefusesAnImageThatIsNotAllPlaceholders) {
  std::vector<int64_t> ids = {1, kImage, kImage, 2, kImage};
  std::vector<int64_t> out(15);
  Status st = MropePositions(ids.data(), 5, kImage, {{1, 2, 2}}, out.data());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("token 3 is 2"), std::string::npos) << st.message();
  st = MropePositions(ids.data(), 5, kImage, {{1, 1, 2}, {1, 2, 2}}, out.data());
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("past the sample's 5 tokens"), std::string::npos) << st.message();
}

TEST(MropeFrequencyAxes, ChunkedAsQwen2VlSplitsTheHalves) {
  Mrope m;
  m.section[0] = 2, m.section[1] = 3, m.section[2] = 3;
  EXPECT_EQ(MropeFrequencyAxes(m, 8), (std::vector<int>{0, 0, 1, 1, 1, 2, 2, 2}));
}

// Qwen3-VL's apply_interleaved_mrope with mrope_section [4, 2, 2] over 8
// frequencies: h at 1, 4 (j % 3 == 1, j < 6), w at 2, 5 (j % 3 == 2, j < 6),
// time elsewhere (7 % 3 == 1 but 7 >= 6).
TEST(MropeFrequencyAxes, InterleavedAsQwen3Vl) {
  Mrope m;
  m.section[0] = 4, m.section[1] = 2, m.section[2] = 2;
  m.interleaved = true;
  EXPECT_EQ(MropeFrequencyAxes(m, 8), (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 0}));
}

ModelDesc MropeDecoder(int64_t t, int64_t h, int64_t w) {
  ModelDesc d;
  d.kind = ModelKind::kDecoder;
  d.hidden = 64, d.layers = 1, d.heads = 4, d.kv_heads = 4, d.ffn_hidden = 64, d.vocab = 16;  // head_dim 16
  d.extra[kMropeSectionTKey] = static_cast<double>(t);
  d.extra[kMropeSectionHKey] = static_cast<double>(h);
  d.extra[kMropeSectionWKey] = static_cast<double>(w);
  return d;
}

TEST(CheckMrope, SectionsMustSumToHalfTheHead) {
  EXPECT_TRUE(ValidateModelDesc(MropeDecoder(2, 3, 3)).ok());
  EXPECT_TRUE(CheckMrope(MropeDecoder(2, 3, 3), "section 'llm'").ok());
  const Status bad = CheckMrope(MropeDecoder(2, 3, 4), "section 'llm'");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("sum to head_dim / 2 = 8"), std::string::npos) << bad.message();
  ModelDesc interleaved = MropeDecoder(2, 3, 3);
  interleaved.extra[kMropeInterleavedKey] = 1;
  EXPECT_FALSE(CheckMrope(interleaved, "x").ok());  // h = 3 > t = 2
  EXPECT_FALSE(MropeOf(MropeDecoder(0, 0, 0)).has_value());
}

TEST(MropeImageGrid, MergedPatchesOfAStillImage) {
  ModelDesc vit;
  vit.kind = ModelKind::kVit;
  vit.image_size = 56, vit.patch_size = 14;
  vit.extra[kVitLayoutKey] = kVitLayoutQwen2Vl;
  vit.extra["spatial_merge"] = 2;
  auto g = MropeImageGrid(vit);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->t, 1);
  EXPECT_EQ(g->h, 2);
  EXPECT_EQ(g->w, 2);
  vit.extra[kVitLayoutKey] = kVitLayoutClip;  // a class token first: no grid
  EXPECT_FALSE(MropeImageGrid(vit).ok());
}

TEST(MropeVisionSection, FollowsProjectorsUpToTheVit) {
  Plan plan;
  plan.sections.resize(4);
  plan.sections[0].name = "vit";
  plan.sections[0].model.kind = ModelKind::kVit;
  plan.sections[1].name = "proj";
  plan.sections[1].model.kind = ModelKind::kProjector;
  plan.sections[2].name = "teacher";
  plan.sections[2].model.kind = ModelKind::kDecoder;
  plan.sections[3].name = "llm";
  plan.sections[3].model.kind = ModelKind::kDecoder;
  plan.edges.resize(3);
  plan.edges[0].from = "teacher", plan.edges[0].to = "llm";
  plan.edges[1].from = "vit", plan.edges[1].to = "proj";
  plan.edges[2].from = "proj", plan.edges[2].to = "llm";
  EXPECT_EQ(MropeVisionSection(plan, plan.sections[3]), &plan.sections[0]);
  EXPECT_EQ(MropeVisionSection(plan, plan.sections[2]), nullptr);
}

}  // namespace
}  // namespace maestro::plan
