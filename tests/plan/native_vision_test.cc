// SPDX-License-Identifier: Apache-2.0
// plan/native_vision.h: which towers take native-resolution images, the
// plan's check (its messages), the rows an edge carries per sample, an
// item's LLM grid and its attention sequences; and plan/mrope.h's videos
// (their own placeholder, Qwen2.5-VL's time rows), worked by hand.
#include "plan/native_vision.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "plan/model_desc.h"
#include "plan/mrope.h"

namespace maestro::plan {
namespace {

// A Qwen2-VL-shaped tower: patch 14, merge 2, image_size 56 (4x4 patches).
ModelDesc QwenTower() {
  ModelDesc d;
  d.kind = ModelKind::kVit;
  d.hidden = 32;
  d.layers = 1;
  d.heads = 2;
  d.ffn_hidden = 64;
  d.patch_size = 14;
  d.image_size = 56;
  d.channels = 3;
  d.out_dim = 48;
  d.extra[kVitLayoutKey] = kVitLayoutQwen2Vl;
  d.extra["spatial_merge"] = 2;
  d.extra["temporal_patch"] = 2;
  return d;
}

DataPlan Native(int64_t min_pixels, int64_t max_pixels) {
  DataPlan data;
  data.image_resolution = kImageResolutionNative;
  data.image_min_pixels = min_pixels;
  data.image_max_pixels = max_pixels;
  return data;
}

TEST(NativeVision, OnlyTheQwenFamilyTakesNativeImages) {
  EXPECT_TRUE(TakesNativeImages(QwenTower()));
  ModelDesc clip = QwenTower();
  clip.extra[kVitLayoutKey] = kVitLayoutClip;
  clip.extra.erase("spatial_merge");
  EXPECT_FALSE(TakesNativeImages(clip));
  const Status st = CheckNativeResolution(Native(3136, 1003520), clip, "section 'vit'");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("section 'vit'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("image_resolution = \"fixed\""), std::string::npos) << st.message();
  // Fixed images are any tower's.
  EXPECT_TRUE(CheckNativeResolution(DataPlan{}, clip, "section 'vit'").ok());
}

TEST(NativeVision, ChecksThePixelBounds) {
  const ModelDesc vit = QwenTower();
  EXPECT_TRUE(CheckNativeResolution(Native(3136, 1003520), vit, "v").ok());
  Status st = CheckNativeResolution(Native(5000, 4000), vit, "v");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("image_min_pixels = 5000"), std::string::npos) << st.message();
  st = CheckNativeResolution(Native(1, 28 * 28 - 1), vit, "v");  // less than one 28x28 merge window
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("at least 784"), std::string::npos) << st.message();
  DataPlan typo;
  typo.image_resolution = "natve";
  st = CheckNativeResolution(typo, vit, "v");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'natve'"), std::string::npos) << st.message();
}

TEST(NativeVision, RowsPerSampleAndGrids) {
  const ModelDesc vit = QwenTower();
  EXPECT_EQ(VisionRowsPerSample(vit, false, 3, 512), 3 * 4);  // K images of (4/2)^2 merged patches
  EXPECT_EQ(VisionRowsPerSample(vit, true, 3, 512), 512);     // native: the sample's sequence bounds its rows
  PatchGrid video{4, 6, 10, true, 1.0};
  EXPECT_EQ(video.patches(), 240);
  const LlmGrid g = LlmGridOf(video, vit);
  EXPECT_EQ(g.t, 4);
  EXPECT_EQ(g.h, 3);
  EXPECT_EQ(g.w, 5);
  EXPECT_TRUE(g.video);
  EXPECT_EQ(g.seconds_per_t, 1.0);
  // transformers' cu_seqlens: each temporal patch is one sequence of h * w.
  EXPECT_EQ(AttentionSequences(video), (std::vector<int64_t>{60, 60, 60, 60}));
}

constexpr int64_t kImage = 9, kVideo = 8;

// Text, a 1x1x2 image, a 3x1x1 video at its own placeholder, text. Qwen2-VL
// (tokens_per_second 0): the video's time rows are 0, 1, 2 past its base.
// Qwen2.5-VL (tokens_per_second 2, 2 s per temporal patch): 0, 4, 8, and the
// text after it continues one past 8.
TEST(MropePositionsVideo, TimeRowsAsQwen2VlAndQwen25Vl) {
  const std::vector<int64_t> ids = {1, kImage, kImage, kVideo, kVideo, kVideo, 2};
  std::vector<LlmGrid> items = {{1, 1, 2}, {3, 1, 1, true, 2.0}};
  std::vector<int64_t> out(3 * ids.size());
  ASSERT_TRUE(MropePositions(ids.data(), 7, kImage, kVideo, items, 0, out.data()).ok());
  EXPECT_EQ(out, (std::vector<int64_t>{0, 1, 1, 3, 4, 5, 6,     // time: image at 1; video base 3, frames 3..5
                                       0, 1, 1, 3, 3, 3, 6,     // height
                                       0, 1, 2, 3, 3, 3, 6}));  // width; text from 3 + 2 + 1 = 6
  ASSERT_TRUE(MropePositions(ids.data(), 7, kImage, kVideo, items, 2, out.data()).ok());
  EXPECT_EQ(out, (std::vector<int64_t>{0, 1, 1, 3, 7, 11, 12,     // time: 3 + 0, 4, 8
                                       0, 1, 1, 3, 3, 3,  12,     // height
                                       0, 1, 2, 3, 3, 3,  12}));  // width; text from 3 + 8 + 1
  // Half a second per temporal patch truncates to 0 (transformers' int64 cast).
  items[1].seconds_per_t = 0.5;
  ASSERT_TRUE(MropePositions(ids.data(), 7, kImage, kVideo, items, 2, out.data()).ok());
  EXPECT_EQ(out[4], 3);
  EXPECT_EQ(out[5], 3);
}

TEST(MropePositionsVideo, AVideoReadsOnlyItsOwnPlaceholder) {
  const std::vector<int64_t> ids = {1, kImage, kImage, 2};
  std::vector<int64_t> out(12);
  const Status st = MropePositions(ids.data(), 4, kImage, kVideo, {{1, 1, 2, true, 1.0}}, 0, out.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("video 0"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace maestro::plan
