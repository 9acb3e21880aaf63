// SPDX-License-Identifier: Apache-2.0
// The name tables expanded for small descs: names and shapes written out by
// hand from the Hugging Face modules (transformers' modeling_llama / qwen2 /
// mixtral / clip / qwen2_vl / whisper / llava), TP dims as the runtime shards,
// tied heads left out, the layout choice, and the pattern-level reverse
// lookup. (That the runtime modules have exactly these parameters is checked
// in tests/hf/hf_weights_test.cc, which builds them.)
#include "hf/name_map.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fixtures/models.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::hf {
namespace {

using plan::ModelDesc;
using plan::ModelKind;
using Shape = std::vector<int64_t>;

ModelDesc Qwen2Like() {
  ModelDesc d = fixtures::DecoderModel({32, 2, 4, 2, 48, 50});
  d.head_dim = 12;
  d.extra["qkv_bias"] = 1;
  return d;
}

void ExpectWeight(const WeightNames& names, const std::string& hf, const std::string& ours, const Shape& shape,
                  int tp_dim) {
  const WeightName* w = names.ByHfName(hf);
  ASSERT_NE(w, nullptr) << hf;
  EXPECT_EQ(w->maestro_name, ours) << hf;
  EXPECT_EQ(w->shape, shape) << hf;
  EXPECT_EQ(w->tp_dim, tp_dim) << hf;
  EXPECT_EQ(names.ByMaestroName(ours), w) << ours;
}

TEST(HfNameMap, Qwen2DecoderWithBiasesHeadDimAndTpDims) {
  auto names = ExpandWeightNames(Qwen2Like());
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(names->layout, WeightLayout::kDecoder);
  // embed, 2 x (2 norms + q/k/v weight+bias + o + 3 mlp), norm, head.
  EXPECT_EQ(names->weights.size(), 1u + 2 * (2 + 6 + 1 + 3) + 1 + 1);
  ExpectWeight(*names, "model.embed_tokens.weight", "embed_tokens.weight", {50, 32}, -1);
  ExpectWeight(*names, "model.layers.1.self_attn.q_proj.weight", "blocks.1.attn.q_proj.weight", {48, 32}, 0);
  ExpectWeight(*names, "model.layers.1.self_attn.q_proj.bias", "blocks.1.attn.q_proj.bias", {48}, 0);
  ExpectWeight(*names, "model.layers.0.self_attn.k_proj.weight", "blocks.0.attn.k_proj.weight", {24, 32}, 0);
  ExpectWeight(*names, "model.layers.0.self_attn.v_proj.bias", "blocks.0.attn.v_proj.bias", {24}, 0);
  ExpectWeight(*names, "model.layers.0.self_attn.o_proj.weight", "blocks.0.attn.o_proj.weight", {32, 48}, 1);
  ExpectWeight(*names, "model.layers.0.input_layernorm.weight", "blocks.0.attn_norm.weight", {32}, -1);
  ExpectWeight(*names, "model.layers.0.post_attention_layernorm.weight", "blocks.0.mlp_norm.weight", {32}, -1);
  ExpectWeight(*names, "model.layers.1.mlp.gate_proj.weight", "blocks.1.mlp.gate_proj.weight", {48, 32}, 0);
  ExpectWeight(*names, "model.layers.1.mlp.up_proj.weight", "blocks.1.mlp.up_proj.weight", {48, 32}, 0);
  ExpectWeight(*names, "model.layers.1.mlp.down_proj.weight", "blocks.1.mlp.down_proj.weight", {32, 48}, 1);
  ExpectWeight(*names, "model.norm.weight", "final_norm.weight", {32}, -1);
  ExpectWeight(*names, "lm_head.weight", "lm_head.weight", {50, 32}, -1);
  EXPECT_EQ(names->weights.front().hf_name, "model.embed_tokens.weight");
  EXPECT_EQ(names->weights.back().hf_name, "lm_head.weight");
  EXPECT_TRUE(names->Owns("model.layers.7.anything"));
  EXPECT_FALSE(names->Owns("visual.blocks.0.norm1.weight"));  // a Qwen2-VL file's other tower
}

TEST(HfNameMap, TiedHeadIsAbsentAndPassedOverLlamaHasNoBiases) {
  ModelDesc d = Qwen2Like();
  d.tie_embeddings = true;
  d.extra.erase("qkv_bias");
  auto names = ExpandWeightNames(d);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->ByHfName("lm_head.weight"), nullptr);
  EXPECT_TRUE(names->PassedOver("lm_head.weight"));
  EXPECT_EQ(names->ByHfName("model.layers.0.self_attn.q_proj.bias"), nullptr);
  EXPECT_EQ(names->weights.size(), 1u + 2 * (2 + 3 + 1 + 3) + 1);
}

