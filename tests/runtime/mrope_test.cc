// SPDX-License-Identifier: Apache-2.0
// M-RoPE in the decoder (plan/mrope.h, runtime/models/decoder.h): a Qwen2
// decoder given the 3-D positions of images at their placeholders equals
// tests/runtime/reference_models.py, which computes the positions itself
// (its port of transformers' Qwen2VLModel.get_rope_index) and the rotary
// tables as modeling_qwen2_vl.py's apply_multimodal_rotary_pos_emb (chunked
// mrope_section) and modeling_qwen3_vl.py's apply_interleaved_mrope do:
// forward and every gradient within 1e-5 (tests/runtime/reference_harness.h).
// Images of different grids (a video's two temporal patches among them),
// two of them adjacent, and a text-only sample share one micro-batch.
#include "plan/mrope.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "plan/model_desc.h"
#include "runtime/models/decoder.h"
#include "tests/fixtures/models.h"
#include "tests/runtime/reference_harness.h"

namespace maestro::runtime {
namespace {

using reference::CheckAgainstPyTorch;
using reference::ReferenceCase;
using reference::TensorMap;

constexpr int64_t kImageToken = 7;
constexpr int64_t kTokens = 24;

// A Qwen2-shaped decoder (q/k/v biases) with head_dim 16 (8 frequencies)
// split as `section`, rope_theta 100 so that every frequency turns
// noticeably over the positions used.
plan::ModelDesc MropeDecoder(int64_t t, int64_t h, int64_t w, bool interleaved) {
  plan::ModelDesc d = fixtures::TinyDecoderModel();
  d.head_dim = 16;
  d.extra["qkv_bias"] = 1;
  d.extra["rope_theta"] = 100.0;
  d.extra["rms_norm_eps"] = 1e-6;
  d.extra[plan::kMropeSectionTKey] = static_cast<double>(t);
  d.extra[plan::kMropeSectionHKey] = static_cast<double>(h);
  d.extra[plan::kMropeSectionWKey] = static_cast<double>(w);
  if (interleaved) d.extra[plan::kMropeInterleavedKey] = 1;
  return d;
}

// Three samples of kTokens: sample 0 text, a 1x2x3 image, text, a 2x2x2
// video, text; sample 1 a 1x3x3 image at position 0 then a 1x1x2 image right
// after it, text; sample 2 text only. Inputs: "ids" (3, T) and, for the
// reference, "mrope_grids" (images, 3), "mrope_counts" (3) and
// "mrope_image_token" (1).
TensorMap MropeInputs() {
  auto gen = at::detail::createCPUGenerator(11);
  auto ids = torch::randint(8, 50, {3, kTokens}, gen, torch::kLong);  // text never holds the placeholder
  auto fill = [&](int64_t b, int64_t from, int64_t n) { ids[b].narrow(0, from, n).fill_(kImageToken); };
  fill(0, 2, 6);   // 1x2x3
  fill(0, 10, 8);  // 2x2x2
  fill(1, 0, 9);   // 1x3x3
  fill(1, 9, 2);   // 1x1x2, adjacent
  TensorMap in;
  in["ids"] = ids;
  in["mrope_grids"] = torch::tensor({1, 2, 3, 2, 2, 2, 1, 3, 3, 1, 1, 2}, torch::kLong).view({4, 3});
  in["mrope_counts"] = torch::tensor({2, 2, 0}, torch::kLong);
  in["mrope_image_token"] = torch::tensor({kImageToken}, torch::kLong);
  return in;
}

constexpr int64_t kVideoToken = 6;

// Qwen2.5-VL's videos beside images (video placeholder kVideoToken, the
// decoder's tokens_per_second 2): sample 0 text, a 1x2x2 image, text, a
// 2x2x2 video of 2 s per temporal patch (time rows 0, 4), text; sample 1 a
// 3x1x2 video of 0.5 s per temporal patch (transformers truncates it to 0:
// every time row 0) at position 0, then a 1x1x3 image; sample 2 text only.
// Adds "mrope_video_token", "mrope_kinds" (1 = video) and "mrope_seconds".
TensorMap MropeVideoInputs() {
  auto gen = at::detail::createCPUGenerator(12);
  auto ids = torch::randint(8, 50, {3, kTokens}, gen, torch::kLong);
  auto fill = [&](int64_t b, int64_t from, int64_t n, int64_t token) { ids[b].narrow(0, from, n).fill_(token); };
  fill(0, 2, 4, kImageToken);   // 1x2x2
  fill(0, 10, 8, kVideoToken);  // 2x2x2
  fill(1, 0, 6, kVideoToken);   // 3x1x2
  fill(1, 6, 3, kImageToken);   // 1x1x3, adjacent
  TensorMap in;
  in["ids"] = ids;
  in["mrope_grids"] = torch::tensor({1, 2, 2, 2, 2, 2, 3, 1, 2, 1, 1, 3}, torch::kLong).view({4, 3});
  in["mrope_counts"] = torch::tensor({2, 2, 0}, torch::kLong);
  in["mrope_image_token"] = torch::tensor({kImageToken}, torch::kLong);
  in["mrope_video_token"] = torch::tensor({kVideoToken}, torch::kLong);
  in["mrope_kinds"] = torch::tensor({0, 1, 1, 0}, torch::kLong);
  in["mrope_seconds"] = torch::tensor({0.0, 2.0, 0.5, 0.0}, torch::kFloat64);
  return in;
}

// (3, B, T): plan::MropePositions per sample from the inputs' grids (and
// kinds and seconds when the inputs have videos).
torch::Tensor PositionsOf(const TensorMap& in, int64_t tokens_per_second = 0) {
  const auto ids = in.at("ids").contiguous();
  const auto grids = in.at("mrope_grids");
  const auto counts = in.at("mrope_counts");
  const bool videos = in.count("mrope_kinds") > 0;
  const int64_t b = ids.size(0), t = ids.size(1);
  auto positions = torch::empty({b, 3, t}, torch::kLong);
  int64_t next = 0;
  for (int64_t i = 0; i < b; ++i) {
    std::vector<plan::LlmGrid> items;
    for (int64_t k = 0; k < counts[i].item<int64_t>(); ++k, ++next) {
      plan::LlmGrid g{grids[next][0].item<int64_t>(), grids[next][1].item<int64_t>(), grids[next][2].item<int64_t>()};
      if (videos) {
        g.video = in.at("mrope_kinds")[next].item<int64_t>() == 1;
        g.seconds_per_t = in.at("mrope_seconds")[next].item<double>();
      }
      items.push_back(g);
    }
    const Status st = plan::MropePositions(ids[i].data_ptr<int64_t>(), t, kImageToken, videos ? kVideoToken : -1, items,
                                           tokens_per_second, positions[i].data_ptr<int64_t>());
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  return positions.permute({1, 0, 2}).contiguous();
}

ReferenceCase MropeCase(const std::string& name, const plan::ModelDesc& desc, bool videos = false) {
  ReferenceCase c;
  c.name = name;
  c.desc = desc;
  c.inputs = videos ? MropeVideoInputs() : MropeInputs();
  c.delta_shape = {3, kTokens, desc.hidden};
  const int64_t tokens_per_second = plan::MropeOf(desc)->tokens_per_second;
  c.run = [tokens_per_second](torch::nn::Module& m, const TensorMap& in, const torch::Tensor& delta) {
    auto& lm = *m.as<DecoderLMImpl>();
    auto hidden = lm.ForwardEmbeds(lm.Embed(in.at("ids")) + delta, PositionsOf(in, tokens_per_second));  // (B, T, C)
    return TensorMap{{"output", lm.Logits(hidden)}, {"hidden", hidden}};
  };
  return c;
}

TEST(Mrope, ChunkedSectionsMatchQwen2Vl) {
  CheckAgainstPyTorch(MropeCase("mrope_chunked", MropeDecoder(2, 3, 3, false)));
}

TEST(Mrope, InterleavedSectionsMatchQwen3Vl) {
  CheckAgainstPyTorch(MropeCase("mrope_interleaved", MropeDecoder(4, 2, 2, true)));
}

// Qwen2.5-VL: videos at their own placeholder, their time rows scaled by
// seconds per temporal patch x tokens_per_second (and 0.5 s truncated to 0,
// as transformers computes it).
TEST(Mrope, VideosWithTimeScalingMatchQwen25Vl) {
  plan::ModelDesc desc = MropeDecoder(2, 3, 3, false);
  desc.extra[plan::kMropeTokensPerSecondKey] = 2;
  CheckAgainstPyTorch(MropeCase("mrope_video_time", desc, /*videos=*/true));
}

// The positions matter: the image samples' outputs differ from 1-D RoPE's,
// and the text-only sample's equal them (its positions are 0..T-1 on every row).
TEST(Mrope, ImagePositionsChangeTheOutputTextOnlyDoesNot) {
  auto built = BuildDecoder(MropeDecoder(2, 3, 3, false));
  ASSERT_TRUE(built.ok()) << built.status().ToString();
  auto& lm = **built;
  torch::NoGradGuard no_grad;
  const TensorMap in = MropeInputs();
  const auto embeds = lm.Embed(in.at("ids"));
  const auto with = lm.ForwardEmbeds(embeds, PositionsOf(in));
  const auto without = lm.ForwardEmbeds(embeds);
  EXPECT_GT((with[0] - without[0]).abs().max().item<double>(), 1e-3);
  EXPECT_GT((with[1] - without[1]).abs().max().item<double>(), 1e-3);
  EXPECT_TRUE(torch::allclose(with[2], without[2], 0, 1e-6));
}

TEST(Mrope, RefusesPositionsOfTheWrongShapeOrForAPlainDecoder) {
  auto built = BuildDecoder(MropeDecoder(2, 3, 3, false));
  ASSERT_TRUE(built.ok());
  const auto embeds = torch::zeros({3, kTokens, 32});
  EXPECT_THROW((*built)->ForwardEmbeds(embeds, torch::zeros({3, 3, kTokens - 1}, torch::kLong)), c10::Error);
  auto plain = BuildDecoder(fixtures::TinyDecoderModel());
  ASSERT_TRUE(plain.ok());
  EXPECT_THROW((*plain)->ForwardEmbeds(embeds, torch::zeros({3, 3, kTokens}, torch::kLong)), c10::Error);
}

}  // namespace
}  // namespace maestro::runtime
