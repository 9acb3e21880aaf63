// SPDX-License-Identifier: Apache-2.0
// Exact parameter counts of imported Hugging Face configs against the
// published numbers (and a hand derivation in docs/spec.md), FLOPs per token
// against the documented formula, and maestro-compile --model-info --json.
#include "compiler/model.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "base/shell.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "plan/model_desc.h"
#include "plan/mrope.h"
#include "plan/rope_scaling.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

const std::string kHf = std::string(MAESTRO_SOURCE_DIR) + "/tests/compiler/data/hf/";

ModelFacts FactsOf(const std::string& file, int64_t seq = 4096) {
  auto d = ModelFromHfConfigFile(kHf + file);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return ComputeModelFacts(*d, seq);
}

TEST(ModelFacts, DecodersMatchPublishedParameterCounts) {
  EXPECT_EQ(FactsOf("llama2_7b.json").params, 6'738'415'616);
  EXPECT_EQ(FactsOf("mistral_7b_v0.1.json").params, 7'241'732'096);
  EXPECT_EQ(FactsOf("qwen2_7b.json").params, 7'615'616'512);  // q/k/v biases
  EXPECT_EQ(FactsOf("qwen2_0.5b.json").params, 494'032'768);  // tied embeddings
}

TEST(ModelFacts, MixtralCountsAllExpertsAndActivatesTwo) {
  const ModelFacts f = FactsOf("mixtral_8x7b.json");
  EXPECT_EQ(f.params, 46'702'792'704);
  EXPECT_EQ(f.active_params, 12'879'925'248);  // ~12.9B: 2 of 8 experts per token
  EXPECT_LT(f.active_params, f.params);
}

// Qwen1.5-MoE-A2.7B (qwen2_moe): 60 experts of 1408, top 4, a shared expert
// of 5632 with its sigmoid gate, q/k/v biases: the published 14.3B total,
// 2.7B activated. Qwen3-30B-A3B (qwen3_moe): 128 experts of 768, top 8,
// q_norm / k_norm: 30.5B total, 3.3B activated.
TEST(ModelFacts, QwenMoeCountsMatchThePublishedTotalsAndActivatedParameters) {
  const ModelFacts q2 = FactsOf("qwen1.5_moe_a2.7b.json");
  const int64_t embed = 151'936LL * 2048;
  const int64_t q2_attn = 4LL * 2048 * 2048 + 3 * 2048;  // q/k/v/o + q/k/v biases
  const int64_t q2_shared = 3LL * 2048 * 5632 + 2048;    // shared expert + its gate
  const int64_t q2_expert = 3LL * 2048 * 1408;
  EXPECT_EQ(q2.params, 2 * embed + 24 * (q2_attn + 2 * 2048 + 60 * 2048 + 60 * q2_expert + q2_shared) + 2048);
  EXPECT_EQ(q2.params, 14'315'784'192);
  EXPECT_EQ(q2.active_params, 2 * embed + 24 * (q2_attn + 2 * 2048 + 60 * 2048 + 4 * q2_expert + q2_shared) + 2048);
  EXPECT_EQ(q2.active_params, 2'689'173'504);

  const ModelFacts q3 = FactsOf("qwen3_30b_a3b.json");
  const int64_t q3_attn = 2048LL * 4096 * 2 + 2 * 2048LL * 512 + 2 * 128;  // q/o, k/v, q_norm/k_norm
  const int64_t q3_expert = 3LL * 2048 * 768;
  EXPECT_EQ(q3.params, 2 * embed + 48 * (q3_attn + 2 * 2048 + 128 * 2048 + 128 * q3_expert) + 2048);
  EXPECT_EQ(q3.params, 30'532'122'624);
  EXPECT_EQ(q3.active_params, 3'353'032'704);
}

// Qwen3-0.6B (qwen3, dense; its config.json as published, Qwen/Qwen3-0.6B):
// head_dim 128 (not hidden / heads = 64), q_norm / k_norm of 128 in every
// layer, no biases, tied embeddings. The model card gives 0.6B parameters,
// 0.44B of them not the embedding; the exact total is the published shapes'.
TEST(ModelFacts, Qwen3DenseCountsItsHeadDimAndQkNorms) {
  const ModelFacts f = FactsOf("qwen3_0.6b.json");
  const int64_t embed = 151'936LL * 1024;
  const int64_t attn = 2 * 1024LL * 2048 + 2 * 1024LL * 1024 + 2 * 128;  // q/o (16 x 128), k/v (8 x 128), norms
  const int64_t mlp = 3LL * 1024 * 3072;
  EXPECT_EQ(f.params, embed + 28 * (attn + mlp + 2 * 1024) + 1024);
  EXPECT_EQ(f.params, 596'049'920);
  EXPECT_EQ(std::llround((f.params - embed) / 1e7), 44) << "the card's 0.44B without the embedding";
  auto d = ModelFromHfConfigFile(kHf + "qwen3_0.6b.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->head_dim, 128);
  EXPECT_EQ(d->extra.at("qk_norm"), 1);
  EXPECT_EQ(d->extra.count("qkv_bias"), 0u);
  EXPECT_EQ(d->extra.count("sliding_window"), 0u);  // use_sliding_window is false
  EXPECT_EQ(d->extra.at("rope_theta"), 1e6);
  EXPECT_TRUE(d->tie_embeddings);
  EXPECT_TRUE(plan::ValidateModelDesc(*d).ok()) << plan::ValidateModelDesc(*d).ToString();
  // Qwen3Config's head_dim default is 128, whatever hidden / heads is.
  auto no_head_dim = ModelFromHfConfig(R"({"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 1,
    "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128})",
                                       "qwen3.json");
  ASSERT_TRUE(no_head_dim.ok()) << no_head_dim.status().ToString();
  EXPECT_EQ(no_head_dim->head_dim, 128);
}

// Mistral 7B's window of 4096: at 4096 tokens every query attends its
// causal prefix (s/2 keys on average); at 8192 the first 4096 queries their
// prefix and the rest 4096 keys, W - W^2/(2s) = 3072 on average: the useful
// attention FLOPs the utilization counts (the step model prices what the
// runtime computes, the masked square: step_model_test).
TEST(ModelFacts, MistralsWindowBoundsTheKeysAQueryAttends) {
  const double q = 32.0 * 128, layers = 32;
  EXPECT_DOUBLE_EQ(FactsOf("mistral_7b_v0.1.json", 4096).attention_flops_per_token, 4 * layers * 2048 * q);
  EXPECT_DOUBLE_EQ(FactsOf("mistral_7b_v0.1.json", 8192).attention_flops_per_token, 4 * layers * 3072 * q);
  EXPECT_DOUBLE_EQ(FactsOf("llama2_7b.json", 8192).attention_flops_per_token, 4 * layers * 4096 * q);
}

// The four configs the cross-family KD examples read (specs/hf, as published
// on the Hugging Face hub; specs/kd_llama31_70b_to_llama32_1b.toml and
// specs/kd_qwen3_32b_to_0_6b.toml), counted exactly. The expected totals are
// the checkpoints' own: each model.safetensors(.index.json)'s total_size of
// bf16 bytes over 2 (141,107,412,992; 2,471,628,800; 65,524,246,528;
// 1,192,099,840), and each is derived here from the shapes.
TEST(ModelFacts, TheCrossFamilyKdConfigsCountAsTheirCheckpoints) {
  const std::string specs_hf = std::string(MAESTRO_SOURCE_DIR) + "/specs/hf/";
  const auto facts = [&](const std::string& file) {
    auto d = ModelFromHfConfigFile(specs_hf + file);
    EXPECT_TRUE(d.ok()) << file << ": " << d.status().ToString();
    return d.ok() ? ComputeModelFacts(*d, 4096) : ModelFacts{};
  };
  // Llama 3.1 70B: 80 layers of 8192, GQA 64/8 heads of 128, SwiGLU 28672,
  // untied head; Llama 3.2 1B: 16 layers of 2048, 32/8 heads of 64, tied.
  const int64_t llama_vocab = 128'256;
  const int64_t l70_layer = 2 * 8192LL * 8192 + 2 * 8192LL * 1024 + 3 * 8192LL * 28672 + 2 * 8192;
  EXPECT_EQ(facts("llama3_1_70b.json").params, 2 * llama_vocab * 8192 + 80 * l70_layer + 8192);
  EXPECT_EQ(facts("llama3_1_70b.json").params, 70'553'706'496);
  const int64_t l1_layer = 2 * 2048LL * 2048 + 2 * 2048LL * 512 + 3 * 2048LL * 8192 + 2 * 2048;
  EXPECT_EQ(facts("llama3_2_1b.json").params, llama_vocab * 2048 + 16 * l1_layer + 2048);
  EXPECT_EQ(facts("llama3_2_1b.json").params, 1'235'814'400);
  // Qwen3-32B: 64 layers of 5120, 64/8 heads of 128 (q is 8192 wide), q/k
  // norms, SwiGLU 25600, untied; Qwen3-0.6B as in the test above.
  const int64_t q32_layer = 2 * 5120LL * 8192 + 2 * 5120LL * 1024 + 2 * 128 + 3 * 5120LL * 25600 + 2 * 5120;
  EXPECT_EQ(facts("qwen3_32b.json").params, 2 * 151'936LL * 5120 + 64 * q32_layer + 5120);
  EXPECT_EQ(facts("qwen3_32b.json").params, 32'762'123'264);
  EXPECT_EQ(facts("qwen3_0_6b.json").params, 596'049'920);

  // Llama 3.1's frequency scaling comes in with each parameter.
  for (const auto& [file, factor] : {std::pair{"llama3_1_70b.json", 8.0}, std::pair{"llama3_2_1b.json", 32.0}}) {
    auto d = ModelFromHfConfigFile(specs_hf + file);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->extra.at(plan::kRopeScalingTypeKey), static_cast<int>(plan::RopeType::kLlama3)) << file;
    EXPECT_EQ(d->extra.at(plan::kRopeScalingFactorKey), factor) << file;
    EXPECT_EQ(d->extra.at(plan::kRopeScalingOriginalMaxPositionsKey), 8192) << file;
    EXPECT_EQ(d->extra.at("rope_theta"), 500000.0) << file;
    EXPECT_TRUE(plan::ValidateModelDesc(*d).ok()) << file << ": " << plan::ValidateModelDesc(*d).ToString();
  }
  auto q32 = ModelFromHfConfigFile(specs_hf + "qwen3_32b.json");
  ASSERT_TRUE(q32.ok()) << q32.status().ToString();
  EXPECT_EQ(q32->head_dim, 128);
  EXPECT_EQ(q32->extra.at("qk_norm"), 1);
  const auto rope = q32->extra.find(plan::kRopeScalingTypeKey);
  EXPECT_TRUE(rope == q32->extra.end() || rope->second == 0) << "rope_scaling null: plain RoPE";
}

// Gemma 3 1B (gemma3_text; specs/hf/gemma3_1b.json, google/gemma-3-1b-pt's
// config.json): 26 layers of 1152, 4 query heads and 1 kv head of 256 (q is
// 1024 wide), GeGLU 6912, four norms per layer (input, post-attention, pre-
// and post-feedforward), q/k norms of 256, tied embeddings of 262144:
// embed 262144*1152 + 26 * (q 1152*1024 + k, v 2*1152*256 + o 1024*1152 +
// mlp 3*1152*6912 + 4 norms*1152 + q/k norms 2*256) + final norm 1152 =
// 999,885,952 (the card's "1B"; its bf16 model.safetensors, 2.0 GB).
TEST(ModelFacts, Gemma3TextCountsItsSandwichNormsAndSlidesFiveLayersOfSix) {
  auto d = ModelFromHfConfigFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/hf/gemma3_1b.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const ModelFacts f = ComputeModelFacts(*d, 4096);
  const int64_t layer = 1152LL * 1024 + 2 * 1152LL * 256 + 1024LL * 1152 + 3 * 1152LL * 6912 + 4 * 1152 + 2 * 256;
  EXPECT_EQ(f.params, 262'144LL * 1152 + 26 * layer + 1152);
  EXPECT_EQ(f.params, 999'885'952);
  EXPECT_EQ(d->head_dim, 256);
  EXPECT_TRUE(d->tie_embeddings);
  EXPECT_TRUE(plan::Gemma3(*d));
  EXPECT_TRUE(plan::QkNorm(*d));
  EXPECT_EQ(plan::SlidingWindow(*d), 512);
  EXPECT_DOUBLE_EQ(plan::AttentionScale(*d), 1.0 / 16);
  EXPECT_TRUE(plan::ValidateModelDesc(*d).ok()) << plan::ValidateModelDesc(*d).ToString();
  // Layers 5, 11, 17 and 23 are global ((i + 1) % 6 == 0), the other 22 local.
  EXPECT_EQ(plan::SlidingLayerCount(*d), 22);
  EXPECT_TRUE(plan::IsSlidingLayer(*d, 0));
  EXPECT_FALSE(plan::IsSlidingLayer(*d, 5));
  EXPECT_TRUE(plan::IsSlidingLayer(*d, 25));
  EXPECT_EQ(plan::RopeThetaOf(*d, 0), 10000.0);
  EXPECT_EQ(plan::RopeThetaOf(*d, 5), 1e6);
  // FLOPs: a local layer's query attends 512 - 512^2 / (2 * 4096) = 480 keys
  // on average, a global one 2048.
  EXPECT_DOUBLE_EQ(f.attention_flops_per_token, 4.0 * (22 * 480.0 + 4 * 2048.0) * 1024);
}

// A Gemma 3 config with layer_types (newer transformers) and the 4B+
// models' linear rope scaling: the listed kinds, the scaling on global
// layers only; what the runtime does not build is refused by its key.
TEST(ModelFacts, Gemma3TextReadsLayerTypesAndRefusesWhatItDoesNotBuild) {
  const std::string base = R"({"model_type": "gemma3_text", "hidden_size": 64, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 100, "intermediate_size": 128,
    "sliding_window": 16, "rope_scaling": {"rope_type": "linear", "factor": 8.0})";
  auto d = ModelFromHfConfig(base + R"(, "layer_types": ["full_attention", "sliding_attention", "full_attention"]})",
                             "gemma.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(plan::IsSlidingLayer(*d, 0));
  EXPECT_TRUE(plan::IsSlidingLayer(*d, 1));
  EXPECT_FALSE(plan::IsSlidingLayer(*d, 2));
  EXPECT_EQ(plan::RopeScalingOf(*d, 0).type, plan::RopeType::kLinear);
  EXPECT_EQ(plan::RopeScalingOf(*d, 0).factor, 8.0);
  EXPECT_EQ(plan::RopeScalingOf(*d, 1).type, plan::RopeType::kDefault);
  EXPECT_EQ(plan::RopeThetaOf(*d, 0), 1e6);  // Gemma3TextConfig's defaults
  EXPECT_EQ(plan::RopeThetaOf(*d, 1), 10000.0);
  EXPECT_DOUBLE_EQ(plan::AttentionScale(*d), 1.0 / 16);  // query_pre_attn_scalar 256 by default
  EXPECT_TRUE(d->tie_embeddings);
  EXPECT_TRUE(plan::ValidateModelDesc(*d).ok()) << plan::ValidateModelDesc(*d).ToString();
  plan::ModelDesc moe = *d;  // Gemma 3 is dense: its GeGLU is not built as experts
  moe.experts = 4;
  moe.experts_per_token = 2;
  EXPECT_NE(plan::ValidateModelDesc(moe).message().find("gemma3"), std::string::npos);
  for (const auto& [key, value] : {std::pair{"attn_logit_softcapping", "50.0"},
                                   {"final_logit_softcapping", "30.0"},
                                   {"hidden_activation", "\"gelu\""},
                                   {"layer_types", "[\"full_attention\"]"}}) {
    auto refused = ModelFromHfConfig(base + ", \"" + key + "\": " + value + "}", "gemma.json");
    ASSERT_FALSE(refused.ok()) << key;
    EXPECT_NE(refused.status().message().find(key), std::string::npos) << refused.status().ToString();
  }
  auto multimodal =
      ModelFromHfConfig(R"({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}})", "gemma3.json");
  ASSERT_FALSE(multimodal.ok());
  EXPECT_NE(multimodal.status().message().find("gemma3_text"), std::string::npos) << multimodal.status().ToString();
}

// The two cross-family KD examples compile for their clusters on this
// build's runtime: the teacher forward only and the student training on GPUs
// of their own, every section runnable, teacher and student on one
// vocabulary, and the plan not predicted slower than the monolithic
// baseline (docs/spec.md records their reports' ratios).
TEST(ModelFacts, TheCrossFamilyKdSpecsCompileForTheirClusters) {
  for (const char* name : {"kd_llama31_70b_to_llama32_1b.toml", "kd_qwen3_32b_to_0_6b.toml"}) {
    auto spec = ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/" + name);
    ASSERT_TRUE(spec.ok()) << name << ": " << spec.status().ToString();
    ASSERT_EQ(spec->models.size(), 2u) << name;
    EXPECT_EQ(spec->models[0].desc.vocab, spec->models[1].desc.vocab) << name << ": KD compares distributions";
    auto compiled = Compile(*spec, CompileOptions{});
    ASSERT_TRUE(compiled.ok()) << name << ": " << compiled.status().ToString();
    const plan::Plan& p = compiled->plan;
    ASSERT_EQ(p.sections.size(), 2u) << name;
    for (const auto& s : p.sections) {
      EXPECT_EQ(s.planner_only, "") << name << ": section " << s.name << " must run on this build's runtime";
      EXPECT_GT(s.placement.gpus_per_task, 0) << name << ": " << s.name << " runs on GPUs";
    }
    EXPECT_EQ(p.sections[static_cast<size_t>(p.section_index("teacher"))].mode, plan::SectionMode::kForward);
    const auto report = nlohmann::json::parse(compiled->report_json);
    EXPECT_GE(report["speedup_vs_monolithic"].get<double>(), 1.0) << name << "\n" << compiled->report;
  }
}

// Qwen-MoE with dense layers (transformers' Qwen2MoeDecoderLayer: layer i
// is sparse when (i + 1) % decoder_sparse_step == 0 and i is not in
// mlp_only_layers; a dense layer is an MLP of intermediate_size).
TEST(ModelFacts, QwenMoeWithDenseLayersCountsEachLayerAsItIs) {
  const std::string text = R"({"model_type": "qwen2_moe", "hidden_size": 64, "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100, "intermediate_size": 128,
    "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2, "shared_expert_intermediate_size": 48,
    "decoder_sparse_step": 2, "mlp_only_layers": [3], "tie_word_embeddings": false})";
  auto d = ModelFromHfConfig(text, "cfg.json");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  std::vector<int64_t> moe;
  for (int64_t i = 0; i < d->layers; ++i) {
    if (plan::IsMoeLayer(*d, i)) moe.push_back(i);
  }
  EXPECT_EQ(moe, std::vector<int64_t>({1, 5}));
  EXPECT_EQ(d->ffn_hidden, 128) << "the dense layers' width";
  // Per layer: attention (q, k, v, o with q/k/v biases) and 2 norms; a MoE
  // layer adds the router, 4 experts of 32 and the shared expert of 48 with
  // its (1, C) gate; a dense layer an MLP of 128.
  const int64_t attention = 4 * 64 * 64 + 3 * 64 + 2 * 64;
  const int64_t moe_mlp = 4 * 64 + 4 * 3 * 64 * 32 + 3 * 64 * 48 + 64;
  const int64_t dense_mlp = 3 * 64 * 128;
  const ModelFacts f = ComputeModelFacts(*d, 16);
  EXPECT_EQ(f.params, 2 * 100 * 64 + 6 * attention + 2 * moe_mlp + 4 * dense_mlp + 64);
  // Active: 2 of the 4 experts.
  EXPECT_EQ(f.params - f.active_params, 2 * 2 * 3 * 64 * 32);

  for (const auto& [bad, key] :
       std::vector<std::pair<std::string, std::string>>{{R"("mlp_only_layers": [6])", "mlp_only_layers"},
                                                        {R"("mlp_only_layers": "3")", "mlp_only_layers"},
                                                        {R"("decoder_sparse_step": 0)", "decoder_sparse_step"}}) {
    const std::string config = R"({"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 6,
      "num_attention_heads": 4, "vocab_size": 100, "intermediate_size": 128, )" +
                               bad + "}";
    auto refused = ModelFromHfConfig(config, "cfg.json");
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.status().message().find("cfg.json"), std::string::npos) << refused.status().ToString();
    EXPECT_NE(refused.status().message().find(key), std::string::npos) << refused.status().ToString();
  }
}

TEST(ModelFacts, EncodersMatchTheirHuggingFaceModules) {
  // ViTModel with its pooler (as from_pretrained builds it), no classifier.
  EXPECT_EQ(FactsOf("vit_base_patch16_224.json").params, 86'389'248);
  // CLIPVisionModel: no patch bias, pre- and post-LayerNorm, no projection.
  EXPECT_EQ(FactsOf("clip_vit_large_patch14.json").params, 303'179'776);
  // WhisperEncoder of large-v3 (position table counted, as HF does).
  EXPECT_EQ(FactsOf("whisper_large_v3.json").params, 636'968'960);
  // Qwen2-VL-7B's vision tower (the ~675M of the Qwen2-VL report), by hand:
  // Conv3d 3x2x14x14 -> 1280 without bias; 32 blocks of 2 LayerNorms, qkv
  // (3840 x 1280 + 3840), proj (1280^2 + 1280), fc1 / fc2 (5120) with
  // biases; the merger: ln_q, 5120 -> 5120, 5120 -> 3584.
  const int64_t block =
      4 * 1280 + (3840 * 1280 + 3840) + (1280 * 1280 + 1280) + (5120 * 1280 + 5120) + (1280 * 5120 + 1280);
  EXPECT_EQ(FactsOf("qwen2_vl_7b.json").params,
            3 * 2 * 14 * 14 * 1280 + 32 * block + 2 * 1280 + (5120 * 5120 + 5120) + (5120 * 3584 + 3584));
  EXPECT_EQ(FactsOf("qwen2_vl_7b.json").params, 675'759'104);
}

// Qwen2.5-VL-7B's vision tower (specs/hf/qwen2_5_vl_7b.json, its published
// config), by hand: Conv3d 3x2x14x14 -> 1280 without bias; 32 blocks of two
// RMSNorms (weights), qkv (3840 x 1280 + 3840), proj (1280^2 + 1280),
// gate / up (3420 x 1280 + 3420 each) and down (1280 x 3420 + 1280); the
// merger: ln_q (RMSNorm), 5120 -> 5120, 5120 -> 3584. 676,550,144, as the
// Python reference module (reference_vision.py Qwen25VlVision) sums it.
TEST(ModelFacts, Qwen25VlVisionTowerByHand) {
  const std::string path = std::string(MAESTRO_SOURCE_DIR) + "/specs/hf/qwen2_5_vl_7b.json";
  for (const std::string part : {"", "vision"}) {
    auto d = ModelFromHfConfigFile(path, part);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->extra.at("vit_layout"), plan::kVitLayoutQwen25Vl);
    EXPECT_EQ(d->hidden, 1280);
    EXPECT_EQ(d->ffn_hidden, 3420);
    EXPECT_EQ(d->out_dim, 3584);
    EXPECT_EQ(d->extra.at(plan::kVitWindowSizeKey), 112);
    EXPECT_EQ(plan::VitMergerWindow(*d), 4);
    for (int64_t i = 0; i < 32; ++i) EXPECT_EQ(plan::IsFullAttentionVitBlock(*d, i), i % 8 == 7) << i;
    const int64_t block =
        2 * 1280 + (3840 * 1280 + 3840) + (1280 * 1280 + 1280) + 2 * (3420 * 1280 + 3420) + (1280 * 3420 + 1280);
    const int64_t tower = 3 * 2 * 14 * 14 * 1280 + 32 * block + 1280 + (5120 * 5120 + 5120) + (5120 * 3584 + 3584);
    EXPECT_EQ(ComputeModelFacts(*d, 0).params, tower);
    EXPECT_EQ(tower, 676'550'144);
    EXPECT_TRUE(plan::ValidateModelDesc(*d).ok());
  }
  // The language model is Qwen2's with M-RoPE, as Qwen2-VL's.
  auto text = ModelFromHfConfigFile(path, "text");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(text->kind, plan::ModelKind::kDecoder);
}

TEST(ModelFacts, Qwen25VlVisionConfigsTheImporterRefuses) {
  auto refused = [](const std::string& vision, const std::string& mentions) {
    auto d = ModelFromHfConfig(R"({"model_type": "qwen2_5_vl", "vision_config": )" + vision + "}", "cfg", "vision");
    ASSERT_FALSE(d.ok()) << vision;
    EXPECT_NE(d.status().message().find(mentions), std::string::npos) << d.status().ToString();
  };
  refused(R"({"depth": 4, "fullatt_block_indexes": [1, 4]})", "fullatt_block_indexes holds 4");
  refused(R"({"depth": 4, "fullatt_block_indexes": 3})", "must be a list");
  refused(R"({"depth": 4, "hidden_act": "gelu"})", "silu only");
  refused(R"({"depth": 4, "window_size": 20})", "window_size");
}

// Qwen2-VL-7B's language model (part = "text"): Qwen2-7B's shape (q/k/v
// biases, untied head) with M-RoPE sections [16, 24, 24] of its 64
// frequencies; with the tower, the published 8,291,375,616 parameters
// (model.safetensors.index.json's total_size 16,582,751,232 bytes in bf16).
TEST(ModelFacts, Qwen2VlLanguageModelIsQwen2WithMrope) {
  auto text = ModelFromHfConfigFile(kHf + "qwen2_vl_7b.json", "text");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(text->kind, plan::ModelKind::kDecoder);
  EXPECT_EQ(text->extra.at("qkv_bias"), 1);
  EXPECT_EQ(text->extra.at("rope_theta"), 1e6);
  EXPECT_EQ(text->extra.at(plan::kMropeSectionTKey), 16);
  EXPECT_EQ(text->extra.at(plan::kMropeSectionHKey), 24);
  EXPECT_EQ(text->extra.at(plan::kMropeSectionWKey), 24);
  EXPECT_EQ(text->extra.count(plan::kRopeScalingTypeKey), 0u) << "mrope is no frequency scaling";
  const int64_t h = 3584, f = 18944, v = 152064, kv = 4 * 128;
  const int64_t layer = (h * h + h) + 2 * (h * kv + kv) + h * h + 3 * h * f + 2 * h;
  const int64_t params = ComputeModelFacts(*text, 0).params;
  EXPECT_EQ(params, 2 * v * h + 28 * layer + h);
  EXPECT_EQ(params + FactsOf("qwen2_vl_7b.json").params, 8'291'375'616);
  // Parts: a vision-language config's two models; no other config has parts.
  EXPECT_TRUE(ModelFromHfConfigFile(kHf + "qwen2_vl_7b.json", "vision").ok());
  auto bad = ModelFromHfConfigFile(kHf + "qwen2_vl_7b.json", "audio");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not one of text, vision"), std::string::npos) << bad.status().ToString();
  auto plain = ModelFromHfConfigFile(kHf + "qwen2_7b.json", "text");
  ASSERT_FALSE(plain.ok());
  EXPECT_NE(plain.status().message().find("drop 'part'"), std::string::npos) << plain.status().ToString();
  auto no_sections = ModelFromHfConfig(
      R"({"model_type": "qwen2_vl", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
          "intermediate_size": 128, "vocab_size": 10, "rope_scaling": {"type": "mrope", "mrope_section": [8, 8, 8]}})",
      "q.json", "text");
  ASSERT_FALSE(no_sections.ok()) << "8 + 8 + 8 != head_dim 16 / 2";
  EXPECT_NE(no_sections.status().message().find("sum to head_dim / 2 = 8"), std::string::npos)
      << no_sections.status().ToString();
}

// Qwen2.5-VL's language model: its videos' time rows are scaled by
// vision_config.tokens_per_second (the published configs: 2; transformers'
// default: 4); Qwen2-VL's are not.
TEST(ModelFacts, Qwen25VlLanguageModelScalesVideoTime) {
  const std::string config = R"({"model_type": "qwen2_5_vl", "hidden_size": 64, "num_hidden_layers": 1,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 10,
      "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}, "vision_config": {"tokens_per_second": 2}})";
  auto text = ModelFromHfConfig(config, "q.json", "text");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(plan::MropeOf(*text)->tokens_per_second, 2);
  std::string no_vision = config;
  no_vision.replace(no_vision.find(", \"vision_config\""), std::string::npos, "}");
  auto defaulted = ModelFromHfConfig(no_vision, "q.json", "text");
  ASSERT_TRUE(defaulted.ok()) << defaulted.status().ToString();
  EXPECT_EQ(plan::MropeOf(*defaulted)->tokens_per_second, 4);
  std::string qwen2 = no_vision;
  qwen2.replace(qwen2.find("qwen2_5_vl"), 10, "qwen2_vl");
  auto plain = ModelFromHfConfig(qwen2, "q.json", "text");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plan::MropeOf(*plain)->tokens_per_second, 0);
}

// SigLIP-so400m-patch14-384's vision tower (SiglipVisionModel, the head
// included as from_pretrained builds it), summed by hand: a biased 14 x 14
// conv (384 px: 27 x 27 patches, the last 6 px dropped), 729 positions, 27
// layers (q/k/v/out and fc1/fc2 with biases, two LayerNorms), post_layernorm,
// and the pooling head (probe, in_proj 3C x C + 3C, out_proj, LayerNorm,
// fc1/fc2): 428,225,600, of which the head is 15,238,352.
TEST(ModelFacts, SiglipSo400mVisionTower) {
  const int64_t c = 1152, f = 4304, n = 27 * 27;
  const int64_t layer = 4 * (c * c + c) + (f * c + f) + (c * f + c) + 2 * 2 * c;
  const int64_t head = c + (3 * c * c + 3 * c) + (c * c + c) + 2 * c + (f * c + f) + (c * f + c);
  const int64_t tower = (3 * 14 * 14 * c + c) + n * c + 27 * layer + 2 * c;
  EXPECT_EQ(FactsOf("siglip_so400m_patch14_384.json").params, tower + head);
  EXPECT_EQ(tower + head, 428'225'600);
  auto siglip = ModelFromHfConfigFile(kHf + "siglip_so400m_patch14_384.json");
  ASSERT_TRUE(siglip.ok()) << siglip.status().ToString();
  EXPECT_EQ(siglip->extra.at("vit_layout"), plan::kVitLayoutSiglip);
  EXPECT_EQ(siglip->extra.at(plan::kAttnPoolHeadKey), 1);
  EXPECT_EQ(plan::LayerNormEps(*siglip), 1e-6);
  EXPECT_EQ(NaturalTokens(*siglip, 0), n);  // no class token
  EXPECT_EQ(plan::VitOutputTokens(*siglip), n);
  EXPECT_TRUE(plan::ValidateModelDesc(*siglip).ok()) << plan::ValidateModelDesc(*siglip).ToString();
  EXPECT_EQ(ComputeModelFacts(*siglip, 0).output_dim, c);

  // The vision config alone (siglip_vision_model), without the head.
  auto bare = ModelFromHfConfig(R"({"model_type": "siglip_vision_model", "hidden_size": 1152, "image_size": 384,
      "intermediate_size": 4304, "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14,
      "vision_use_head": false})",
                                "vision.json");
  ASSERT_TRUE(bare.ok()) << bare.status().ToString();
  EXPECT_EQ(ComputeModelFacts(*bare, 0).params, tower);
  EXPECT_FALSE(plan::AttnPoolHead(*bare));

  // Only gelu_pytorch_tanh is built; a siglip config needs its vision_config.
  auto relu = ModelFromHfConfig(R"({"model_type": "siglip_vision_model", "hidden_act": "relu"})", "relu.json");
  ASSERT_FALSE(relu.ok());
  EXPECT_NE(relu.status().message().find("gelu_pytorch_tanh"), std::string::npos) << relu.status().ToString();
  auto no_vision = ModelFromHfConfig(R"({"model_type": "siglip"})", "siglip.json");
  ASSERT_FALSE(no_vision.ok());
  EXPECT_NE(no_vision.status().message().find("vision_config"), std::string::npos);
}

TEST(ModelFacts, ImportedConfigsCarryWhatTheRuntimeComputesWith) {
  auto qwen = ModelFromHfConfigFile(kHf + "qwen2_7b.json");
  ASSERT_TRUE(qwen.ok());
  EXPECT_EQ(qwen->extra.at("rope_theta"), 1e6);
  EXPECT_EQ(qwen->extra.at("rms_norm_eps"), 1e-6);
  EXPECT_EQ(qwen->extra.at("qkv_bias"), 1);
  EXPECT_EQ(qwen->extra.count("sliding_window"), 0u);  // use_sliding_window is false
  auto mistral = ModelFromHfConfigFile(kHf + "mistral_7b_v0.1.json");
  ASSERT_TRUE(mistral.ok());
  EXPECT_EQ(mistral->extra.at("sliding_window"), 4096);
  EXPECT_EQ(mistral->extra.at("rms_norm_eps"), 1e-5);
  auto llama = ModelFromHfConfigFile(kHf + "llama2_7b.json");
  ASSERT_TRUE(llama.ok());
  EXPECT_EQ(llama->extra.at("rope_theta"), 10000.0);  // LlamaConfig's default: the file has none
  auto clip = ModelFromHfConfigFile(kHf + "clip_vit_large_patch14.json");
  ASSERT_TRUE(clip.ok());
  EXPECT_EQ(clip->extra.at("vit_layout"), 1);
  EXPECT_EQ(clip->extra.at("quick_gelu"), 1);
  EXPECT_EQ(NaturalTokens(*clip, 0), 16 * 16 + 1);
  auto vl = ModelFromHfConfigFile(kHf + "qwen2_vl_7b.json");
  ASSERT_TRUE(vl.ok()) << vl.status().ToString();
  EXPECT_EQ(vl->hidden, 1280);
  EXPECT_EQ(vl->ffn_hidden, 5120);
  EXPECT_EQ(vl->out_dim, 3584);
  EXPECT_EQ(vl->extra.at("vit_layout"), 2);
  EXPECT_EQ(vl->extra.at("temporal_patch"), 2);
  EXPECT_EQ(vl->extra.at("spatial_merge"), 2);
}

// A tiny llama config with `rope_scaling` = scaling (JSON text).
std::string LlamaWithRopeScaling(const std::string& scaling) {
  return R"({"model_type":"llama","hidden_size":64,"num_hidden_layers":1,"num_attention_heads":4,)"
         R"("intermediate_size":8,"vocab_size":10,"max_position_embeddings":131072,"rope_scaling":)" +
         scaling + "}";
}

TEST(ModelFacts, RopeScalingIsImportedParameterByParameter) {
  using plan::RopeType;
  auto llama31 = ModelFromHfConfig(
      LlamaWithRopeScaling(R"({"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,)"
                           R"("original_max_position_embeddings":8192})"),
      "x.json");
  ASSERT_TRUE(llama31.ok()) << llama31.status().ToString();
  const plan::RopeScaling l = plan::RopeScalingOf(*llama31);
  EXPECT_EQ(l.type, RopeType::kLlama3);
  EXPECT_EQ(l.factor, 8.0);
  EXPECT_EQ(l.low_freq_factor, 1.0);
  EXPECT_EQ(l.high_freq_factor, 4.0);
  EXPECT_EQ(l.original_max_position_embeddings, 8192);
  EXPECT_TRUE(plan::ValidateModelDesc(*llama31).ok());
  EXPECT_EQ(llama31->extra.count(plan::kLegacyRopeScalingKey), 0u);

  // Qwen2.5's YaRN, with the legacy "type" key: the factor as written (not
  // max_position_embeddings / original, transformers >= 4.57), HF's betas.
  auto qwen = ModelFromHfConfig(
      LlamaWithRopeScaling(R"({"type":"yarn","factor":4.0,"original_max_position_embeddings":32768})"), "x.json");
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  const plan::RopeScaling y = plan::RopeScalingOf(*qwen);
  EXPECT_EQ(y.type, RopeType::kYarn);
  EXPECT_EQ(y.factor, 4.0);
  EXPECT_EQ(y.original_max_position_embeddings, 32768);
  EXPECT_EQ(y.beta_fast, 32);
  EXPECT_EQ(y.beta_slow, 1);
  EXPECT_TRUE(y.truncate);
  EXPECT_EQ(y.attention_factor, 0);  // derived: 0.1 ln 4 + 1

  // YaRN without a factor: max_position_embeddings / original (DeepSeek's rule).
  auto implied = ModelFromHfConfig(
      LlamaWithRopeScaling(R"({"rope_type":"yarn","original_max_position_embeddings":4096,"truncate":false,)"
                           R"("mscale":1.0,"mscale_all_dim":0.5})"),
      "x.json");
  ASSERT_TRUE(implied.ok()) << implied.status().ToString();
  EXPECT_EQ(plan::RopeScalingOf(*implied).factor, 32.0);
  EXPECT_FALSE(plan::RopeScalingOf(*implied).truncate);
  EXPECT_EQ(plan::RopeScalingOf(*implied).mscale_all_dim, 0.5);

  // rope_type "default" and null are no scaling.
  for (const char* none : {R"({"rope_type":"default"})", "null"}) {
    auto plain = ModelFromHfConfig(LlamaWithRopeScaling(none), "x.json");
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    EXPECT_EQ(plain->extra.count(plan::kRopeScalingTypeKey), 0u) << none;
  }

  // dynamic NTK is imported so that validation refuses it by name.
  auto dynamic = ModelFromHfConfig(LlamaWithRopeScaling(R"({"rope_type":"dynamic","factor":2.0})"), "x.json");
  ASSERT_TRUE(dynamic.ok()) << dynamic.status().ToString();
  const Status refused = plan::ValidateModelDesc(*dynamic);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("dynamic"), std::string::npos) << refused.ToString();
}

TEST(ModelFacts, MalformedRopeScalingIsRefusedNamingTheKey) {
  const std::pair<const char*, const char*> cases[] = {
      {R"("llama3")", "'rope_scaling' must be an object"},
      {R"({"factor":8.0})", "'rope_type'"},
      {R"({"rope_type":"longrope","factor":2.0})", "'longrope' is not implemented"},
      {R"({"rope_type":"llama3","factor":8.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192})",
       "'low_freq_factor'"},
      {R"({"rope_type":"llama3","factor":"8","low_freq_factor":1.0,"high_freq_factor":4.0,)"
       R"("original_max_position_embeddings":8192})",
       "'factor' must be a number"},
      {R"({"rope_type":"linear"})", "'factor'"},
      {R"({"rope_type":"yarn","factor":4.0,"truncate":"yes"})", "truncate must be true or false"},
  };
  for (const auto& [scaling, mentions] : cases) {
    auto d = ModelFromHfConfig(LlamaWithRopeScaling(scaling), "x.json");
    ASSERT_FALSE(d.ok()) << scaling;
    EXPECT_NE(d.status().message().find("x.json"), std::string::npos) << d.status().ToString();
    EXPECT_NE(d.status().message().find(mentions), std::string::npos) << d.status().ToString();
  }
}

TEST(ModelFacts, FlopsPerTokenFollowTheDocumentedFormula) {
  const ModelFacts f = FactsOf("llama2_7b.json", 4096);
  // 2 per MAC of every weight matrix (embedding lookup excluded, LM head and
  // norms: head included, norms excluded) + causal attention at half context.
  const double matmul = 6'738'415'616.0 - 32000.0 * 4096 - (2 * 32 + 1) * 4096.0;
  EXPECT_DOUBLE_EQ(f.flops_per_token, 2 * matmul + 4.0 * 32 * 2048 * 4096);
  const ModelFacts mix = FactsOf("mixtral_8x7b.json", 4096);
  EXPECT_LT(mix.flops_per_token, 2.0 * mix.params / 3);  // only routed experts count
  EXPECT_GT(mix.flops_per_token, 2.0 * (mix.active_params - 32000.0 * 4096));
}

TEST(ModelFacts, RejectsUnsupportedAndMalformedConfigs) {
  EXPECT_FALSE(ModelFromHfConfig("{\"model_type\": \"gpt2\"}", "x.json").ok());
  EXPECT_FALSE(ModelFromHfConfig("[1,2]", "x.json").ok());
  EXPECT_FALSE(ModelFromHfConfig("{\"model_type\": \"llama\"}", "x.json").ok());
  auto bad =
      ModelFromHfConfig(R"({"model_type":"llama","hidden_size":4096,"num_hidden_layers":2,"num_attention_heads":32,)"
                        R"("num_key_value_heads":5,"intermediate_size":8,"vocab_size":10})",
                        "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("kv_heads"), std::string::npos);
}

// Issue #18: a Whisper config with max_source_positions = 2^62 overflowed
// 2 * positions (UBSan: signed-integer-overflow in model.cc) and was then
// reported as a negative audio_frames. The reader bounds each factor before
// it multiplies; the message names the config's key.
TEST(ModelFacts, WhisperWithMaxSourcePositions2To62IsRefusedBeforeAnyProduct) {
  auto d = ModelFromHfConfig(R"({"model_type":"whisper","max_source_positions":4611686018427387904})", "w.json");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(),
            "w.json: max_source_positions = 4611686018427387904 is out of range; it must be in [1, 524288]");
}

// An integer above int64's range wrapped to a negative number in the message.
TEST(ModelFacts, AnIntegerAboveInt64IsRefusedWithItsValue) {
  auto d = ModelFromHfConfig(R"({"model_type":"whisper","d_model":18446744073709551615})", "w.json");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), "w.json: key 'd_model' = 18446744073709551615 is out of range");
}

TEST(ModelFacts, Qwen2VlWithHugeFactorsIsRefusedBeforeAnyProduct) {
  const auto vl = [](const std::string& vision) {
    auto d = ModelFromHfConfig(R"({"model_type":"qwen2_vl","vision_config":{)" + vision + "}}", "q.json");
    return d.ok() ? std::string() : d.status().message();
  };
  EXPECT_NE(vl(R"("mlp_ratio":1e300)").find("embed_dim * mlp_ratio = 1280 * 1e+300 is out of range"), std::string::npos)
      << vl(R"("mlp_ratio":1e300)");
  EXPECT_NE(vl(R"("mlp_ratio":-4)").find("out of range"), std::string::npos);
  EXPECT_NE(vl(R"("embed_dim":4611686018427387904)").find("embed_dim = 4611686018427387904 is out of range"),
            std::string::npos);
  EXPECT_NE(vl(R"("spatial_merge_size":4611686018427387904)").find("spatial_merge_size = 4611686018427387904"),
            std::string::npos);
  EXPECT_NE(vl(R"("temporal_patch_size":9223372036854775807)")
                .find("temporal_patch = 9.223372036854776e+18 is out of "
                      "range"),
            std::string::npos)
      << vl(R"("temporal_patch_size":9223372036854775807)");
  EXPECT_EQ(vl(""), "");  // the defaults: Qwen2-VL-7B's tower
}

// Every kind with every size at its bound at once: CheckModelShape accepts
// it, and ComputeModelFacts counts it below 2^62 (run under UBSan in the
// fuzz build, docs/spec.md "Fuzzing", it reports no overflow). One step past
// a bound is refused.
TEST(ModelFacts, EveryKindAtItsBoundsCountsBelow2To62) {
  plan::ModelDesc dec;
  dec.kind = plan::ModelKind::kDecoder;
  dec.hidden = int64_t{1} << 18;
  dec.layers = 1024;
  dec.heads = dec.kv_heads = dec.head_dim = 4096;
  dec.ffn_hidden = dec.moe_ffn_hidden = int64_t{1} << 20;
  dec.vocab = int64_t{1} << 22;
  dec.experts = dec.experts_per_token = 512;
  for (const char* flag : {"qkv_bias", "attn_out_bias", "mlp_bias", "norm_bias"}) dec.extra[flag] = 1;
  plan::ModelDesc vit;
  vit.kind = plan::ModelKind::kVit;
  vit.hidden = vit.out_dim = int64_t{1} << 18;
  vit.layers = 1024;
  vit.heads = vit.kv_heads = 4096;
  vit.ffn_hidden = int64_t{1} << 20;
  vit.image_size = int64_t{1} << 14;
  vit.patch_size = 1;
  vit.channels = 64;
  vit.extra = {
      {"temporal_patch", 16}, {"spatial_merge", 8}, {"merger_hidden", 1 << 20}, {"pre_norm", 1}, {"pooler", 1}};
  plan::ModelDesc audio;
  audio.kind = plan::ModelKind::kAudioEncoder;
  audio.hidden = int64_t{1} << 18;
  audio.layers = 1024;
  audio.heads = audio.kv_heads = 4096;
  audio.ffn_hidden = int64_t{1} << 20;
  audio.mel_bins = 4096;
  audio.audio_frames = int64_t{1} << 20;
  audio.extra["max_source_positions"] = 1 << 20;
  plan::ModelDesc proj;
  proj.kind = plan::ModelKind::kProjector;
  proj.in_dim = proj.out_dim = int64_t{1} << 18;
  proj.ffn_hidden = int64_t{1} << 20;
  for (const plan::ModelDesc& d : {dec, vit, audio, proj}) {
    const std::string kind = plan::ModelKindName(d.kind);
    ASSERT_TRUE(CheckModelShape(d, kind).ok()) << CheckModelShape(d, kind).ToString();
    for (int64_t seq : {int64_t{0}, int64_t{1} << 24}) {
      const ModelFacts f = ComputeModelFacts(d, seq);
      EXPECT_GT(f.params, 0) << kind;
      EXPECT_LT(f.params, int64_t{1} << 62) << kind;
      EXPECT_LE(f.active_params, f.params) << kind;
      EXPECT_GT(f.matmul_params, 0) << kind;
      EXPECT_TRUE(std::isfinite(f.flops_per_token) && f.flops_per_token > 0) << kind;
    }
  }
  std::string key;
  plan::ModelDesc past = dec;
  past.layers = 1025;
  EXPECT_FALSE(CheckModelShape(past, "d", &key).ok());
  EXPECT_EQ(key, "layers");
  past = audio;
  past.extra["max_source_positions"] = (1 << 20) + 1;
  EXPECT_FALSE(CheckModelShape(past, "a", &key).ok());
  EXPECT_EQ(key, "max_source_positions");
  past = vit;
  past.extra["merger_hidden"] = 1e300;  // compared as a double: no conversion past 2^63
  EXPECT_FALSE(CheckModelShape(past, "v", &key).ok());
  EXPECT_EQ(key, "merger_hidden");
}

std::string RunCapture(const std::string& cmd, int* rc) {
  std::array<char, 4096> buf{};
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  *rc = pclose(p);
  return out;
}

TEST(ModelInfoCli, PrintsParamsActiveParamsAndFlopsAsJson) {
  int rc = -1;
  const std::string out = RunCapture(ShellQuote(std::string(MAESTRO_BIN_DIR) + "/maestro-compile") + " --model-info " +
                                         ShellQuote(kHf + "mixtral_8x7b.json") + " --json",
                                     &rc);
  ASSERT_EQ(rc, 0) << out;
  const auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j.at("params").get<int64_t>(), 46'702'792'704);
  EXPECT_EQ(j.at("active_params").get<int64_t>(), 12'879'925'248);
  EXPECT_GT(j.at("flops_per_token").get<double>(), 0);
  RunCapture(ShellQuote(std::string(MAESTRO_BIN_DIR) + "/maestro-compile") + " --model-info /nonexistent 2>/dev/null",
             &rc);
  EXPECT_EQ(WEXITSTATUS(rc), 2);
}

}  // namespace
}  // namespace maestro::compiler
