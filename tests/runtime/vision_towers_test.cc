// SPDX-License-Identifier: Apache-2.0
// The published vision towers beside CLIP (models_test.cc holds CLIP,
// Qwen2-VL and the built-in ViT): SigLIP (SiglipVisionModel) against the
// independent PyTorch reference (tests/runtime/reference_harness.h,
// reference_models.py's SiglipVision), forward and gradients, with and
// without its attention-pooling head; its output shape, parameter counts
// (tiny by hand, SigLIP-so400m against the compiler's count) and the descs
// the runtime refuses.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "compiler/model.h"
#include "plan/model_desc.h"
#include "runtime/models/encoders.h"
#include "runtime/models/parameter_count.h"
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