// Gemma 3 text (extra.gemma3): four norms per layer, of which
// post_attention_layernorm is the attention's output norm (Llama's name for
// the MLP's input norm), q/k norms, no biases, the tied head passed over.
TEST(HfNameMap, Gemma3SandwichNormsAndQkNorms) {
  ModelDesc d = Qwen2Like();
  d.tie_embeddings = true;
  d.extra.erase("qkv_bias");
  d.extra["gemma3"] = 1;
  d.extra["qk_norm"] = 1;
  auto names = ExpandWeightNames(d);
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(names->layout, WeightLayout::kGemma3);
  // embed, 2 x (4 norms + q/k norms + q/k/v/o + 3 mlp), norm.
  EXPECT_EQ(names->weights.size(), 1u + 2 * (4 + 2 + 4 + 3) + 1);
  ExpectWeight(*names, "model.layers.0.input_layernorm.weight", "blocks.0.attn_norm.weight", {32}, -1);
  ExpectWeight(*names, "model.layers.0.post_attention_layernorm.weight", "blocks.0.post_attn_norm.weight", {32}, -1);
  ExpectWeight(*names, "model.layers.1.pre_feedforward_layernorm.weight", "blocks.1.mlp_norm.weight", {32}, -1);
  ExpectWeight(*names, "model.layers.1.post_feedforward_layernorm.weight", "blocks.1.post_mlp_norm.weight", {32}, -1);
  ExpectWeight(*names, "model.layers.1.self_attn.q_norm.weight", "blocks.1.attn.q_norm.weight", {12}, -1);
  ExpectWeight(*names, "model.layers.1.mlp.down_proj.weight", "blocks.1.mlp.down_proj.weight", {32, 48}, 1);
  ExpectWeight(*names, "model.norm.weight", "final_norm.weight", {32}, -1);
  EXPECT_EQ(names->ByHfName("model.layers.0.self_attn.q_proj.bias"), nullptr);
  EXPECT_TRUE(names->PassedOver("lm_head.weight"));
  EXPECT_EQ(MaestroNameOf(WeightLayout::kGemma3, "model.layers.9.post_attention_layernorm.weight").value(),
            "blocks.9.post_attn_norm.weight");
}

