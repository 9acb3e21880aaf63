// SPDX-License-Identifier: Apache-2.0
// The published vision towers beside CLIP (models_test.cc holds CLIP,
// Qwen2-VL on fixed-size images and the built-in ViT): SigLIP
// (SiglipVisionModel) against the independent PyTorch reference
// (tests/runtime/reference_harness.h, reference_vision.py's SiglipVision),
// forward and gradients, with and without its attention-pooling head; its
// output shape, parameter counts (tiny by hand, SigLIP-so400m against the
// compiler's count) and the descs the runtime refuses. The Qwen towers on
// packed, variable-size input (VitEncoderImpl::ForwardPacked: images of
// several sizes and a video in one call) against HF's forward(pixel_values,
// grid_thw) as reference_vision.py writes it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "compiler/model.h"
#include "plan/model_desc.h"
#include "runtime/models/encoders.h"
#include "runtime/models/parameter_count.h"
#include "runtime/models/qwen_vision.h"
#include "tests/fixtures/models.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/reference_harness.h"

namespace maestro::runtime {
namespace {

using plan::ModelDesc;
using reference::CheckAgainstPyTorch;
using reference::FloatInputCase;
using reference::ReferenceCase;
using reference::TensorMap;

// The SigLIP case: "output" is last_hidden_state (after post_layernorm,
// what the section hands on); with the head, "pooled" (HF's pooler_output)
// joins the loss with its own probe so the head's gradients are compared too.
ReferenceCase SiglipCase(const std::string& name, const ModelDesc& desc, std::vector<int64_t> shape) {
  ReferenceCase c = FloatInputCase(name, desc, std::move(shape));
  if (!plan::AttnPoolHead(desc)) return c;
  c.run = [](torch::nn::Module& m, const TensorMap& in, const torch::Tensor& delta) {
    auto* vit = m.as<VitEncoderImpl>();
    auto out = vit->forward(in.at("x") + delta);
    return TensorMap{{"output", out}, {"pooled", vit->Pool(out)}};
  };
  c.probed = {"pooled"};
  return c;
}

// Packed input: "x" (N, C*T*P*P) pixel values in HF's order, "grid_thw"
// (items, 3); the output is ForwardPacked's (N / m^2, out_dim).
ReferenceCase PackedCase(const std::string& name, const ModelDesc& desc, const std::vector<PatchGrid>& grids) {
  ReferenceCase c;
  c.name = name;
  c.desc = desc;
  int64_t n = 0;
  std::vector<int64_t> thw;
  for (const PatchGrid& g : grids) {
    n += g.t * g.h * g.w;
    thw.insert(thw.end(), {g.t, g.h, g.w});
  }
  const auto temporal = static_cast<int64_t>(desc.extra.at("temporal_patch"));
  const std::vector<int64_t> shape{n, desc.channels * temporal * desc.patch_size * desc.patch_size};
  auto gen = at::detail::createCPUGenerator(7);
  c.inputs["x"] = torch::empty(shape).normal_(0.0, 1.0, gen);
  c.inputs["grid_thw"] = torch::tensor(thw, torch::kInt64).view({static_cast<int64_t>(grids.size()), 3});
  c.delta_shape = shape;
  c.run = [grids](torch::nn::Module& m, const TensorMap& in, const torch::Tensor& delta) {
    return TensorMap{{"output", m.as<VitEncoderImpl>()->ForwardPacked(in.at("x") + delta, grids)}};
  };
  return c;
}

// Five image sizes (4 px patches, merge 2) and a video of 2 temporal
// patches (two attention segments for one item).
std::vector<PatchGrid> MixedGrids() {
  return {{1, 4, 4}, {1, 2, 6}, {1, 6, 2}, {1, 4, 8}, {1, 6, 6}, {2, 4, 6}};
}

TEST(VisionTowersReference, Qwen2VlPackedImagesAndAVideoMatchPyTorch) {
  CheckAgainstPyTorch(PackedCase("qwen2_vl_packed", fixtures::TinyQwen2VlVisionModel(), MixedGrids()));
}

TEST(VisionTowers, Qwen2VlPackedBlocksRunOnTheRealPatchesOnly) {
  auto qwen = BuildVitEncoder(fixtures::TinyQwen2VlVisionModel());
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  const int64_t n = 16 + 12 + 12 + 32 + 36 + 48;
  auto out = (*qwen)->ForwardPacked(torch::randn({n, 3 * 2 * 4 * 4}), MixedGrids());
  EXPECT_EQ((*qwen)->blocks_input_rows(), n);  // no padding to a common size
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{n / 4, 24}));
}

