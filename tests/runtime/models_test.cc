// SPDX-License-Identifier: Apache-2.0
// The runtime's models against PyTorch, plus descriptor checks and parameter
// counts.
//
// Reference tests (tests/runtime/reference_harness.h): C++ builds a model
// from a ModelDesc, perturbs its weights, runs forward and backward, and
// `python3 tests/runtime/reference_models.py <case> <case>/ref` builds the
// same model in PyTorch (the decoder written as HF Llama / Mixtral, the
// encoders from torch.nn.TransformerEncoderLayer) and must agree on every
// output and gradient within 1e-5 relative (fp32, CPU).
#include "tests/fixtures/models.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "plan/banded_attention.h"
#include "plan/model_desc.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "runtime/models/parameter_count.h"
#include "runtime/torch_compat.h"
#include "tests/runtime/reference_harness.h"

namespace maestro::runtime {
namespace {

using plan::ModelDesc;
using plan::ModelKind;
using reference::CheckAgainstPyTorch;
using reference::FloatInputCase;
using reference::ReferenceCase;
using reference::TensorMap;

// ---- the descs -----------------------------------------------------------------

ModelDesc TinyMoeDecoder() {
  ModelDesc d = fixtures::TinyDecoderModel();
  d.kv_heads = 1;  // MQA
  d.experts = 4;
  d.experts_per_token = 2;
  d.moe_ffn_hidden = 24;
  d.tie_embeddings = true;
  d.extra["rope_theta"] = 500.0;
  d.extra["rms_norm_eps"] = 1e-6;
  return d;
}

// Qwen2-MoE: 4 experts, top 2 not renormalized, a shared expert with its
// sigmoid gate, q/k/v biases.
ModelDesc TinyQwen2Moe() {
  ModelDesc d = TinyMoeDecoder();
  d.kv_heads = 2;
  d.extra["shared_expert_ffn_hidden"] = 40;
  d.extra["norm_topk_prob"] = 0;
  d.extra["qkv_bias"] = 1;
  return d;
}

// Qwen3-MoE: top 2 of 4 renormalized, RMSNorm of every q and k head, an
// untied head, head_dim 12 (not hidden / heads).
ModelDesc TinyQwen3Moe() {
  ModelDesc d = TinyMoeDecoder();
  d.kv_heads = 2;
  d.head_dim = 12;
  d.tie_embeddings = false;
  d.extra["qk_norm"] = 1;
  return d;
}

// Qwen3-MoE with dense layers: 6 layers, decoder_sparse_step 2 (layers 1,
// 3, 5 sparse) and mlp_only_layers [3]: MoE layers 1 and 5, the others
// dense SwiGLU MLPs of ffn_hidden 48 (transformers' Qwen3MoeDecoderLayer rule).
ModelDesc TinyQwen3MoeMixed() {
  ModelDesc d = TinyQwen3Moe();
  d.layers = 6;
  d.ffn_hidden = 48;
  d.extra[plan::kDecoderSparseStepKey] = 2;
  d.extra[std::string(plan::kMlpOnlyLayerKeyPrefix) + "3"] = 1;
  return d;
}

// Qwen2's decoder: q/k/v biases, tied embeddings, a head_dim that is not
// hidden / heads, its rope_theta and eps.
ModelDesc TinyQwen2() {
  ModelDesc d = fixtures::TinyDecoderModel();
  d.head_dim = 12;
  d.tie_embeddings = true;
  d.extra["qkv_bias"] = 1;
  d.extra["rope_theta"] = 1e6;
  d.extra["rms_norm_eps"] = 1e-6;
  return d;
}

// Mistral: a sliding window of 8 tokens.
ModelDesc TinyMistral() {
  ModelDesc d = fixtures::TinyDecoderModel();
  d.extra["sliding_window"] = 8;
  d.extra["rms_norm_eps"] = 1e-6;
  return d;
}

// Gemma 3 text: unit-offset norms (4 per block, q/k norms), GeGLU, the
// embeddings scaled by sqrt(C), query_pre_attn_scalar 24 (not head_dim 16),
// 3 layers, layer 1 global ((i + 1) % 2 == 0), layers 0 and 2 local:
// windows of 8 with the local RoPE base, the global layer rope_theta 1e6
// with linear scaling 4.
ModelDesc TinyGemma3() {
  ModelDesc d = fixtures::TinyDecoderModel();
  d.layers = 3;
  d.head_dim = 16;
  d.tie_embeddings = true;
  d.extra[plan::kGemma3Key] = 1;
  d.extra[plan::kQkNormKey] = 1;
  d.extra[plan::kRmsNormEpsKey] = 1e-6;
  d.extra[plan::kSlidingWindowKey] = 8;
  d.extra[plan::kSlidingWindowPatternKey] = 2;
  d.extra[plan::kRopeThetaKey] = 1e6;
  d.extra[plan::kRopeLocalBaseFreqKey] = 10000;
  d.extra[plan::kQueryPreAttnScalarKey] = 24;
  d.extra[plan::kRopeScalingTypeKey] = static_cast<int>(plan::RopeType::kLinear);
  d.extra[plan::kRopeScalingFactorKey] = 4;
  return d;
}

// Llama 3.1's rope scaling on the tiny decoder, shrunk so that 64 tokens run
// past the original context: theta 100 and original 32 put the four
// frequencies (wavelengths 6.3, 19.9, 62.8, 199) on every branch of the rule
// (kept, blended, divided by 8, divided by 8).
ModelDesc TinyLlama31() {
  ModelDesc d = fixtures::TinyDecoderModel();
  d.extra[plan::kRopeThetaKey] = 100.0;
  d.extra[plan::kRopeScalingTypeKey] = static_cast<int>(plan::RopeType::kLlama3);
  d.extra[plan::kRopeScalingFactorKey] = 8.0;
  d.extra[plan::kRopeScalingLowFreqFactorKey] = 1.0;
  d.extra[plan::kRopeScalingHighFreqFactorKey] = 4.0;
  d.extra[plan::kRopeScalingOriginalMaxPositionsKey] = 32;
  return d;
}

// Qwen2.5's YaRN (factor 4) on the tiny decoder at an original context of
// 32: the ramp between the correction dimensions is 0, 0.5, 1, 1 and cos and
// sin are scaled by 0.1 ln 4 + 1.
ModelDesc TinyQwen25Yarn() {
  ModelDesc d = TinyQwen2();
  d.head_dim = 0;  // hidden / heads = 8: four frequencies
  d.extra[plan::kRopeThetaKey] = 100.0;
  d.extra[plan::kRopeScalingTypeKey] = static_cast<int>(plan::RopeType::kYarn);
  d.extra[plan::kRopeScalingFactorKey] = 4.0;
  d.extra[plan::kRopeScalingOriginalMaxPositionsKey] = 32;
  return d;
}

// Whether desc's scaled frequencies differ from the unscaled ones (a case
// whose scaling changes nothing would prove nothing).
bool ScalingChangesFrequencies(const ModelDesc& d) {
  const auto scaled = plan::RopeInverseFrequencies(plan::RopeTheta(d), plan::HeadDim(d), plan::RopeScalingOf(d));
  const auto plain = plan::RopeInverseFrequencies(plan::RopeTheta(d), plan::HeadDim(d), plan::RopeScaling{});
  return scaled != plain && scaled.front() == plain.front();
}

ModelDesc TinyProjector() {
  ModelDesc d;
  d.kind = ModelKind::kProjector;
  d.in_dim = 24;
  d.out_dim = 32;
  return d;
}

ReferenceCase DecoderCase(const std::string& name, const ModelDesc& desc, int64_t batch, int64_t tokens) {
  ReferenceCase c;
  c.name = name;
  c.desc = desc;
  auto gen = at::detail::createCPUGenerator(7);
  c.inputs["ids"] = torch::randint(0, desc.vocab, {batch, tokens}, gen, torch::kLong);  // (B, T)
  c.delta_shape = {batch, tokens, desc.hidden};
  c.run = [](torch::nn::Module& m, const TensorMap& in, const torch::Tensor& delta) {
    auto& lm = *m.as<DecoderLMImpl>();
    auto hidden = lm.ForwardEmbeds(lm.Embed(in.at("ids")) + delta);  // (B, T, C)
    TensorMap out{{"output", lm.Logits(hidden)}, {"hidden", hidden}};
    if (auto balance = lm.RouterBalanceLoss(); balance.defined()) out["router_balance"] = balance;  // (B)
    return out;
  };
  return c;
}

// ---- reference tests -------------------------------------------------------------

TEST(RuntimeModelsReference, DecoderGqaRopeSwiGluMatchesPyTorch) {
  CheckAgainstPyTorch(DecoderCase("decoder_gqa", fixtures::TinyDecoderModel(), 2, 7));
}

TEST(RuntimeModelsReference, DecoderMoeTop2Of4TiedMatchesPyTorch) {
  CheckAgainstPyTorch(DecoderCase("decoder_moe", TinyMoeDecoder(), 2, 6));
}

TEST(RuntimeModelsReference, DecoderQwen2MoeSharedExpertUnnormalizedTopkMatchesPyTorch) {
  CheckAgainstPyTorch(DecoderCase("decoder_qwen2_moe", TinyQwen2Moe(), 2, 6));
}

TEST(RuntimeModelsReference, DecoderQwen3MoeQkNormMatchesPyTorch) {
  CheckAgainstPyTorch(DecoderCase("decoder_qwen3_moe", TinyQwen3Moe(), 2, 6));
}

TEST(RuntimeModelsReference, DecoderQwen3MoeWithDenseLayersMatchesPyTorch) {
  const ModelDesc d = TinyQwen3MoeMixed();
  std::vector<int64_t> moe_layers;
  for (int64_t i = 0; i < d.layers; ++i) {
    if (plan::IsMoeLayer(d, i)) moe_layers.push_back(i);
  }
  ASSERT_EQ(moe_layers, std::vector<int64_t>({1, 5}));
  auto lm = BuildDecoder(d);
  ASSERT_TRUE(lm.ok()) << lm.status().ToString();
  EXPECT_FALSE((*lm)->blocks[3]->as<DecoderBlockImpl>()->moe) << "mlp_only_layers [3]: a dense layer";
  EXPECT_TRUE((*lm)->blocks[5]->as<DecoderBlockImpl>()->moe);
  CheckAgainstPyTorch(DecoderCase("decoder_qwen3_moe_mixed", d, 2, 6));
}

// The load-balancing term where the probabilities are uniform: a router of
// zeros gives P_e = 1/E, so balance = E * sum_e f_e / E = sum_e f_e = k
// whichever k experts the ties pick.
TEST(RuntimeModelsMoe, BalanceTermIsKWhenProbabilitiesAreUniform) {
  auto lm = BuildDecoder(TinyMoeDecoder());
  ASSERT_TRUE(lm.ok());
  {
    torch::NoGradGuard no_grad;
    for (const auto& block : *(*lm)->blocks) block->as<DecoderBlockImpl>()->moe->router->weight.zero_();
  }
  auto ids = torch::randint(0, 50, {3, 5}, torch::kLong);
  (*lm)->forward(ids);
  auto balance = (*lm)->RouterBalanceLoss();
  ASSERT_EQ(balance.sizes(), torch::IntArrayRef({3}));
  EXPECT_TRUE(torch::allclose(balance, torch::full({3}, 2.0))) << balance;
}

TEST(RuntimeModelsReference, DecoderQwen2BiasesTiedHeadDim12MatchesPyTorch) {
  CheckAgainstPyTorch(DecoderCase("decoder_qwen2", TinyQwen2(), 2, 7));
}

TEST(RuntimeModelsReference, DecoderMistralInsideItsWindowMatchesPyTorch) {
  CheckAgainstPyTorch(DecoderCase("decoder_mistral", TinyMistral(), 2, 8));
}

// 24 tokens through a window of 8: the masked attention (runtime/models/
// decoder.h AttentionMask) against the reference's Hugging Face rule.
TEST(RuntimeModelsReference, DecoderMistralBeyondItsWindowMatchesPyTorch) {
  CheckAgainstPyTorch(DecoderCase("decoder_mistral_beyond", TinyMistral(), 2, 24));
}

// 24 tokens: the local layers' window of 8 and the global layer's whole
// prefix, each with its RoPE, against the reference's Gemma 3 block.
TEST(RuntimeModelsReference, DecoderGemma3LocalAndGlobalLayersMatchPyTorch) {
  CheckAgainstPyTorch(DecoderCase("decoder_gemma3", TinyGemma3(), 2, 24));
}

// 64 tokens, twice the original context of 32: positions past it are where
// the scaled and unscaled angles part most.
TEST(RuntimeModelsReference, DecoderLlama31RopeScalingBeyondTheOriginalContextMatchesPyTorch) {
  ASSERT_TRUE(ScalingChangesFrequencies(TinyLlama31()));
  CheckAgainstPyTorch(DecoderCase("decoder_llama31", TinyLlama31(), 2, 64));
}

TEST(RuntimeModelsReference, DecoderQwen25YarnBeyondTheOriginalContextMatchesPyTorch) {
  ASSERT_TRUE(ScalingChangesFrequencies(TinyQwen25Yarn()));
  CheckAgainstPyTorch(DecoderCase("decoder_qwen25_yarn", TinyQwen25Yarn(), 2, 64));
}

TEST(RuntimeModelsReference, VitEncoderMatchesPyTorch) {
  CheckAgainstPyTorch(FloatInputCase("vit", fixtures::TinyVitModel(), {2, 3, 8, 8}));
}

TEST(RuntimeModelsReference, ClipVisionTowerMatchesPyTorch) {
  CheckAgainstPyTorch(FloatInputCase("clip", fixtures::TinyClipVisionModel(), {2, 3, 8, 8}));
}

TEST(RuntimeModelsReference, Qwen2VlVisionTowerMatchesPyTorch) {
  // The reference flattens patches as Qwen2-VL's image processor does (merge
  // window by merge window) and runs HF's block-ordered 2-D RoPE; the C++
  // model keeps patches row-major: same tokens out.
  CheckAgainstPyTorch(FloatInputCase("qwen2_vl", fixtures::TinyQwen2VlVisionModel(), {2, 3, 16, 16}));
}

TEST(RuntimeModelsReference, WhisperAudioEncoderMatchesPyTorch) {
  // 11 frames: odd, so the stride-2 conv's ceil(F/2) = 6 is exercised.
  CheckAgainstPyTorch(FloatInputCase("audio", fixtures::TinyAudioModel(), {2, 10, 11}));
}

TEST(RuntimeModelsReference, MlpProjectorMatchesPyTorch) {
  CheckAgainstPyTorch(FloatInputCase("projector", TinyProjector(), {2, 5, 24}));
}

// ---- shapes, determinism, descs ----------------------------------------------------

TEST(RuntimeModels, OutputShapes) {
  auto lm = BuildDecoder(fixtures::TinyDecoderModel());
  ASSERT_TRUE(lm.ok());
  auto ids = torch::zeros({3, 5}, torch::kLong);
  auto hidden = (*lm)->ForwardEmbeds((*lm)->Embed(ids));
  EXPECT_EQ(hidden.sizes(), (std::vector<int64_t>{3, 5, 32}));
  EXPECT_EQ((*lm)->Logits(hidden).sizes(), (std::vector<int64_t>{3, 5, 50}));

  auto vit = BuildVitEncoder(fixtures::TinyVitModel());
  ASSERT_TRUE(vit.ok());
  EXPECT_EQ((*vit)->forward(torch::zeros({2, 3, 8, 8})).sizes(), (std::vector<int64_t>{2, 4, 32}));

  auto audio = BuildAudioEncoder(fixtures::TinyAudioModel());
  ASSERT_TRUE(audio.ok());
  EXPECT_EQ((*audio)->forward(torch::zeros({2, 10, 12})).sizes(), (std::vector<int64_t>{2, 6, 32}));
  EXPECT_THROW((*audio)->forward(torch::zeros({2, 10, 13})), c10::Error);  // longer than audio_frames

  auto projector = BuildMlpProjector(TinyProjector());
  ASSERT_TRUE(projector.ok());
  EXPECT_EQ((*projector)->forward(torch::zeros({2, 4, 24})).sizes(), (std::vector<int64_t>{2, 4, 32}));
}

TEST(RuntimeModels, NewLayoutsOutputShapes) {
  auto clip = BuildVitEncoder(fixtures::TinyClipVisionModel());
  ASSERT_TRUE(clip.ok()) << clip.status().ToString();
  EXPECT_EQ((*clip)->output_tokens(), 5);  // the class token + 4 patches
  EXPECT_EQ(VitOutputTokens(fixtures::TinyClipVisionModel()), 5);
  EXPECT_EQ(VitOutputTokens(fixtures::TinyVitModel()), 4);
  EXPECT_EQ(VitOutputDim(fixtures::TinyQwen2VlVisionModel()), 24);
  EXPECT_EQ((*clip)->forward(torch::zeros({2, 3, 8, 8})).sizes(), (std::vector<int64_t>{2, 5, 32}));
  auto qwen = BuildVitEncoder(fixtures::TinyQwen2VlVisionModel());
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  EXPECT_EQ((*qwen)->output_tokens(), 4);
  EXPECT_EQ((*qwen)->output_dim(), 24);
  EXPECT_EQ((*qwen)->forward(torch::zeros({2, 3, 16, 16})).sizes(), (std::vector<int64_t>{2, 4, 24}));
  // Whisper's table starts as its sinusoids and is frozen.
  auto audio = BuildAudioEncoder(fixtures::TinyAudioModel());
  ASSERT_TRUE(audio.ok());
  EXPECT_TRUE(torch::allclose((*audio)->embed_positions, SinusoidalPositions(6, 32)));
  EXPECT_FALSE((*audio)->embed_positions.requires_grad());
}

// Mistral's window of 8 over 24 tokens: each of the 2 layers lets position
// p see positions p-7..p, so the last hidden state at p depends on the tokens
// from p - 14 on. Changing token 0 moves every position up to 14 and none
// after; without the window it moves the last position too (what the test
// would see if the mask were ignored).
TEST(RuntimeModels, MistralBeyondItsWindowSeesOnlyItsWindowPerLayer) {
  torch::manual_seed(3);
  auto windowed = BuildDecoder(TinyMistral());
  ASSERT_TRUE(windowed.ok()) << windowed.status().ToString();
  ModelDesc plain_desc = TinyMistral();
  plain_desc.extra.erase("sliding_window");
  torch::manual_seed(3);
  auto plain = BuildDecoder(plain_desc);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_EQ(TinyMistral().layers, 2);
  torch::NoGradGuard no_grad;
  auto a = torch::randint(0, 50, {1, 24}, torch::kLong);
  auto b = a.clone();
  b[0][0] = (a[0][0].item<int64_t>() + 1) % 50;
  const auto moved = [](DecoderLM& lm, const torch::Tensor& x, const torch::Tensor& y) {
    auto dx = (lm->forward(x) - lm->forward(y)).abs().amax({0, 2});  // (T): the largest change at each position
    return dx;
  };
  auto w = moved(*windowed, a, b);
  for (int64_t p = 0; p < 24; ++p) {
    if (p <= 14) {
      EXPECT_GT(w[p].item<double>(), 0.0) << "position " << p << " is within token 0's reach";
    } else {
      EXPECT_EQ(w[p].item<double>(), 0.0) << "position " << p << " is beyond 2 windows of 8";
    }
  }
  EXPECT_GT(moved(*plain, a, b)[23].item<double>(), 0.0) << "without the window, token 0 reaches the end";
}

// The banded attention (plan/banded_attention.h: chunks of W queries over
// their band of keys) is the masked square's, forward and backward: one
// attention of TinyMistral (a window of 8) over 40 tokens, both ways.
TEST(RuntimeModels, BandedWindowAttentionEqualsTheMaskedSquare) {
  auto lm = BuildDecoder(TinyMistral());
  ASSERT_TRUE(lm.ok()) << lm.status().ToString();
  const ModelDesc d = TinyMistral();
  const int64_t t = 40, window = plan::SlidingWindow(d);
  ASSERT_TRUE(plan::BandedAttention(t, window));
  auto& attn = *(*lm)->blocks[0]->as<DecoderBlockImpl>()->attn;
  const auto rope = MakeRopeTables(
      t, RopeInverseFrequencyTensor(plan::HeadDim(d), plan::RopeTheta(d), plan::RopeScalingOf(d), torch::kCPU), 1.0,
      torch::kFloat32);
  auto pos = torch::arange(t, torch::kLong);
  AttentionMask mask;
  mask.allowed = (pos.unsqueeze(1) >= pos.unsqueeze(0)) & (pos.unsqueeze(0) > pos.unsqueeze(1) - window);  // (T, T)
  torch::manual_seed(11);
  const auto x = torch::randn({2, t, d.hidden});
  const auto weights = torch::randn({2, t, d.hidden});
  auto run = [&](int64_t band) {
    mask.band = band;
    auto in = x.clone().requires_grad_(true);
    auto out = attn.forward(in, rope, &mask);  // (B, T, C)
    (out * weights).sum().backward();
    return std::make_pair(out.detach(), in.grad());
  };
  const auto [square, square_grad] = run(0);
  const auto [banded, banded_grad] = run(window);
  EXPECT_TRUE(torch::allclose(banded, square, 1e-5, 1e-6)) << (banded - square).abs().max();
  EXPECT_TRUE(torch::allclose(banded_grad, square_grad, 1e-5, 1e-6)) << (banded_grad - square_grad).abs().max();
}

TEST(RuntimeModels, CausalDecoderIgnoresFutureTokens) {
  auto lm = BuildDecoder(TinyMoeDecoder());
  ASSERT_TRUE(lm.ok());
  auto a = torch::tensor({{1, 2, 3, 4, 5}}, torch::kLong);
  auto b = torch::tensor({{1, 2, 3, 9, 7}}, torch::kLong);
  auto la = (*lm)->forward(a), lb = (*lm)->forward(b);
  // Not bit-equal: the experts' matmuls see different token counts.
  EXPECT_LT((la.narrow(1, 0, 3) - lb.narrow(1, 0, 3)).abs().max().item<double>(), 1e-6);
  EXPECT_GT((la.narrow(1, 3, 1) - lb.narrow(1, 3, 1)).abs().max().item<double>(), 1e-3);
}

// Debian's libtorch 1.13 gets the fp32 GELU gradient wrong when the input is
// contiguous and the incoming gradient is not; compat::Gelu must not.
TEST(RuntimeModels, CompatGeluGradientIsRightForTransposedGradients) {
  auto gen = at::detail::createCPUGenerator(3);
  auto x = torch::empty({2, 32, 6}).normal_(0.0, 1.0, gen);
  auto probe = torch::empty({2, 6, 32}).normal_(0.0, 1.0, gen);
  auto x32 = x.clone().requires_grad_(true);
  (compat::Gelu(x32).transpose(1, 2) * probe).sum().backward();
  auto x64 = x.to(torch::kFloat64).requires_grad_(true);
  (torch::gelu(x64).transpose(1, 2) * probe.to(torch::kFloat64)).sum().backward();
  EXPECT_TRUE(torch::equal(compat::Gelu(x), torch::gelu(x)));
  EXPECT_LT((x32.grad().to(torch::kFloat64) - x64.grad()).abs().max().item<double>(), 1e-5);
}

TEST(RuntimeModels, SameSeedSameWeightsOtherSeedOther) {
  ModelBuildOptions s1, s2;
  s1.seed = 11;
  s2.seed = 12;
  auto a = BuildModel(TinyMoeDecoder(), s1), b = BuildModel(TinyMoeDecoder(), s1), c = BuildModel(TinyMoeDecoder(), s2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  auto pa = (*a)->named_parameters(), pb = (*b)->named_parameters(), pc = (*c)->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& item : pa) {
    EXPECT_TRUE(torch::equal(item.value(), pb[item.key()])) << item.key();
  }
  EXPECT_FALSE(
      torch::equal(pa["blocks.1.moe.experts.3.down_proj.weight"], pc["blocks.1.moe.experts.3.down_proj.weight"]));
}

TEST(RuntimeModels, MetaDeviceBuildHasTheSameParametersAsCpu) {
  for (const auto& desc :
       {fixtures::TinyDecoderModel(), TinyMoeDecoder(), TinyQwen2Moe(), TinyQwen3Moe(), TinyQwen2(), TinyGemma3(),
        fixtures::TinyVitModel(), fixtures::TinyClipVisionModel(), fixtures::TinyQwen2VlVisionModel(),
        fixtures::TinySiglipVisionModel(), fixtures::TinyAudioModel(), TinyProjector()}) {
    ModelBuildOptions meta;
    meta.device = torch::kMeta;
    auto cpu = BuildModel(desc), shapes = BuildModel(desc, meta);
    ASSERT_TRUE(cpu.ok() && shapes.ok());
    auto pc = (*cpu)->named_parameters(), pm = (*shapes)->named_parameters();
    ASSERT_EQ(pc.keys(), pm.keys()) << plan::ModelKindName(desc.kind);
    for (const auto& item : pc) EXPECT_EQ(item.value().sizes(), pm[item.key()].sizes()) << item.key();
  }
}

// Hand-derived counts; letters as in the model headers.
TEST(RuntimeModels, ParameterCountMatchesHandDerivedFormulas) {
  // Dense decoder, C=32, L=2, H=4, K=2, D=8, F=48, V=50, untied.
  const int64_t attn_gqa = 32 * (4 * 8) + 2 * 32 * (2 * 8) + (4 * 8) * 32;  // q, k+v, o
  const int64_t decoder = 50 * 32 + 2 * (2 * 32 + attn_gqa + 3 * 32 * 48) + 32 + 50 * 32;
  EXPECT_EQ(ParameterCount(fixtures::TinyDecoderModel()).value(), decoder);
  EXPECT_EQ(decoder, 18720);

  // MoE decoder, K=1, E=4 experts of F=24, router (E, C), tied head.
  const int64_t attn_mqa = 32 * 32 + 2 * 32 * 8 + 32 * 32;
  const int64_t moe = 50 * 32 + 2 * (2 * 32 + attn_mqa + 4 * 32 + 4 * 3 * 32 * 24) + 32;
  EXPECT_EQ(ParameterCount(TinyMoeDecoder()).value(), moe);
  // Qwen3-MoE with dense layers: K=2, D=12 (q 48, k/v 24 wide), q/k norms
  // (12 each), untied; layers 1 and 5 MoE (router + 4 experts of F=24), the
  // other 4 dense (F=48).
  const int64_t attn_qwen3 = 32 * 48 + 2 * 32 * 24 + 48 * 32 + 2 * 12;
  const int64_t moe_mlp = 4 * 32 + 4 * 3 * 32 * 24, dense_mlp = 3 * 32 * 48;
  EXPECT_EQ(ParameterCount(TinyQwen3MoeMixed()).value(),
            50 * 32 + 6 * (2 * 32 + attn_qwen3) + 2 * moe_mlp + 4 * dense_mlp + 32 + 50 * 32);

  // Encoder block: 2 LayerNorms, qkv + out with biases, fc1 + fc2 with biases.
  const int64_t block = 2 * 2 * 32 + (32 * 96 + 96) + (32 * 32 + 32) + (32 * 64 + 64) + (64 * 32 + 32);
  // ViT: conv 3x4x4 -> 32 + bias, positions N=4, 2 blocks, final LayerNorm.
  EXPECT_EQ(ParameterCount(fixtures::TinyVitModel()).value(), (3 * 4 * 4 * 32 + 32) + 4 * 32 + 2 * block + 2 * 32);
  // Whisper: conv1 (32, 10, 3) + bias, conv2 (32, 32, 3) + bias, positions
  // ceil(12 / 2) x 32, blocks without the k bias.
  EXPECT_EQ(ParameterCount(fixtures::TinyAudioModel()).value(),
            (10 * 3 * 32 + 32) + (32 * 3 * 32 + 32) + 6 * 32 + 2 * (block - 32) + 2 * 32);
  // CLIP: conv without bias, class embedding, positions 1+4, pre-norm, blocks
  // (separate q/k/v with biases: as many as fused), post-norm.
  EXPECT_EQ(ParameterCount(fixtures::TinyClipVisionModel()).value(),
            3 * 4 * 4 * 32 + 32 + 5 * 32 + 2 * 32 + 2 * block + 2 * 32);
  // Qwen2-VL: Conv3d (32, 3, 2, 4, 4) without bias, blocks with F = 128, no
  // final norm, merger: ln_q, 128 -> 128, 128 -> 24.
  const int64_t block128 = 2 * 2 * 32 + (32 * 96 + 96) + (32 * 32 + 32) + (32 * 128 + 128) + (128 * 32 + 32);
  EXPECT_EQ(ParameterCount(fixtures::TinyQwen2VlVisionModel()).value(),
            32 * 3 * 2 * 4 * 4 + 2 * block128 + 2 * 32 + (128 * 128 + 128) + (128 * 24 + 24));
  // Qwen2: the dense decoder with D = 12, q/k/v biases, tied head.
  const int64_t attn_qwen = 32 * 48 + 48 + 2 * (32 * 24 + 24) + 48 * 32;
  EXPECT_EQ(ParameterCount(TinyQwen2()).value(), 50 * 32 + 2 * (2 * 32 + attn_qwen + 3 * 32 * 48) + 32);
  // Projector 24 -> 32 -> 32.
  EXPECT_EQ(ParameterCount(TinyProjector()).value(), (24 * 32 + 32) + (32 * 32 + 32));
}

// Published sizes, counted on the meta device (nothing allocated).
TEST(RuntimeModels, ParameterCountOfPublishedModels) {
  ModelDesc llama2_7b;
  llama2_7b.kind = ModelKind::kDecoder;
  llama2_7b.hidden = 4096;
  llama2_7b.layers = 32;
  llama2_7b.heads = 32;
  llama2_7b.ffn_hidden = 11008;
  llama2_7b.vocab = 32000;
  EXPECT_EQ(ParameterCount(llama2_7b).value(), 6738415616);  // Llama-2-7B

  ModelDesc mixtral = llama2_7b;
  mixtral.kv_heads = 8;
  mixtral.ffn_hidden = 0;
  mixtral.experts = 8;
  mixtral.experts_per_token = 2;
  mixtral.moe_ffn_hidden = 14336;
  EXPECT_EQ(ParameterCount(mixtral).value(), 46702792704);  // Mixtral-8x7B
}

TEST(RuntimeModels, BadDescsAreInvalidArgumentNotACrash) {
  auto expect_invalid = [](ModelDesc d, const std::string& mentions) {
    auto count = ParameterCount(d);
    ASSERT_FALSE(count.ok()) << mentions;
    EXPECT_EQ(count.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(count.status().message().find(mentions), std::string::npos) << count.status().message();
    EXPECT_FALSE(BuildModel(d).ok());
  };
  ModelDesc d = fixtures::TinyDecoderModel();
  d.kv_heads = 3;
  expect_invalid(d, "kv_heads");
  d = fixtures::TinyDecoderModel();
  d.vocab = 0;
  expect_invalid(d, "vocab");
  d = fixtures::TinyDecoderModel();
  d.hidden = 30;  // 30 / 4 heads
  expect_invalid(d, "divisible by heads");
  d = fixtures::TinyDecoderModel();
  d.head_dim = 7;  // RoPE needs even
  expect_invalid(d, "even head_dim");
  d = TinyMoeDecoder();
  d.experts_per_token = 5;
  expect_invalid(d, "experts_per_token");
  d = fixtures::TinyVitModel();
  d.patch_size = 3;
  expect_invalid(d, "patch_size");
  d = fixtures::TinyAudioModel();
  d.mel_bins = 0;
  expect_invalid(d, "mel_bins");
  d = TinyProjector();
  d.out_dim = -1;
  expect_invalid(d, "out_dim");
  d = fixtures::TinyDecoderModel();
  d.extra["attn_out_bias"] = 1;  // counted by the compiler for attention_bias configs, not built
  expect_invalid(d, "attn_out_bias");
  d = fixtures::TinyDecoderModel();
  d.extra[plan::kLegacyRopeScalingKey] = 1;  // a plan.json from before rope scaling was read
  expect_invalid(d, "compile the spec again");
  EXPECT_TRUE(plan::ValidateModelDesc(TinyLlama31()).ok());
  EXPECT_TRUE(plan::ValidateModelDesc(TinyQwen25Yarn()).ok());
  d = TinyLlama31();
  d.extra[plan::kRopeScalingTypeKey] = static_cast<int>(plan::RopeType::kDynamic);
  expect_invalid(d, "live sequence length");
  d.extra[plan::kRopeScalingTypeKey] = 9;
  expect_invalid(d, "extra.rope_scaling_type one of");
  d = TinyLlama31();
  d.extra[plan::kRopeScalingHighFreqFactorKey] = 1.0;
  expect_invalid(d, "rope_scaling_high_freq_factor");
  d = TinyLlama31();
  d.extra.erase(plan::kRopeScalingOriginalMaxPositionsKey);
  expect_invalid(d, "rope_scaling_original_max_position_embeddings");
  d = TinyQwen25Yarn();
  d.extra[plan::kRopeScalingFactorKey] = 0.5;
  expect_invalid(d, "rope_scaling_factor >= 1");
  d = fixtures::TinyVitModel();
  d.extra["cls_token"] = 1;  // the built-in ViT has none
  expect_invalid(d, "cls_token");
  d = fixtures::TinyClipVisionModel();
  d.extra["spatial_merge"] = 2;
  expect_invalid(d, "patch merger");
  d = fixtures::TinyClipVisionModel();
  d.extra.erase("patch_bias");  // the compiler would count a bias CLIP does not have
  expect_invalid(d, "patch_bias");
  d = fixtures::TinyQwen2VlVisionModel();
  d.extra["merger_hidden"] = 64;
  expect_invalid(d, "merger_hidden");
  d = fixtures::TinyVitModel();
  d.extra["vit_layout"] = 3;
  expect_invalid(d, "not built by the runtime");
  d = fixtures::TinyAudioModel();
  d.extra["max_source_positions"] = 5;  // 12 frames need 6
  expect_invalid(d, "max_source_positions");
  EXPECT_FALSE(BuildDecoder(fixtures::TinyVitModel()).ok());
  EXPECT_FALSE(BuildVitEncoder(fixtures::TinyDecoderModel()).ok());
}

}  // namespace
}  // namespace maestro::runtime
