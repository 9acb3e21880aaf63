// SPDX-License-Identifier: Apache-2.0
// The compiler plans with analytic parameter counts (compiler/model.h); the
// runtime builds real modules (plan/model_desc.h). For every model
// kind, both must count the same parameters for the same descriptor, or the
// planner's memory and FLOP estimates describe a model that never runs.
// And what the runtime exports (runtime/hf_export.h's config.json) the
// compiler imports back to the same desc: rope scaling included.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "compiler/model.h"
#include "hf/name_map.h"
#include "plan/model_desc.h"
#include "plan/mrope.h"
#include "runtime/hf_export.h"
#include "runtime/models/parameter_count.h"
#include "tests/fixtures/models.h"
#include "tests/fixtures/test_paths.h"

namespace maestro {
namespace {

using plan::ModelDesc;
using plan::ModelKind;

ModelDesc Decoder(bool moe, bool tied) {
  ModelDesc d = fixtures::DecoderModel({64, 2, 4, 2, 176, 97});
  d.tie_embeddings = tied;
  if (moe) {
    d.experts = 4;
    d.experts_per_token = 2;
    d.moe_ffn_hidden = 96;
  }
  return d;
}

void ExpectAgree(const ModelDesc& d, const char* what) {
  ASSERT_TRUE(compiler::CheckModelShape(d, what).ok()) << what;
  const auto built = runtime::ParameterCount(d);
  ASSERT_TRUE(built.ok()) << what << ": " << built.status().ToString();
  EXPECT_EQ(compiler::ComputeModelFacts(d, 0).params, *built) << what;
}

TEST(CompilerRuntimeAgreement, DecoderDenseMoeAndTied) {
  ExpectAgree(Decoder(false, false), "dense decoder");
  ExpectAgree(Decoder(true, false), "MoE decoder");
  ExpectAgree(Decoder(false, true), "tied decoder");
}

// Qwen2-MoE's shared expert and its gate; Qwen3-MoE's q/k head norms.
TEST(CompilerRuntimeAgreement, DecoderQwenMoeSharedExpertAndQkNorm) {
  ModelDesc qwen2 = Decoder(true, false);
  qwen2.extra["shared_expert_ffn_hidden"] = 80;
  qwen2.extra["qkv_bias"] = 1;
  ExpectAgree(qwen2, "qwen2_moe-like decoder");
  ModelDesc qwen3 = Decoder(true, true);
  qwen3.head_dim = 24;
  qwen3.extra["qk_norm"] = 1;
  ExpectAgree(qwen3, "qwen3_moe-like decoder");
}

TEST(CompilerRuntimeAgreement, DecoderWithQkvBiasAndHeadDim) {
  ModelDesc d = Decoder(false, true);
  d.head_dim = 24;
  d.extra["qkv_bias"] = 1;
  ExpectAgree(d, "qwen2-like decoder");
}

// The built-in ViT has no CLS token; the spec says so with cls_token = false,
// and the compiler then counts what is built, patch merger included.
ModelDesc Vit(int64_t merge) {
  ModelDesc d = fixtures::VitModel({32, 2, 4, 64, 28, 7, 1});
  d.extra["cls_token"] = 0;
  if (merge > 0) {
    d.extra["spatial_merge"] = static_cast<double>(merge);
    d.extra["merger_hidden"] = 48;
    d.out_dim = 40;
  }
  return d;
}

TEST(CompilerRuntimeAgreement, VitWithoutClsTokenWithAndWithoutPatchMerger) {
  ExpectAgree(Vit(0), "vit");
  ExpectAgree(Vit(1), "vit with a 1x1 merger");
  ExpectAgree(Vit(2), "vit with a 2x2 merger");
}

TEST(CompilerRuntimeAgreement, WhisperAudioEncoder) {
  ModelDesc d = fixtures::AudioEncoderModel({32, 2, 4, 64, 16, 16});
  ExpectAgree(d, "audio encoder");
  // By hand: conv1 16x32x3 + 32, conv2 32x32x3 + 32, positions 8 x 32, per
  // layer q/k/v/o 4 x 32^2 + fc1/fc2 2 x 32 x 64 + biases (q, v, o: 3 x 32;
  // fc1 64, fc2 32) + 2 LayerNorms 4 x 32, the final LayerNorm 2 x 32.
  EXPECT_EQ(runtime::ParameterCount(d).value(),
            (16 * 32 * 3 + 32) + (32 * 32 * 3 + 32) + 8 * 32 + 2 * (8192 + 96 + 64 + 32 + 128) + 64);
  d.audio_frames = 15;  // odd: ceil(15 / 2) = 8 positions
  ExpectAgree(d, "audio encoder, odd frames");
  d.extra["max_source_positions"] = 10;
  ExpectAgree(d, "audio encoder, max_source_positions");
}

// Every published config the compiler imports builds at runtime with the
// parameter count the planner uses (built on the meta device: nothing is
// allocated), except HF ViTModel, which the runtime refuses by name.
TEST(CompilerRuntimeAgreement, EveryImportedHuggingFaceConfig) {
  const std::string dir = std::string(MAESTRO_SOURCE_DIR) + "/tests/compiler/data/hf/";
  for (const char* file :
       {"llama2_7b.json", "mistral_7b_v0.1.json", "qwen2_7b.json", "qwen2_0.5b.json", "mixtral_8x7b.json",
        "clip_vit_large_patch14.json", "qwen2_vl_7b.json", "whisper_large_v3.json", "siglip_so400m_patch14_384.json"}) {
    auto d = compiler::ModelFromHfConfigFile(dir + file);
    ASSERT_TRUE(d.ok()) << file << ": " << d.status().ToString();
    ExpectAgree(*d, file);
  }
  auto vit = compiler::ModelFromHfConfigFile(dir + "vit_base_patch16_224.json");
  ASSERT_TRUE(vit.ok());
  auto refused = runtime::ParameterCount(*vit);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("not built by the runtime"), std::string::npos)
      << refused.status().message();
}

// Specs may describe the published towers by shape: the Qwen2-VL tower of
// specs/qwen2vl_7b_mllm.toml (pos_embed = false) and a CLIP one.
TEST(CompilerRuntimeAgreement, ClipAndQwen2VlTowersDescribedByShape) {
  ModelDesc clip = Vit(0);
  clip.extra.clear();
  clip.extra["vit_layout"] = 1;
  clip.extra["cls_token"] = 1;
  clip.extra["patch_bias"] = 0;
  clip.extra["pre_norm"] = 1;
  ExpectAgree(clip, "clip");
  ModelDesc qwen = Vit(2);
  qwen.extra["cls_token"] = 0;
  qwen.extra["pos_embed"] = 0;
  qwen.extra["patch_bias"] = 0;
  qwen.extra["final_norm"] = 0;
  qwen.extra["temporal_patch"] = 2;
  qwen.extra["merger_hidden"] = 4 * 32;
  ExpectAgree(qwen, "qwen2-vl tower by shape");
}

TEST(CompilerRuntimeAgreement, Projector) {
  ModelDesc proj;
  proj.kind = ModelKind::kProjector;
  proj.in_dim = 48;
  proj.out_dim = 64;
  ExpectAgree(proj, "projector");
}

// A dense decoder with q/k norms exports as Qwen3 (model_type qwen3, its
// q_norm / k_norm kept) and re-imports with them; with q/k/v biases only
// (Qwen2's) as well, no family describes it: refused, naming both keys.
TEST(CompilerRuntimeAgreement, ADenseDecoderWithQkNormsExportsAsQwen3) {
  ModelDesc qwen3 = fixtures::DecoderModel({64, 2, 4, 2, 176, 97});
  qwen3.head_dim = 32;
  qwen3.extra[plan::kQkNormKey] = 1;
  auto text = runtime::DecoderConfigJson(qwen3, 4096, "float32");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(*text).at("model_type"), "qwen3") << *text;
  auto back = compiler::ModelFromHfConfig(*text, "exported config.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << *text;
  EXPECT_TRUE(plan::QkNorm(*back));
  EXPECT_FALSE(plan::QkvBias(*back));
  EXPECT_EQ(back->head_dim, 32);
  EXPECT_EQ(compiler::ComputeModelFacts(*back, 16).params, compiler::ComputeModelFacts(qwen3, 16).params);

  qwen3.extra[plan::kQkvBiasKey] = 1;
  auto refused = runtime::DecoderConfigJson(qwen3, 4096, "float32");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("qk_norm"), std::string::npos) << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("qkv_bias"), std::string::npos) << refused.status().ToString();
}