// forward(images) is ForwardPacked on HF's flattening with grids (1, S/P, S/P).
TEST(VisionTowers, Qwen2VlFixedImagesAreThePackedPath) {
  auto qwen = BuildVitEncoder(fixtures::TinyQwen2VlVisionModel());
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  auto images = torch::randn({3, 3, 16, 16});
  auto fixed = (*qwen)->forward(images);
  auto packed = (*qwen)->ForwardPacked(FlattenImagePatches(images, 2, 4, 2), std::vector<PatchGrid>(3, {1, 4, 4}));
  EXPECT_TRUE(torch::equal(fixed, packed.view({3, 4, 24})));
}

// Qwen2.5-VL (windows of 2 x 2 merged units = 4 x 4 patches): one window,
// windows padded (3 x 3 and 5 x 2 merged units, 1 x 3), windows that tile
// exactly (4 x 4: HF pads a whole empty row and column of windows and drops
// them), and a video of 2 temporal patches; block 1 attends over each
// temporal patch, blocks 0 and 2 inside their windows.
std::vector<PatchGrid> WindowGrids() {
  return {{1, 4, 4}, {1, 6, 6}, {1, 2, 6}, {1, 10, 4}, {1, 8, 8}, {2, 6, 4}};
}

TEST(VisionTowersReference, Qwen25VlPackedImagesAndAVideoMatchPyTorch) {
  CheckAgainstPyTorch(PackedCase("qwen2_5_vl_packed", fixtures::TinyQwen25VlVisionModel(), WindowGrids()));
}

TEST(VisionTowersReference, Qwen25VlFixedImagesMatchPyTorch) {
  CheckAgainstPyTorch(FloatInputCase("qwen2_5_vl", fixtures::TinyQwen25VlVisionModel(), {2, 3, 24, 24}));
}

TEST(VisionTowers, Qwen25VlWindowsFollowHfsWindowIndex) {
  // 3 x 3 merged units in windows of 2: [0 1 3 4], [2 5], [6 7], [8].
  VisionWindows w = VisionWindowIndex({{1, 6, 6}}, 2, 2);
  EXPECT_TRUE(torch::equal(w.groups, torch::tensor({0, 1, 3, 4, 2, 5, 6, 7, 8}, torch::kInt64)));
  EXPECT_EQ(w.lengths, (std::vector<int64_t>{16, 8, 8, 4}));
  // Two temporal patches of 1 x 2 merged units: one window each, groups offset.
  w = VisionWindowIndex({{2, 2, 4}}, 2, 2);
  EXPECT_TRUE(torch::equal(w.groups, torch::tensor({0, 1, 2, 3}, torch::kInt64)));
  EXPECT_EQ(w.lengths, (std::vector<int64_t>{8, 8}));
  auto qwen = BuildVitEncoder(fixtures::TinyQwen25VlVisionModel());
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  auto out = (*qwen)->ForwardPacked(torch::randn({216, 96}), WindowGrids());
  EXPECT_EQ((*qwen)->blocks_input_rows(), 216);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{54, 24}));
}

TEST(VisionTowers, Qwen25VlParameterCountsByHand) {
  const int64_t c = 32, f = 64, g = 4 * c;
  const int64_t block = 2 * c + (3 * c * c + 3 * c) + (c * c + c) + 2 * (f * c + f) + (c * f + c);
  const int64_t tower = 3 * 2 * 4 * 4 * c + 3 * block + c + (g * g + g) + (g * 24 + 24);
  const ModelDesc d = fixtures::TinyQwen25VlVisionModel();
  EXPECT_EQ(ParameterCount(d).value(), tower);
  EXPECT_EQ(compiler::ComputeModelFacts(d, 0).params, tower);
}

