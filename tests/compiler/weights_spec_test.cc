// SPDX-License-Identifier: Apache-2.0
// [models.<name>] weights = "<folder>": the model is the folder's config.json,
// the folder's tensors are checked at compile time against what the runtime
// will load (names, shapes, dtypes), and every problem is an error at the
// key's line naming the tensor, the file and both shapes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "compiler/spec.h"
#include "tests/fixtures/hf_checkpoints.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

namespace fs = std::filesystem;

std::string SpecText(const std::string& model_body) {
  return R"([job]
name = "w"
[cluster]
nodes = 1
gpus_per_node = 2
[cluster.gpu.h100]
memory_gb = 80
tflops_bf16 = 989
[data]
global_batch = 8
seq_len = 64
[models.llm]
)" + model_body +
         R"(
[[section]]
name = "llm"
model = "llm"
)";
}

class WeightsSpecTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = fixtures::PerTestDir("weights_spec"); }
  // A 2-layer Qwen2 checkpoint at root_/name, written for `layers` layers.
  void Write(const std::string& name, int layers, uint64_t max_shard_bytes = uint64_t{1} << 30) {
    auto desc =
        fixtures::WriteRandomHfCheckpoint((root_ / name).string(), fixtures::TinyQwen2Config(32, layers, 4, 2, 64, 128),
                                          hf::TensorDType::kBF16, 5, max_shard_bytes);
    ASSERT_TRUE(desc.ok()) << desc.status().ToString();
  }
  void SetConfig(const std::string& name, const std::string& config) {
    std::ofstream((root_ / name / "config.json").string(), std::ios::trunc) << config;
  }
  StatusOr<Spec> Parse(const std::string& body) {
    return ParseSpecString(SpecText(body), (root_ / "spec.toml").string(), root_.string());
  }
  fs::path root_;
};

TEST_F(WeightsSpecTest, TheFoldersConfigIsTheModelAndItsPathIsJoinedToTheSpec) {
  Write("qwen", 2, 20000);  // several shards and the index
  ASSERT_TRUE(fs::exists(root_ / "qwen" / "model.safetensors.index.json"));
  auto spec = Parse("weights = \"qwen\"");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  const auto& desc = spec->models.at(0).desc;
  EXPECT_EQ(desc.kind, plan::ModelKind::kDecoder);
  EXPECT_EQ(desc.hidden, 32);
  EXPECT_EQ(desc.layers, 2);
  EXPECT_EQ(desc.vocab, 128);
  EXPECT_TRUE(desc.tie_embeddings);
  EXPECT_EQ(desc.weights, (root_ / "qwen").string());
  EXPECT_EQ(desc.source, "qwen/config.json");
}

TEST_F(WeightsSpecTest, AMissingFolderIsAnErrorAtTheKey) {
  auto spec = Parse("weights = \"nowhere\"");
  ASSERT_FALSE(spec.ok());
  const std::string m = spec.status().message();
  EXPECT_NE(m.find("spec.toml:13"), std::string::npos) << m;
  EXPECT_NE(m.find("nowhere"), std::string::npos) << m;
}

TEST_F(WeightsSpecTest, MissingTensorsAreNamedWithTheirShapes) {
  Write("qwen", 1);
  SetConfig("qwen", fixtures::TinyQwen2Config(32, 2, 4, 2, 64, 128));  // the config asks for a second layer
  auto spec = Parse("weights = \"qwen\"");
  ASSERT_FALSE(spec.ok());
  const std::string m = spec.status().message();
  EXPECT_NE(m.find("missing"), std::string::npos) << m;
  EXPECT_NE(m.find("'model.layers.1.self_attn.q_proj.weight' [32, 32]"), std::string::npos) << m;
}

TEST_F(WeightsSpecTest, UnexpectedTensorsAreNamedWithTheirFile) {
  Write("qwen", 2);
  SetConfig("qwen", fixtures::TinyQwen2Config(32, 1, 4, 2, 64, 128));  // the file has a layer more
  auto spec = Parse("weights = \"qwen\"");
  ASSERT_FALSE(spec.ok());
  const std::string m = spec.status().message();
  EXPECT_NE(m.find("model.layers.1.mlp.down_proj.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("model.safetensors"), std::string::npos) << m;
}

TEST_F(WeightsSpecTest, AWrongShapeNamesTheTensorTheFileAndBothShapes) {
  Write("qwen", 2);
  SetConfig("qwen", fixtures::TinyQwen2Config(32, 2, 4, 2, 96, 128));  // intermediate_size 96, not 64
  auto spec = Parse("weights = \"qwen\"");
  ASSERT_FALSE(spec.ok());
  const std::string m = spec.status().message();
  EXPECT_NE(m.find("'model.layers.0.mlp.gate_proj.weight'"), std::string::npos) << m;
  EXPECT_NE(m.find("[64, 32]"), std::string::npos) << m;
  EXPECT_NE(m.find("[96, 32]"), std::string::npos) << m;
  EXPECT_NE(m.find("model.safetensors"), std::string::npos) << m;
}

TEST_F(WeightsSpecTest, WeightsDescribeTheModelSoShapeKeysBesideThemAreRefused) {
  Write("qwen", 2);
  auto spec = Parse("weights = \"qwen\"\nkind = \"decoder\"\nhidden = 64");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("kind"), std::string::npos) << spec.status().message();
}

TEST_F(WeightsSpecTest, AnHfConfigBesideWeightsIsTheModelTheTensorsAreCheckedAgainst) {
  Write("qwen", 2);
  std::ofstream((root_ / "other.json").string()) << fixtures::TinyQwen2Config(32, 2, 4, 2, 96, 128);
  auto spec = Parse("weights = \"qwen\"\nhf_config = \"other.json\"");
  ASSERT_FALSE(spec.ok());  // the folder's tensors do not fit other.json's model
  EXPECT_NE(spec.status().message().find("[96, 32]"), std::string::npos) << spec.status().message();
  SetConfig("qwen", fixtures::TinyQwen2Config(32, 2, 4, 2, 96, 128));
  std::ofstream((root_ / "other.json").string(), std::ios::trunc) << fixtures::TinyQwen2Config(32, 2, 4, 2, 64, 128);
  auto ok = Parse("weights = \"qwen\"\nhf_config = \"other.json\"");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->models.at(0).desc.source, "other.json");
}

}  // namespace
}  // namespace maestro::compiler
