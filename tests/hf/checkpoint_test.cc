// SPDX-License-Identifier: Apache-2.0
// hf/checkpoint.h: one-file and sharded checkpoint directories, written
// atomically and read back; an index that disagrees with its shards.
#include "hf/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/fixtures/scratch.h"

namespace maestro::hf {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public fixtures::TempDirTest {
 protected:
  CheckpointTest() : TempDirTest("maestro-ckpt") {}
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(TempDirTest::SetUp());
    for (int i = 0; i < 3; ++i) payloads_.push_back(std::string(400, static_cast<char>('a' + i)));
    tensors_ = {{"model.embed_tokens.weight", TensorDType::kBF16, {10, 20}, payloads_[0]},
                {"model.norm.weight", TensorDType::kF32, {100}, payloads_[1]},
                {"lm_head.weight", TensorDType::kF16, {20, 10}, payloads_[2]}};
  }
  void ExpectSame(const HfCheckpoint& ckpt) {
    EXPECT_EQ(ckpt.TensorNames().size(), tensors_.size());
    for (const TensorToWrite& t : tensors_) {
      auto located = ckpt.Find(t.name);
      ASSERT_TRUE(located.ok()) << located.status().ToString();
      const TensorView v = ckpt.View(*located);
      EXPECT_EQ(v.info->dtype, t.dtype);
      EXPECT_EQ(v.info->shape, t.shape);
      ASSERT_EQ(v.bytes, t.bytes.size());
      EXPECT_EQ(std::memcmp(v.data, t.bytes.data(), v.bytes), 0);
    }
  }
  std::vector<std::string> payloads_;
  std::vector<TensorToWrite> tensors_;
};

TEST_F(CheckpointTest, OneFileRoundTrips) {
  const std::string out = dir_ + "/student";
  ASSERT_TRUE(WriteHfCheckpoint(out, R"({"model_type": "qwen2"})", tensors_).ok());
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/model.safetensors.index.json"));
  auto ckpt = HfCheckpoint::Open(out);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_EQ((*ckpt)->config_json(), R"({"model_type": "qwen2"})");
  ExpectSame(**ckpt);
  EXPECT_EQ((*ckpt)->Find("nope").status().code(), StatusCode::kNotFound);
}

TEST_F(CheckpointTest, ShardsGetAnIndexAndRoundTrip) {
  const std::string out = dir_ + "/sharded";
  ASSERT_TRUE(WriteHfCheckpoint(out, "{}", tensors_, /*max_shard_bytes=*/500).ok());
  EXPECT_TRUE(fs::exists(out + "/model-00001-of-00003.safetensors"));
  EXPECT_TRUE(fs::exists(out + "/model-00003-of-00003.safetensors"));
  ASSERT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  auto ckpt = HfCheckpoint::Open(out);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ExpectSame(**ckpt);
  // Nothing of the partial directory is left.
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".partial"), std::string::npos) << e.path();
  }
}

TEST_F(CheckpointTest, AnExistingOutputIsNeverOverwritten) {
  const std::string out = dir_ + "/taken";
  fs::create_directory(out);
  const Status s = WriteHfCheckpoint(out, "{}", tensors_);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fs::is_empty(out));
}

TEST_F(CheckpointTest, AnIndexThatDisagreesWithItsShardsIsRefused) {
  const std::string out = dir_ + "/sharded";
  ASSERT_TRUE(WriteHfCheckpoint(out, "{}", tensors_, 500).ok());
  const std::string index = out + "/model.safetensors.index.json";
  // The index names a tensor its shard lacks.
  std::ofstream(index, std::ios::trunc)
      << R"({"weight_map": {"model.embed_tokens.weight": "model-00001-of-00003.safetensors",
            "model.norm.weight": "model-00002-of-00003.safetensors",
            "lm_head.weight": "model-00003-of-00003.safetensors",
            "ghost.weight": "model-00003-of-00003.safetensors"}})";
  auto ghost = HfCheckpoint::Open(out);
  ASSERT_FALSE(ghost.ok());
  EXPECT_NE(ghost.status().message().find("ghost.weight"), std::string::npos) << ghost.status().message();
  // A shard holds a tensor the index does not name (two tensors per shard here).
  const std::string two = dir_ + "/two_per_shard";
  ASSERT_TRUE(WriteHfCheckpoint(two, "{}", tensors_, 900).ok());
  std::ofstream(two + "/model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "lm_head.weight": "model-00002-of-00002.safetensors"}})";
  auto extra = HfCheckpoint::Open(two);
  ASSERT_FALSE(extra.ok());
  EXPECT_NE(extra.status().message().find("model.norm.weight"), std::string::npos) << extra.status().message();
  EXPECT_NE(extra.status().message().find("does not name"), std::string::npos) << extra.status().message();
  // A shard name that leaves the directory.
  std::ofstream(index, std::ios::trunc) << R"({"weight_map": {"a": "../x.safetensors"}})";
  EXPECT_FALSE(HfCheckpoint::Open(out).ok());
}