// Gemma 3 text: the runtime builds what the compiler counts (sandwich norms,
// q/k norms), and the export writes a gemma3_text config.json that imports
// back to the same layer kinds, RoPE bases, scale and count.
TEST(CompilerRuntimeAgreement, Gemma3ExportsAsGemma3TextAndReimports) {
  ModelDesc gemma = Decoder(false, true);
  gemma.head_dim = 32;
  gemma.layers = 4;
  gemma.extra[plan::kGemma3Key] = 1;
  gemma.extra[plan::kQkNormKey] = 1;
  gemma.extra[plan::kSlidingWindowKey] = 8;
  gemma.extra[plan::kSlidingWindowPatternKey] = 2;
  gemma.extra[plan::kRopeLocalBaseFreqKey] = 10000;
  gemma.extra[plan::kRopeThetaKey] = 1e6;
  gemma.extra[plan::kQueryPreAttnScalarKey] = 24;
  gemma.extra[plan::kRopeScalingTypeKey] = static_cast<int>(plan::RopeType::kLinear);
  gemma.extra[plan::kRopeScalingFactorKey] = 8;
  ExpectAgree(gemma, "gemma3-like decoder");
  auto text = runtime::DecoderConfigJson(gemma, 4096, "bfloat16");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(*text).at("model_type"), "gemma3_text") << *text;
  auto back = compiler::ModelFromHfConfig(*text, "exported config.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << *text;
  EXPECT_TRUE(plan::Gemma3(*back));
  EXPECT_EQ(back->head_dim, 32);
  for (int64_t i = 0; i < gemma.layers; ++i) {
    EXPECT_EQ(plan::IsSlidingLayer(*back, i), plan::IsSlidingLayer(gemma, i)) << "layer " << i;
    EXPECT_EQ(plan::RopeThetaOf(*back, i), plan::RopeThetaOf(gemma, i)) << "layer " << i;
    EXPECT_EQ(plan::RopeScalingOf(*back, i).factor, plan::RopeScalingOf(gemma, i).factor) << "layer " << i;
  }
  EXPECT_EQ(plan::AttentionScale(*back), plan::AttentionScale(gemma));
  EXPECT_EQ(compiler::ComputeModelFacts(*back, 16).params, compiler::ComputeModelFacts(gemma, 16).params);
  gemma.extra.erase(plan::kQkNormKey);
  EXPECT_FALSE(runtime::DecoderConfigJson(gemma, 4096, "bfloat16").ok()) << "gemma3_text always has q/k norms";
}