// Qwen2-MoE's names (moe_layout 1): mlp.gate, mlp.experts.{e}.*_proj, the
// shared expert and its gate; Qwen3-MoE's q_norm / k_norm.
TEST(HfNameMap, QwenMoeExpertsSharedExpertAndQkNorm) {
  ModelDesc d = Qwen2Like();
  d.ffn_hidden = 0;
  d.experts = 3;
  d.experts_per_token = 2;
  d.moe_ffn_hidden = 20;
  d.extra["moe_layout"] = 1;
  d.extra["shared_expert_ffn_hidden"] = 40;
  d.extra["qk_norm"] = 1;
  auto names = ExpandWeightNames(d);
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(names->layout, WeightLayout::kQwenMoe);
  ExpectWeight(*names, "model.layers.1.mlp.gate.weight", "blocks.1.moe.router.weight", {3, 32}, -1);
  ExpectWeight(*names, "model.layers.1.mlp.experts.2.gate_proj.weight", "blocks.1.moe.experts.2.gate_proj.weight",
               {20, 32}, 0);
  ExpectWeight(*names, "model.layers.0.mlp.experts.0.down_proj.weight", "blocks.0.moe.experts.0.down_proj.weight",
               {32, 20}, 1);
  ExpectWeight(*names, "model.layers.0.mlp.shared_expert.up_proj.weight", "blocks.0.moe.shared_expert.up_proj.weight",
               {40, 32}, 0);
  ExpectWeight(*names, "model.layers.1.mlp.shared_expert_gate.weight", "blocks.1.moe.shared_expert_gate.weight",
               {1, 32}, -1);
  const int64_t head_dim = d.head_dim != 0 ? d.head_dim : d.hidden / d.heads;
  ExpectWeight(*names, "model.layers.0.self_attn.k_norm.weight", "blocks.0.attn.k_norm.weight", {head_dim}, -1);
  EXPECT_EQ(MaestroNameOf(WeightLayout::kQwenMoe, "model.layers.5.mlp.experts.7.up_proj.weight").value(),
            "blocks.5.moe.experts.7.up_proj.weight");
  // Without qk_norm and the shared expert (Qwen3-MoE has no shared expert,
  // Qwen2-MoE no qk_norm), their rows are absent.
  d.extra.erase("qk_norm");
  d.extra.erase("shared_expert_ffn_hidden");
  auto plain = ExpandWeightNames(d);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->ByHfName("model.layers.0.self_attn.q_norm.weight"), nullptr);
  EXPECT_EQ(plain->ByHfName("model.layers.0.mlp.shared_expert_gate.weight"), nullptr);
  EXPECT_EQ(names->weights.size(), plain->weights.size() + 2 * (2 + 4));
}

// Qwen-MoE with dense layers (decoder_sparse_step 2: layer 1 MoE, layer 0
// dense): a dense layer's mlp.{gate,up,down}_proj of ffn_hidden, no router,
// experts or shared expert there; a MoE layer has no dense MLP.
TEST(HfNameMap, QwenMoeDenseLayersHaveTheDenseMlpOnly) {
  ModelDesc d = Qwen2Like();
  d.ffn_hidden = 56;
  d.experts = 3;
  d.experts_per_token = 2;
  d.moe_ffn_hidden = 20;
  d.extra["shared_expert_ffn_hidden"] = 40;
  d.extra[plan::kDecoderSparseStepKey] = 2;
  auto names = ExpandWeightNames(d);
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(names->layout, WeightLayout::kQwenMoe) << "Mixtral has no dense layers";
  ExpectWeight(*names, "model.layers.0.mlp.gate_proj.weight", "blocks.0.mlp.gate_proj.weight", {56, 32}, 0);
  ExpectWeight(*names, "model.layers.0.mlp.down_proj.weight", "blocks.0.mlp.down_proj.weight", {32, 56}, 1);
  ExpectWeight(*names, "model.layers.1.mlp.experts.2.up_proj.weight", "blocks.1.moe.experts.2.up_proj.weight", {20, 32},
               0);
  ExpectWeight(*names, "model.layers.1.mlp.shared_expert_gate.weight", "blocks.1.moe.shared_expert_gate.weight",
               {1, 32}, -1);
  for (const char* absent : {"model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.0.up_proj.weight",
                             "model.layers.0.mlp.shared_expert.up_proj.weight", "model.layers.1.mlp.up_proj.weight"}) {
    EXPECT_EQ(names->ByHfName(absent), nullptr) << absent;
  }
  EXPECT_EQ(MaestroNameOf(WeightLayout::kQwenMoe, "model.layers.4.mlp.up_proj.weight").value(),
            "blocks.4.mlp.up_proj.weight");
}