TEST_F(CheckpointTest, MissingPiecesAreNamed) {
  EXPECT_EQ(HfCheckpoint::Open(dir_ + "/none").status().code(), StatusCode::kNotFound);
  fs::create_directory(dir_ + "/empty");
  auto no_config = HfCheckpoint::Open(dir_ + "/empty");
  ASSERT_FALSE(no_config.ok());
  EXPECT_NE(no_config.status().message().find("config.json"), std::string::npos);
  std::ofstream(dir_ + "/empty/config.json") << "{}";
  auto no_weights = HfCheckpoint::Open(dir_ + "/empty");
  ASSERT_FALSE(no_weights.ok());
  EXPECT_NE(no_weights.status().message().find("model.safetensors"), std::string::npos);
}

// The streaming writer gives the same directory as the whole-set write (the
// shard rule is one), taking the tensors one at a time in their order.
TEST_F(CheckpointTest, AStreamingWriteEqualsTheWholeWrite) {
  const std::string whole = dir_ + "/whole", streamed = dir_ + "/streamed";
  ASSERT_TRUE(WriteHfCheckpoint(whole, "{}", tensors_, 900).ok());
  std::vector<TensorSpec> specs;
  for (const TensorToWrite& t : tensors_) specs.push_back({t.name, t.dtype, t.shape});
  auto writer = HfCheckpointWriter::Start(streamed, "{}", specs, 900);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  EXPECT_FALSE(fs::exists(streamed)) << "nothing is in place before Finish";
  for (const TensorToWrite& t : tensors_) ASSERT_TRUE((*writer)->Append(t.name, t.bytes).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_EQ((*writer)->files(),
            (std::vector<std::string>{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  for (const auto& entry : fs::directory_iterator(whole)) {
    const fs::path other = fs::path(streamed) / entry.path().filename();
    ASSERT_TRUE(fs::exists(other)) << other;
    std::ifstream a(entry.path(), std::ios::binary), b(other, std::ios::binary);
    std::stringstream bytes_a, bytes_b;
    bytes_a << a.rdbuf();
    bytes_b << b.rdbuf();
    EXPECT_EQ(bytes_a.str(), bytes_b.str()) << entry.path().filename();
  }
  auto ckpt = HfCheckpoint::Open(streamed);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  ExpectSame(**ckpt);
}

// Out of order, the wrong size, too many or too few: refused, naming the
// tensor expected; a writer dropped unfinished leaves nothing behind.
TEST_F(CheckpointTest, AStreamingWriteRefusesTensorsOutOfItsPlan) {
  std::vector<TensorSpec> specs;
  for (const TensorToWrite& t : tensors_) specs.push_back({t.name, t.dtype, t.shape});
  const std::string out = dir_ + "/refused";
  {
    auto writer = HfCheckpointWriter::Start(out, "{}", specs, 500);
    ASSERT_TRUE(writer.ok());
    const Status wrong = (*writer)->Append(tensors_[1].name, tensors_[1].bytes);
    EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(wrong.message().find("expected tensor 'model.embed_tokens.weight'"), std::string::npos)
        << wrong.ToString();
    EXPECT_FALSE((*writer)->Append(tensors_[0].name, "short").ok());
    ASSERT_TRUE((*writer)->Append(tensors_[0].name, tensors_[0].bytes).ok());
    const Status early = (*writer)->Finish();
    EXPECT_EQ(early.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(early.message().find("model.norm.weight"), std::string::npos) << early.ToString();
  }
  EXPECT_FALSE(fs::exists(out));
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find("refused.partial"), std::string::npos) << entry.path();
  }
  specs.push_back(specs.front());
  EXPECT_EQ(HfCheckpointWriter::Start(out, "{}", specs).status().code(), StatusCode::kInvalidArgument)
      << "a name given twice";
}

}  // namespace
}  // namespace maestro::hf