// An M-RoPE decoder of Qwen2-VL's shape exports as qwen2_vl (its language
// model's keys, rope_scaling type mrope with the sections) and re-imports with
// part = "text" to the same sections and count; one of another shape
// (interleaved: Qwen3-VL, whose text model has DeepStack inputs) is refused.
TEST(CompilerRuntimeAgreement, AnMropeDecoderExportsAsQwen2VlAndReimports) {
  ModelDesc vl = fixtures::DecoderModel({64, 2, 4, 2, 176, 97});  // head_dim 16: 8 frequencies
  vl.extra[plan::kQkvBiasKey] = 1;
  vl.extra[plan::kRopeThetaKey] = 1e6;
  vl.extra[plan::kMropeSectionTKey] = 2;
  vl.extra[plan::kMropeSectionHKey] = 3;
  vl.extra[plan::kMropeSectionWKey] = 3;
  ExpectAgree(vl, "qwen2-vl-like decoder");
  auto text = runtime::DecoderConfigJson(vl, 4096, "bfloat16");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  const auto j = nlohmann::json::parse(*text);
  EXPECT_EQ(j.at("model_type"), "qwen2_vl") << *text;
  EXPECT_EQ(j.at("rope_scaling").at("mrope_section"), nlohmann::json::array({2, 3, 3})) << *text;
  EXPECT_FALSE(compiler::ModelFromHfConfig(*text, "exported config.json", "vision").ok())
      << "an exported language model has no vision_config";
  auto back = compiler::ModelFromHfConfig(*text, "exported config.json", "text");
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << *text;
  const auto m = plan::MropeOf(*back);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->section[0], 2);
  EXPECT_EQ(m->section[1], 3);
  EXPECT_EQ(m->section[2], 3);
  EXPECT_FALSE(m->interleaved);
  EXPECT_TRUE(plan::QkvBias(*back));
  EXPECT_EQ(compiler::ComputeModelFacts(*back, 16).params, compiler::ComputeModelFacts(vl, 16).params);
  vl.extra[plan::kMropeInterleavedKey] = 1;
  vl.extra[plan::kMropeSectionTKey] = 4;
  vl.extra[plan::kMropeSectionHKey] = 2;
  vl.extra[plan::kMropeSectionWKey] = 2;
  EXPECT_FALSE(runtime::DecoderConfigJson(vl, 4096, "bfloat16").ok());
}