TEST(HfNameMap, MixtralExperts) {
  ModelDesc d = Qwen2Like();
  d.extra.clear();
  d.ffn_hidden = 0;
  d.experts = 3;
  d.experts_per_token = 2;
  d.moe_ffn_hidden = 20;
  auto names = ExpandWeightNames(d);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->layout, WeightLayout::kMixtral);
  ExpectWeight(*names, "model.layers.1.block_sparse_moe.gate.weight", "blocks.1.moe.router.weight", {3, 32}, -1);
  // Experts are TP-sharded like a dense MLP (runtime/models/decoder.h MoeMlpImpl::Shard).
  ExpectWeight(*names, "model.layers.1.block_sparse_moe.experts.2.w1.weight", "blocks.1.moe.experts.2.gate_proj.weight",
               {20, 32}, 0);
  ExpectWeight(*names, "model.layers.0.block_sparse_moe.experts.0.w2.weight", "blocks.0.moe.experts.0.down_proj.weight",
               {32, 20}, 1);
  ExpectWeight(*names, "model.layers.0.block_sparse_moe.experts.1.w3.weight", "blocks.0.moe.experts.1.up_proj.weight",
               {20, 32}, 0);
  EXPECT_EQ(names->weights.size(), 1u + 2 * (2 + 4 + 1 + 3 * 3) + 1 + 1);
}

ModelDesc Clip() {
  ModelDesc d = fixtures::VitModel({16, 2, 2, 40, 12, 4, 3});
  d.extra["vit_layout"] = plan::kVitLayoutClip;
  return d;
}

TEST(HfNameMap, ClipVisionTower) {
  auto names = ExpandWeightNames(Clip());
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->layout, WeightLayout::kClipVision);
  ExpectWeight(*names, "vision_model.embeddings.class_embedding", "class_embedding", {16}, -1);
  ExpectWeight(*names, "vision_model.embeddings.patch_embedding.weight", "patch_embed.weight", {16, 3, 4, 4}, -1);
  ExpectWeight(*names, "vision_model.embeddings.position_embedding.weight", "pos_embed", {10, 16}, -1);
  ExpectWeight(*names, "vision_model.pre_layrnorm.bias", "pre_norm.bias", {16}, -1);
  ExpectWeight(*names, "vision_model.encoder.layers.1.self_attn.out_proj.weight", "blocks.1.attn.out.weight", {16, 16},
               1);
  ExpectWeight(*names, "vision_model.encoder.layers.0.self_attn.k_proj.bias", "blocks.0.attn.k_proj.bias", {16}, 0);
  ExpectWeight(*names, "vision_model.encoder.layers.0.mlp.fc1.weight", "blocks.0.fc1.weight", {40, 16}, 0);
  ExpectWeight(*names, "vision_model.encoder.layers.0.layer_norm2.weight", "blocks.0.mlp_norm.weight", {16}, -1);
  ExpectWeight(*names, "vision_model.post_layernorm.weight", "final_norm.weight", {16}, -1);
  // 3 embeddings + pre norm 2 + 2 x 16 + post norm 2
  EXPECT_EQ(names->weights.size(), 3u + 2 + 2 * 16 + 2);
  EXPECT_TRUE(names->PassedOver("vision_model.embeddings.position_ids"));
  EXPECT_FALSE(names->Owns("text_model.embeddings.token_embedding.weight"));
  EXPECT_FALSE(names->Owns("logit_scale"));
}