// Qwen2.5-VL-7B's tower built on the meta device holds the count the
// compiler plans with (compiler/model_test.cc sums it by hand).
TEST(VisionTowers, Qwen25Vl7bCountsAsTheCompilerDoes) {
  auto d = compiler::ModelFromHfConfigFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/hf/qwen2_5_vl_7b.json", "vision");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(ParameterCount(*d).value(), 676'550'144);
  EXPECT_EQ(compiler::ComputeModelFacts(*d, 0).params, 676'550'144);
}

TEST(VisionTowers, Qwen25VlDescsTheRuntimeDoesNotBuildAreRefused) {
  auto refused = [](const ModelDesc& d, const std::string& mentions) {
    auto built = BuildVitEncoder(d);
    ASSERT_FALSE(built.ok()) << mentions;
    EXPECT_NE(built.status().message().find(mentions), std::string::npos) << built.status().ToString();
  };
  ModelDesc d = fixtures::TinyQwen25VlVisionModel();
  d.extra[std::string(plan::kFullAttBlockKeyPrefix) + "3"] = 1;  // 3 blocks: 0, 1, 2
  refused(d, "fullatt_block_indexes.3");
  d = fixtures::TinyQwen25VlVisionModel();
  d.extra[plan::kVitWindowSizeKey] = 4;  // under one merged unit (8 px)
  refused(d, "window_size");
  d = fixtures::TinyQwen25VlVisionModel();
  d.extra[plan::kQuickGeluKey] = 1;
  refused(d, "quick_gelu");
  d = fixtures::TinyQwen2VlVisionModel();
  d.extra[plan::kVitWindowSizeKey] = 16;  // only Qwen2.5-VL has windows
  refused(d, "window_size");
}

TEST(VisionTowers, PackedInputIsRefusedWhereItCannotRun) {
  auto qwen = BuildVitEncoder(fixtures::TinyQwen2VlVisionModel());
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  auto refused = [&](VitEncoderImpl& vit, const torch::Tensor& patches, const std::vector<PatchGrid>& grids,
                     const std::string& mentions) {
    try {
      vit.ForwardPacked(patches, grids);
      ADD_FAILURE() << "accepted; wanted a refusal mentioning " << mentions;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find(mentions), std::string::npos) << e.what();
    }
  };
  refused(**qwen, torch::randn({16, 96}), {{1, 4, 4}, {1, 2, 2}}, "patches for grids of 20");
  refused(**qwen, torch::randn({12, 96}), {{1, 3, 4}}, "multiples of the spatial merge");
  refused(**qwen, torch::randn({16, 95}), {{1, 4, 4}}, "C*T*P*P = 96");
  auto siglip = BuildVitEncoder(fixtures::TinySiglipVisionModel());
  ASSERT_TRUE(siglip.ok());
  refused(**siglip, torch::randn({4, 48}), {{1, 2, 2}}, "Qwen2-VL and Qwen2.5-VL towers");
}

TEST(VisionTowersReference, SiglipWithItsPoolingHeadMatchesPyTorch) {
  // 10 px images in 4 px patches: the conv drops 2 px, as HF's "valid" one.
  CheckAgainstPyTorch(SiglipCase("siglip", fixtures::TinySiglipVisionModel(), {2, 3, 10, 10}));
}

TEST(VisionTowersReference, SiglipWithoutAHeadMatchesPyTorch) {
  ModelDesc d = fixtures::TinySiglipVisionModel();
  d.extra[plan::kAttnPoolHeadKey] = 0;  // vision_use_head = false
  d.image_size = 8;
  d.extra[plan::kLayerNormEpsKey] = 1e-5;
  CheckAgainstPyTorch(SiglipCase("siglip_no_head", d, {3, 3, 8, 8}));
}