// Every rope scaling parameter written by the export comes back from the
// compiler's import, so an exported folder trains as the run did.
TEST(CompilerRuntimeAgreement, ExportedRopeScalingReimportsIdentically) {
  ModelDesc llama = fixtures::DecoderModel({64, 2, 4, 2, 176, 97});
  llama.extra[plan::kRopeThetaKey] = 500000.0;
  llama.extra[plan::kRopeScalingTypeKey] = static_cast<int>(plan::RopeType::kLlama3);
  llama.extra[plan::kRopeScalingFactorKey] = 8.0;
  llama.extra[plan::kRopeScalingLowFreqFactorKey] = 1.0;
  llama.extra[plan::kRopeScalingHighFreqFactorKey] = 4.0;
  llama.extra[plan::kRopeScalingOriginalMaxPositionsKey] = 8192;
  ModelDesc yarn = fixtures::DecoderModel({64, 2, 4, 2, 176, 97});
  yarn.extra[plan::kQkvBiasKey] = 1;  // exported as qwen2
  yarn.extra[plan::kRopeScalingTypeKey] = static_cast<int>(plan::RopeType::kYarn);
  yarn.extra[plan::kRopeScalingFactorKey] = 4.0;
  yarn.extra[plan::kRopeScalingOriginalMaxPositionsKey] = 32768;
  yarn.extra[plan::kRopeScalingBetaFastKey] = 16.0;
  yarn.extra[plan::kRopeScalingTruncateKey] = 0;
  yarn.extra[plan::kRopeScalingAttentionFactorKey] = 1.25;
  ModelDesc linear = fixtures::DecoderModel({64, 2, 4, 2, 176, 97});
  linear.extra[plan::kRopeScalingTypeKey] = static_cast<int>(plan::RopeType::kLinear);
  linear.extra[plan::kRopeScalingFactorKey] = 2.0;
  for (const ModelDesc& d : {llama, yarn, linear, fixtures::DecoderModel({64, 2, 4, 2, 176, 97})}) {
    const plan::RopeScaling want = plan::RopeScalingOf(d);
    SCOPED_TRACE(plan::RopeTypeName(want.type));
    auto text = runtime::DecoderConfigJson(d, 131072, "float32");
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    auto back = compiler::ModelFromHfConfig(*text, "exported config.json");
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << *text;
    ASSERT_TRUE(plan::ValidateModelDesc(*back).ok());
    const plan::RopeScaling got = plan::RopeScalingOf(*back);
    EXPECT_EQ(got.type, want.type) << *text;
    EXPECT_EQ(plan::RopeTheta(*back), plan::RopeTheta(d));
    // Every rope_scaling_* key of the desc comes back with its value.
    for (const auto& [key, value] : d.extra) {
      if (key.rfind("rope_scaling", 0) != 0) continue;
      ASSERT_TRUE(back->extra.count(key)) << key << " lost:\n" << *text;
      EXPECT_EQ(back->extra.at(key), value) << key;
    }
    EXPECT_EQ(got.factor, want.factor);
    EXPECT_EQ(got.low_freq_factor, want.low_freq_factor);
    EXPECT_EQ(got.high_freq_factor, want.high_freq_factor);
    EXPECT_EQ(got.original_max_position_embeddings, want.original_max_position_embeddings);
    EXPECT_EQ(got.beta_fast, want.beta_fast);
    EXPECT_EQ(got.beta_slow, want.beta_slow);
    EXPECT_EQ(got.attention_factor, want.attention_factor);
    EXPECT_EQ(got.truncate, want.truncate);
    EXPECT_EQ(plan::RopeInverseFrequencies(1e4, 16, got), plan::RopeInverseFrequencies(1e4, 16, want));
  }
}