// SigLIP: 14 px images in 4 px patches (the conv drops 2 px: 3 x 3 = 9
// positions), no class token or pre-norm, CLIP's layer names, the head.
TEST(HfNameMap, SiglipVisionTowerWithAndWithoutItsHead) {
  ModelDesc d = fixtures::VitModel({16, 2, 2, 40, 14, 4, 3});
  d.extra["vit_layout"] = plan::kVitLayoutSiglip;
  d.extra[plan::kAttnPoolHeadKey] = 1;
  auto names = ExpandWeightNames(d);
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  EXPECT_EQ(names->layout, WeightLayout::kSiglipVision);
  EXPECT_STREQ(WeightLayoutName(names->layout), "siglip_vision");
  ExpectWeight(*names, "vision_model.embeddings.patch_embedding.weight", "patch_embed.weight", {16, 3, 4, 4}, -1);
  ExpectWeight(*names, "vision_model.embeddings.patch_embedding.bias", "patch_embed.bias", {16}, -1);
  ExpectWeight(*names, "vision_model.embeddings.position_embedding.weight", "pos_embed", {9, 16}, -1);
  ExpectWeight(*names, "vision_model.encoder.layers.1.self_attn.q_proj.weight", "blocks.1.attn.q_proj.weight", {16, 16},
               0);
  ExpectWeight(*names, "vision_model.encoder.layers.0.mlp.fc2.weight", "blocks.0.fc2.weight", {16, 40}, 1);
  ExpectWeight(*names, "vision_model.post_layernorm.bias", "final_norm.bias", {16}, -1);
  ExpectWeight(*names, "vision_model.head.probe", "head.probe", {1, 1, 16}, -1);
  ExpectWeight(*names, "vision_model.head.attention.in_proj_weight", "head.in_proj.weight", {48, 16}, -1);
  ExpectWeight(*names, "vision_model.head.attention.in_proj_bias", "head.in_proj.bias", {48}, -1);
  ExpectWeight(*names, "vision_model.head.attention.out_proj.weight", "head.out_proj.weight", {16, 16}, -1);
  ExpectWeight(*names, "vision_model.head.layernorm.weight", "head.norm.weight", {16}, -1);
  ExpectWeight(*names, "vision_model.head.mlp.fc1.weight", "head.mlp_fc1.weight", {40, 16}, -1);
  ExpectWeight(*names, "vision_model.head.mlp.fc2.bias", "head.mlp_fc2.bias", {16}, -1);
  EXPECT_EQ(names->weights.at(names->weights.size() - 1).hf_name, "vision_model.head.mlp.fc2.bias");
  // conv 2 + positions + 2 x 16 + post norm 2 + head 11
  EXPECT_EQ(names->weights.size(), 3u + 2 * 16 + 2 + 11);
  EXPECT_FALSE(names->Owns("text_model.head.weight"));
  EXPECT_FALSE(names->Owns("logit_bias"));
  EXPECT_TRUE(names->PassedOver("vision_model.embeddings.position_ids"));
  d.extra[plan::kAttnPoolHeadKey] = 0;  // vision_use_head = false
  names = ExpandWeightNames(d);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->weights.size(), 3u + 2 * 16 + 2);
  EXPECT_EQ(names->ByHfName("vision_model.head.probe"), nullptr);
}

TEST(HfNameMap, Qwen2VlVisionTowerAndItsInferredLayout) {
  ModelDesc d = Clip();
  d.extra.clear();
  d.extra["pos_embed"] = 0;  // as specs/qwen2vl_7b_mllm.toml describes the tower
  d.extra["temporal_patch"] = 2;
  d.extra["spatial_merge"] = 3;
  d.out_dim = 24;
  EXPECT_EQ(plan::VitLayout(d), plan::kVitLayoutQwen2Vl);
  auto names = ExpandWeightNames(d);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->layout, WeightLayout::kQwen2VlVision);
  ExpectWeight(*names, "visual.patch_embed.proj.weight", "patch_embed.weight", {16, 3, 2, 4, 4}, -1);
  ExpectWeight(*names, "visual.blocks.1.attn.qkv.weight", "blocks.1.attn.qkv.weight", {48, 16}, 0);
  EXPECT_EQ(names->ByMaestroName("blocks.1.attn.qkv.weight")->tp_parts, 3) << "q, k and v rows each split";
  ExpectWeight(*names, "visual.blocks.1.attn.proj.bias", "blocks.1.attn.out.bias", {16}, -1);
  ExpectWeight(*names, "visual.blocks.0.norm2.weight", "blocks.0.mlp_norm.weight", {16}, -1);
  ExpectWeight(*names, "visual.merger.ln_q.weight", "merger_norm.weight", {16}, -1);
  ExpectWeight(*names, "visual.merger.mlp.0.weight", "merger_fc1.weight", {144, 144}, 0);
  ExpectWeight(*names, "visual.merger.mlp.2.weight", "merger_fc2.weight", {24, 144}, 1);
  EXPECT_EQ(names->weights.size(), 1u + 2 * 12 + 6);
  EXPECT_FALSE(names->Owns("model.layers.0.self_attn.q_proj.weight"));
}