TEST(VisionTowers, SiglipOutputsItsLastHiddenStateWithoutAClassToken) {
  const ModelDesc d = fixtures::TinySiglipVisionModel();
  auto siglip = BuildVitEncoder(d);
  ASSERT_TRUE(siglip.ok()) << siglip.status().ToString();
  EXPECT_EQ(plan::VitOutputTokens(d), 4);  // floor(10 / 4)^2
  EXPECT_EQ((*siglip)->output_tokens(), 4);
  EXPECT_EQ((*siglip)->output_dim(), 32);
  EXPECT_EQ(plan::LayerNormEps(d), 1e-6);
  auto out = (*siglip)->forward(torch::randn({2, 3, 10, 10}));
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 4, 32}));
  EXPECT_EQ((*siglip)->Pool(out).sizes(), (std::vector<int64_t>{2, 32}));
  EXPECT_FALSE((*siglip)->class_embedding.defined());
  EXPECT_FALSE((*siglip)->pre_norm);
  // The head is not on the section's path: a loss on the output leaves it
  // without gradients (as CLIP's post_layernorm).
  out.sum().backward();
  for (const auto& p : (*siglip)->head->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_TRUE((*siglip)->final_norm->weight.grad().defined());
}

TEST(VisionTowers, SiglipParameterCountsByHand) {
  const int64_t c = 32, f = 64;
  const int64_t block = 4 * (c * c + c) + (f * c + f) + (c * f + c) + 4 * c;
  const int64_t head = c + (3 * c * c + 3 * c) + (c * c + c) + 2 * c + (f * c + f) + (c * f + c);
  // Conv 4x4 with bias, 4 positions, 2 blocks, post_layernorm, the head.
  const int64_t tower = (3 * 4 * 4 * c + c) + 4 * c + 2 * block + 2 * c;
  ModelDesc d = fixtures::TinySiglipVisionModel();
  EXPECT_EQ(ParameterCount(d).value(), tower + head);
  EXPECT_EQ(compiler::ComputeModelFacts(d, 0).params, tower + head);
  d.extra[plan::kAttnPoolHeadKey] = 0;
  EXPECT_EQ(ParameterCount(d).value(), tower);
  EXPECT_EQ(compiler::ComputeModelFacts(d, 0).params, tower);
}

// SigLIP-so400m-patch14-384 built on the meta device: the runtime's module
// holds the count the compiler plans with (compiler/model_test.cc sums it by
// hand: 428,225,600 with the head).
TEST(VisionTowers, SiglipSo400mCountsAsTheCompilerDoes) {
  auto d = compiler::ModelFromHfConfigFile(std::string(MAESTRO_SOURCE_DIR) +
                                           "/tests/compiler/data/hf/siglip_so400m_patch14_384.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(ParameterCount(*d).value(), 428'225'600);
  EXPECT_EQ(compiler::ComputeModelFacts(*d, 0).params, 428'225'600);
}

TEST(VisionTowers, SiglipDescsTheRuntimeDoesNotBuildAreRefused) {
  auto refused = [](ModelDesc d, const std::string& mentions) {
    auto built = BuildVitEncoder(d);
    ASSERT_FALSE(built.ok()) << mentions;
    EXPECT_NE(built.status().message().find(mentions), std::string::npos) << built.status().ToString();
  };
  ModelDesc d = fixtures::TinySiglipVisionModel();
  d.extra["cls_token"] = 1;
  refused(d, "cls_token");
  d = fixtures::TinySiglipVisionModel();
  d.extra["quick_gelu"] = 1;
  refused(d, "quick_gelu");
  d = fixtures::TinySiglipVisionModel();
  d.extra["spatial_merge"] = 2;
  d.out_dim = 24;
  refused(d, "spatial_merge");
  d = fixtures::TinyClipVisionModel();
  d.extra[plan::kAttnPoolHeadKey] = 1;  // only SigLIP has the head
  refused(d, "attn_pool_head");
  d = fixtures::TinyClipVisionModel();
  d.image_size = 10;  // only SigLIP's conv drops a remainder
  refused(d, "image_size divisible by patch_size");
}

}  // namespace
}  // namespace maestro::runtime