// A MoE decoder exports as the family its tensor names are in
// (hf::WeightLayoutOf): Mixtral when it has nothing only Qwen-MoE has;
// Qwen3-MoE with q/k norms and dense layers between its MoE layers; Qwen2-MoE
// with a shared expert. Each re-imports with the same layers, names and count.
TEST(CompilerRuntimeAgreement, MoeDecodersExportAsTheirFamilyAndReimportIdentically) {
  ModelDesc mixtral = fixtures::DecoderModel({64, 4, 4, 2, 0, 97});
  mixtral.experts = 4;
  mixtral.experts_per_token = 2;
  mixtral.moe_ffn_hidden = 32;
  mixtral.extra[plan::kRouterAuxLossCoefKey] = 0.01;
  ModelDesc qwen3 = mixtral;
  qwen3.head_dim = 24;
  qwen3.ffn_hidden = 96;
  qwen3.extra[plan::kQkNormKey] = 1;
  qwen3.extra[plan::kDecoderSparseStepKey] = 2;
  qwen3.extra[std::string(plan::kMlpOnlyLayerKeyPrefix) + "1"] = 1;
  ModelDesc qwen2 = mixtral;
  qwen2.extra[plan::kSharedExpertFfnHiddenKey] = 48;
  qwen2.extra[plan::kNormTopkProbKey] = 0;
  qwen2.extra[plan::kQkvBiasKey] = 1;
  for (const auto& [d, type] : std::vector<std::pair<ModelDesc, std::string>>{
           {mixtral, "mixtral"}, {qwen3, "qwen3_moe"}, {qwen2, "qwen2_moe"}}) {
    SCOPED_TRACE(type);
    auto text = runtime::DecoderConfigJson(d, 4096, "float32");
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(nlohmann::json::parse(*text).at("model_type"), type) << *text;
    auto back = compiler::ModelFromHfConfig(*text, "exported config.json");
    ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << *text;
    ASSERT_TRUE(plan::ValidateModelDesc(*back).ok());
    for (int64_t i = 0; i < d.layers; ++i) EXPECT_EQ(plan::IsMoeLayer(*back, i), plan::IsMoeLayer(d, i)) << i;
    EXPECT_EQ(compiler::ComputeModelFacts(*back, 16).params, compiler::ComputeModelFacts(d, 16).params) << *text;
    EXPECT_EQ(runtime::ParameterCount(*back).value(), runtime::ParameterCount(d).value());
    EXPECT_EQ(plan::NormTopkProb(*back), plan::NormTopkProb(d));
    EXPECT_EQ(plan::RouterAuxLossCoef(*back), plan::RouterAuxLossCoef(d));
    auto names = hf::ExpandWeightNames(d), names_back = hf::ExpandWeightNames(*back);
    ASSERT_TRUE(names.ok() && names_back.ok());
    ASSERT_EQ(names->weights.size(), names_back->weights.size());
    for (size_t k = 0; k < names->weights.size(); ++k) {
      EXPECT_EQ(names->weights[k].hf_name, names_back->weights[k].hf_name);
      EXPECT_EQ(names->weights[k].shape, names_back->weights[k].shape);
    }
  }
  EXPECT_EQ(plan::MoeLayerCount(qwen3), 1) << "layers 1 and 3 by the step, 1 dense by mlp_only_layers: 3 alone";
}

}  // namespace
}  // namespace maestro