TEST(HfNameMap, WhisperEncoderKHasNoBias) {
  ModelDesc d = fixtures::AudioEncoderModel({16, 1, 2, 32, 8, 9});
  auto names = ExpandWeightNames(d);
  ASSERT_TRUE(names.ok());
  ExpectWeight(*names, "model.encoder.conv1.weight", "conv1.weight", {16, 8, 3}, -1);
  ExpectWeight(*names, "model.encoder.conv2.bias", "conv2.bias", {16}, -1);
  ExpectWeight(*names, "model.encoder.embed_positions.weight", "embed_positions", {5, 16}, -1);  // ceil(9 / 2)
  ExpectWeight(*names, "model.encoder.layers.0.self_attn.k_proj.weight", "blocks.0.attn.k_proj.weight", {16, 16}, 0);
  EXPECT_EQ(names->ByHfName("model.encoder.layers.0.self_attn.k_proj.bias"), nullptr);
  ExpectWeight(*names, "model.encoder.layers.0.self_attn_layer_norm.bias", "blocks.0.attn_norm.bias", {16}, -1);
  ExpectWeight(*names, "model.encoder.layers.0.final_layer_norm.weight", "blocks.0.mlp_norm.weight", {16}, -1);
  ExpectWeight(*names, "model.encoder.layer_norm.weight", "final_norm.weight", {16}, -1);
  EXPECT_EQ(names->weights.size(), 5u + 15 + 2);
  d.extra["max_source_positions"] = 1500;
  EXPECT_EQ(ExpandWeightNames(d)->ByHfName("model.encoder.embed_positions.weight")->shape, (Shape{1500, 16}));
  EXPECT_FALSE(names->Owns("model.decoder.layers.0.fc1.weight"));
}

TEST(HfNameMap, LlavaProjectorAndLayoutsWithoutATable) {
  ModelDesc proj;
  proj.kind = ModelKind::kProjector;
  proj.in_dim = 24;
  proj.out_dim = 32;
  auto names = ExpandWeightNames(proj);
  ASSERT_TRUE(names.ok());
  ExpectWeight(*names, "multi_modal_projector.linear_1.weight", "fc1.weight", {32, 24}, 0);
  ExpectWeight(*names, "multi_modal_projector.linear_2.bias", "fc2.bias", {32}, -1);

  ModelDesc builtin = Clip();
  builtin.extra.clear();
  auto none = ExpandWeightNames(builtin);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("built-in ViT"), std::string::npos);
  builtin.extra["vit_layout"] = plan::kVitLayoutHfVit;
  EXPECT_FALSE(ExpandWeightNames(builtin).ok());
}

TEST(HfNameMap, ReverseLookupOnPatterns) {
  EXPECT_EQ(HfNameOf(WeightLayout::kDecoder, "blocks.17.attn.q_proj.bias").value(),
            "model.layers.17.self_attn.q_proj.bias");
  EXPECT_EQ(MaestroNameOf(WeightLayout::kDecoder, "model.layers.3.mlp.down_proj.weight").value(),
            "blocks.3.mlp.down_proj.weight");
  EXPECT_EQ(MaestroNameOf(WeightLayout::kMixtral, "model.layers.31.block_sparse_moe.experts.7.w2.weight").value(),
            "blocks.31.moe.experts.7.down_proj.weight");
  EXPECT_EQ(HfNameOf(WeightLayout::kClipVision, "blocks.0.attn.out.weight").value(),
            "vision_model.encoder.layers.0.self_attn.out_proj.weight");
  EXPECT_EQ(HfNameOf(WeightLayout::kQwen2VlVision, "merger_fc2.bias").value(), "visual.merger.mlp.2.bias");
  EXPECT_EQ(MaestroNameOf(WeightLayout::kSiglipVision, "vision_model.head.mlp.fc1.weight").value(),
            "head.mlp_fc1.weight");
  EXPECT_EQ(HfNameOf(WeightLayout::kSiglipVision, "blocks.3.attn.v_proj.bias").value(),
            "vision_model.encoder.layers.3.self_attn.v_proj.bias");
  EXPECT_EQ(MaestroNameOf(WeightLayout::kWhisperEncoder, "model.encoder.embed_positions.weight").value(),
            "embed_positions");
  EXPECT_FALSE(MaestroNameOf(WeightLayout::kDecoder, "model.layers.x.mlp.down_proj.weight").ok());
  EXPECT_FALSE(HfNameOf(WeightLayout::kDecoder, "blocks.0.attn.nothing").ok());
  EXPECT_FALSE(HfNameOf(WeightLayout::kBuiltinVit, "pos_embed").ok());

  // Every expanded weight of every table round-trips through the patterns.
  for (const auto& rule : WeightNameRules(WeightLayout::kWhisperEncoder)) EXPECT_FALSE(rule.hf_pattern.empty());
  auto names = ExpandWeightNames(Qwen2Like());
  ASSERT_TRUE(names.ok());
  std::set<std::string> seen;
  for (const auto& w : names->weights) {
    EXPECT_EQ(HfNameOf(names->layout, w.maestro_name).value(), w.hf_name);
    EXPECT_EQ(MaestroNameOf(names->layout, w.hf_name).value(), w.maestro_name);
    EXPECT_TRUE(seen.insert(w.hf_name).second) << "twice: " << w.hf_name;
  }
}

// docs/weights.md lists every row of every table as the code has it.
TEST(HfNameMap, DocsListEveryTableRow) {
  std::ifstream in(std::string(MAESTRO_SOURCE_DIR) + "/docs/weights.md");
  ASSERT_TRUE(in) << "docs/weights.md";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  for (auto layout : {WeightLayout::kDecoder, WeightLayout::kMixtral, WeightLayout::kQwenMoe, WeightLayout::kGemma3,
                      WeightLayout::kClipVision, WeightLayout::kSiglipVision, WeightLayout::kQwen2VlVision,
                      WeightLayout::kQwen25VlVision, WeightLayout::kWhisperEncoder, WeightLayout::kLlavaProjector}) {
    EXPECT_NE(doc.find(std::string("### ") + WeightLayoutName(layout)), std::string::npos) << WeightLayoutName(layout);
    for (const auto& r : WeightNameRules(layout)) {
      const std::string row = "| `" + r.hf_pattern + "` | `" + r.maestro_pattern + "` | " + r.shape + " | " +
                              (r.tp_dim < 0 ? "-" : std::to_string(r.tp_dim)) +
                              (r.tp_parts > 1 ? " in " + std::to_string(r.tp_parts) + " parts" : "") + " | " + r.when +
                              " |";
      EXPECT_NE(doc.find(row), std::string::npos) << "docs/weights.md lacks the row\n" << row;
    }
  }
}

}  // namespace
}  // namespace maestro::hf
