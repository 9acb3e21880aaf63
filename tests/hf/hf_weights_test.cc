// SPDX-License-Identifier: Apache-2.0
// Published-layout checkpoints into the runtime's models and back out.
//
// make_tiny_checkpoints.py (python3-torch) writes a tiny Hugging Face
// checkpoint per architecture, in bf16 and in fp32, named from its own tables
// (written from transformers' modules, not from hf/name_map.cc), with the
// model's output computed there in float64 on the stored weights. Here the
// desc comes from the checkpoint's config.json (compiler::ModelFromHfConfig),
// LoadHfWeights fills the built model, and
//   - the model's output matches the python output (1e-5 of its largest value);
//   - ExportHfTensors gives every tensor back bit for bit, same name, dtype
//     and shape, also after a round trip through WriteHfCheckpoint;
//   - the runtime module's parameters are exactly the name table's rows;
//   - TP ranks receive their slices; and every error names what is wrong.
#include "runtime/hf_weights.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/model.h"
#include "hf/checkpoint.h"
#include "hf/name_map.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "tests/fixtures/models.h"
#include "tests/fixtures/python3.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::runtime {
namespace {

namespace fs = std::filesystem;
using TensorMap = std::map<std::string, torch::Tensor>;

// ---- python3 and its files ------------------------------------------------------

// The first of $MAESTRO_PYTHON3, /usr/bin/python3, python3 that has torch
// (as tests/runtime/models_test.cc; exit 3 = no torch).
Status MakeCheckpoints(const fs::path& out) {
  return fixtures::RunPython3WithTorch(std::string(MAESTRO_SOURCE_DIR) + "/tests/hf/make_tiny_checkpoints.py",
                                       {out.string()}, out.string() + ".log");
}

TensorMap LoadTensors(const fs::path& dir) {
  std::ifstream data(dir / "data.bin", std::ios::binary);
  TensorMap out;
  for (const auto& entry : nlohmann::json::parse(fixtures::ReadFile(dir / "index.json"))) {
    const bool is_long = entry.at("dtype").get<std::string>() == "i64";
    auto t = torch::empty(entry.at("shape").get<std::vector<int64_t>>(), is_long ? torch::kLong : torch::kFloat32);
    data.seekg(entry.at("offset").get<int64_t>());
    data.read(static_cast<char*>(t.data_ptr()), t.numel() * static_cast<int64_t>(t.element_size()));
    out[entry.at("name").get<std::string>()] = t;
  }
  return out;
}

// ---- cases -----------------------------------------------------------------------

const char* const kArchitectures[] = {"llama",         "mistral",         "qwen2",           "qwen3",  "gemma3_text",
                                      "mixtral",       "qwen2_moe",       "qwen3_moe",       "clip",   "qwen2_vl",
                                      "whisper",       "llava_projector", "qwen3_moe_mixed", "siglip", "siglip_vision",
                                      "qwen2_vl_text", "qwen2_5_vl"};

class HfWeightsTest : public ::testing::Test {
 protected:
  // One folder per test process: ctest runs each test of this suite as its
  // own process, in parallel, and a shared folder was removed under a
  // neighbour that was reading it.
  static void SetUpTestSuite() {
    root_ = fs::path(MAESTRO_TEST_TMP) / ("hf_weights_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    made_ = MakeCheckpoints(root_ / "tiny");
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  void SetUp() override { ASSERT_TRUE(made_.ok()) << made_.ToString(); }

  static fs::path Dir(const std::string& arch, const std::string& dtype) {
    return root_ / "tiny" / (arch + "_" + dtype);
  }

  // LLaVA's config.json describes the whole VLM; the projector is given by shape.
  static plan::ModelDesc DescOf(const std::string& arch, const hf::HfCheckpoint& ckpt) {
    if (arch == "llava_projector") {
      plan::ModelDesc d;
      d.kind = plan::ModelKind::kProjector;
      d.in_dim = 24;
      d.out_dim = 32;
      return d;
    }
    // Qwen2-VL's config holds two models: its language model by part = "text".
    const std::string part = arch == "qwen2_vl_text" ? "text" : "";
    auto d = compiler::ModelFromHfConfig(ckpt.config_json(), arch + "/config.json", part);
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? *d : plan::ModelDesc{};
  }

  static std::shared_ptr<torch::nn::Module> Build(const plan::ModelDesc& desc) {
    auto model = BuildModel(desc);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return model.ok() ? *model : nullptr;
  }

  static torch::Tensor Run(torch::nn::Module& m, const torch::Tensor& input) {
    if (auto* lm = m.as<DecoderLMImpl>()) return lm->forward(input);
    if (auto* vit = m.as<VitEncoderImpl>()) return vit->forward(input);
    if (auto* audio = m.as<AudioEncoderImpl>()) return audio->forward(input);
    return m.as<MlpProjectorImpl>()->forward(input);
  }

  static fs::path root_;
  static Status made_;
};
fs::path HfWeightsTest::root_;
Status HfWeightsTest::made_;

TEST_F(HfWeightsTest, EveryArchitectureLoadsComputesHfsOutputAndExportsBitForBit) {
  for (const char* arch : kArchitectures) {
    for (const std::string dtype : {"bf16", "f32"}) {
      SCOPED_TRACE(std::string(arch) + " " + dtype);
      auto ckpt = hf::HfCheckpoint::Open(Dir(arch, dtype).string());
      ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
      const plan::ModelDesc desc = DescOf(arch, **ckpt);
      auto model = Build(desc);
      ASSERT_NE(model, nullptr);
      const Status loaded = LoadHfWeights(*model, desc, **ckpt, 0, 1, torch::kFloat32);
      ASSERT_TRUE(loaded.ok()) << loaded.ToString();

      // The output of the python model on the same stored weights.
      TensorMap expect = LoadTensors(Dir(arch, dtype) / "expect");
      torch::Tensor got;
      {
        torch::NoGradGuard no_grad;
        got = Run(*model, expect.at("input"));
      }
      const auto& want = expect.at("output");
      ASSERT_EQ(got.sizes(), want.sizes());
      const double scale = want.abs().max().item<double>();
      EXPECT_GT(scale, 0.0);
      EXPECT_LE((got - want).abs().max().item<double>(), 1e-5 * scale);
      if (expect.count("pooled")) {  // SigLIP's head: HF's pooler_output
        torch::NoGradGuard no_grad;
        const auto pooled = model->as<VitEncoderImpl>()->Pool(got);
        const auto& want_pooled = expect.at("pooled");
        ASSERT_EQ(pooled.sizes(), want_pooled.sizes());
        EXPECT_LE((pooled - want_pooled).abs().max().item<double>(), 1e-5 * want_pooled.abs().max().item<double>());
      }

      // Export in the stored dtype: every tensor the table names, bit for bit.
      const torch::Dtype out_dtype = dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
      auto exported = ExportHfTensors(*model, desc, out_dtype);
      ASSERT_TRUE(exported.ok()) << exported.status().ToString();
      auto names = hf::ExpandWeightNames(desc);
      ASSERT_TRUE(names.ok());
      size_t owned = 0;
      for (const auto& name : (*ckpt)->TensorNames()) owned += names->Owns(name) && !names->PassedOver(name);
      EXPECT_EQ(exported->size(), owned);
      for (const HfTensor& t : *exported) {
        auto located = (*ckpt)->Find(t.name);
        ASSERT_TRUE(located.ok()) << t.name;
        EXPECT_EQ(located.value().info->dtype, t.dtype) << t.name;
        EXPECT_EQ(located.value().info->shape, t.shape) << t.name;
        const hf::TensorView view = (*ckpt)->View(*located);
        ASSERT_EQ(view.bytes, t.bytes.size()) << t.name;
        EXPECT_EQ(std::memcmp(view.data, t.bytes.data(), view.bytes), 0) << t.name << " differs";
      }

      // And through a written checkpoint directory.
      const fs::path again = root_ / (std::string("export_") + arch + "_" + dtype);
      fs::remove_all(again);
      ASSERT_TRUE(hf::WriteHfCheckpoint(again.string(), (*ckpt)->config_json(), TensorsToWrite(*exported)).ok());
      auto reopened = hf::HfCheckpoint::Open(again.string());
      ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
      auto model2 = Build(desc);
      ASSERT_TRUE(LoadHfWeights(*model2, desc, **reopened, 0, 1, torch::kFloat32).ok());
      for (const auto& item : model->named_parameters()) {
        EXPECT_TRUE(torch::equal(item.value(), model2->named_parameters()[item.key()])) << item.key();
      }
    }
  }
}

// The runtime builds exactly the table's parameters, with its shapes: the
// table (torch-free) and the modules cannot drift apart.
TEST_F(HfWeightsTest, ModulesHaveExactlyTheTablesParameters) {
  for (const char* arch : kArchitectures) {
    SCOPED_TRACE(arch);
    auto ckpt = hf::HfCheckpoint::Open(Dir(arch, "f32").string());
    ASSERT_TRUE(ckpt.ok());
    const plan::ModelDesc desc = DescOf(arch, **ckpt);
    auto names = hf::ExpandWeightNames(desc);
    ASSERT_TRUE(names.ok()) << names.status().ToString();
    auto model = Build(desc);
    ASSERT_NE(model, nullptr);
    auto params = model->named_parameters();
    EXPECT_EQ(params.size(), names->weights.size());
    for (const auto& w : names->weights) {
      ASSERT_TRUE(params.contains(w.maestro_name)) << w.maestro_name;
      EXPECT_EQ(params[w.maestro_name].sizes(), at::IntArrayRef(w.shape)) << w.maestro_name;
      // The tables' TP splits are the ones the runtime shards along, for
      // every layout (a MoE decoder's experts included).
      {
        const TensorParallelSplit split = TensorParallelSplitOf(w.maestro_name);
        EXPECT_EQ(w.tp_dim, split.dim) << w.maestro_name;
        EXPECT_EQ(w.tp_parts, split.parts) << w.maestro_name;
      }
    }
  }
}

// A stand-in for the section's TP group: each rank is loaded on its own.
class NoCommunication : public TensorParallelReducer {
 public:
  NoCommunication(int rank, int size) : rank_(rank), size_(size) {}
  void AllReduceSum(torch::Tensor&) override {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

 private:
  int rank_, size_;
};

TEST_F(HfWeightsTest, TensorParallelRanksLoadTheirSlicesBiasesIncluded) {
  auto ckpt = hf::HfCheckpoint::Open(Dir("qwen2", "f32").string());  // two shards, q/k/v biases
  ASSERT_TRUE(ckpt.ok());
  const plan::ModelDesc desc = DescOf("qwen2", **ckpt);
  auto full = Build(desc);
  ASSERT_TRUE(LoadHfWeights(*full, desc, **ckpt, 0, 1, torch::kFloat32).ok());
  auto names = hf::ExpandWeightNames(desc);
  ASSERT_TRUE(names.ok());
  int sliced = 0;
  for (int rank = 0; rank < 2; ++rank) {
    auto built = BuildDecoder(desc);
    ASSERT_TRUE(built.ok());
    NoCommunication tp(rank, 2);
    ASSERT_TRUE(ShardDecoderForTensorParallel(**built, &tp).ok());
    const Status loaded = LoadHfWeights(**built, desc, **ckpt, rank, 2, torch::kFloat32);
    ASSERT_TRUE(loaded.ok()) << loaded.ToString();
    auto full_params = full->named_parameters();
    for (const auto& item : (*built)->named_parameters()) {
      const int dim = names->ByMaestroName(item.key())->tp_dim;
      auto want = full_params[item.key()];
      if (dim >= 0) {
        const int64_t n = want.size(dim) / 2;
        want = want.narrow(dim, rank * n, n);
        ++sliced;
      }
      EXPECT_TRUE(torch::equal(item.value(), want)) << item.key() << " on rank " << rank;
    }
    // A sharded model cannot be exported before its shards are gathered.
    auto exported = ExportHfTensors(**built, desc, torch::kFloat32);
    ASSERT_FALSE(exported.ok());
    EXPECT_EQ(exported.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(exported.status().message().find("gather"), std::string::npos);
  }
  EXPECT_EQ(sliced, 2 * 2 * 10);  // 2 ranks x 2 layers x (q/k/v weight + bias, o, gate, up, down)

  // Loading a rank's slice into an unsharded model says what to do.
  auto unsharded = Build(desc);
  const Status wrong = LoadHfWeights(*unsharded, desc, **ckpt, 1, 2, torch::kFloat32);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("ShardModelForTensorParallel"), std::string::npos) << wrong.message();
}

// The encoders' TP slices (docs/encoder_tp.md): a CLIP tower, a SigLIP one
// (its pooling head replicated), Qwen2-VL's (fused qkv split per q, k and v;
// the merger), Qwen2.5-VL's (its SwiGLU gate/up rows with their biases, down
// columns), Whisper's encoder and the LLaVA projector, each sharded for
// rank r of 2, load exactly their slice of what the unsharded model loads.
TEST_F(HfWeightsTest, EncoderTensorParallelRanksLoadTheirSlices) {
  for (const char* arch : {"clip", "siglip", "qwen2_vl", "qwen2_5_vl", "whisper", "llava_projector"}) {
    SCOPED_TRACE(arch);
    auto ckpt = hf::HfCheckpoint::Open(Dir(arch, "f32").string());
    ASSERT_TRUE(ckpt.ok());
    const plan::ModelDesc desc = DescOf(arch, **ckpt);
    auto full = Build(desc);
    ASSERT_TRUE(LoadHfWeights(*full, desc, **ckpt, 0, 1, torch::kFloat32).ok());
    auto full_params = full->named_parameters();
    int sliced = 0;
    for (int rank = 0; rank < 2; ++rank) {
      auto built = Build(desc);
      NoCommunication tp(rank, 2);
      const Status sharded = ShardEncoderForTensorParallel(*built, desc, &tp);
      ASSERT_TRUE(sharded.ok()) << sharded.ToString();
      const Status loaded = LoadHfWeights(*built, desc, **ckpt, rank, 2, torch::kFloat32);
      ASSERT_TRUE(loaded.ok()) << loaded.ToString();
      for (const auto& item : built->named_parameters()) {
        const TensorParallelSplit split = TensorParallelSplitOf(item.key());
        if (split.sharded()) ++sliced;
        EXPECT_TRUE(torch::equal(item.value(), TensorParallelShardOf(full_params[item.key()], split, rank, 2)))
            << item.key() << " on rank " << rank;
      }
    }
    EXPECT_GT(sliced, 0);
  }
}

// Copies llama_f32 with `edit` applied to its tensor list; returns the new directory.
fs::path EditedCopy(const fs::path& src, const std::string& name,
                    const std::function<void(std::vector<hf::TensorToWrite>&)>& edit) {
  auto ckpt = hf::HfCheckpoint::Open(src.string());
  EXPECT_TRUE(ckpt.ok());
  std::vector<hf::TensorToWrite> tensors;
  for (const auto& n : (*ckpt)->TensorNames()) {
    auto located = (*ckpt)->Find(n);
    const hf::TensorView view = (*ckpt)->View(*located);
    tensors.push_back({n, located->info->dtype, located->info->shape,
                       std::string_view(reinterpret_cast<const char*>(view.data), view.bytes)});
  }
  edit(tensors);
  const fs::path dst = src.parent_path().parent_path() / name;
  fs::remove_all(dst);
  const Status wrote = hf::WriteHfCheckpoint(dst.string(), (*ckpt)->config_json(), tensors);
  EXPECT_TRUE(wrote.ok()) << wrote.ToString();
  return dst;
}

TEST_F(HfWeightsTest, ErrorsNameTheTensorTheFileAndTheShapes) {
  const fs::path llama = Dir("llama", "f32");
  auto ckpt = hf::HfCheckpoint::Open(llama.string());
  ASSERT_TRUE(ckpt.ok());
  const plan::ModelDesc desc = DescOf("llama", **ckpt);
  auto load = [&](const fs::path& dir) {
    auto opened = hf::HfCheckpoint::Open(dir.string());
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    auto model = Build(desc);
    return LoadHfWeights(*model, desc, **opened, 0, 1, torch::kFloat32);
  };
  auto expect_error = [](const Status& s, StatusCode code, const std::vector<std::string>& mentions) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), code) << s.ToString();
    for (const auto& m : mentions) EXPECT_NE(s.message().find(m), std::string::npos) << m << " not in: " << s.message();
  };

  const fs::path missing = EditedCopy(llama, "missing", [](auto& tensors) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [](const auto& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; }),
                  tensors.end());
  });
  expect_error(load(missing), StatusCode::kNotFound, {"model.layers.1.mlp.up_proj.weight", "[48, 32]", "missing"});

  const std::vector<float> six(6, 1.0f);
  const fs::path unexpected = EditedCopy(llama, "unexpected", [&](auto& tensors) {
    tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq",
                       hf::TensorDType::kF32,
                       {6},
                       std::string_view(reinterpret_cast<const char*>(six.data()), 24)});
  });
  expect_error(load(unexpected), StatusCode::kInvalidArgument,
               {"model.layers.0.self_attn.rotary_emb.inv_freq", "[6]", "model.safetensors"});

  const std::vector<float> thirty_one(31, 1.0f);
  const fs::path reshaped = EditedCopy(llama, "reshaped", [&](auto& tensors) {
    for (auto& t : tensors) {
      if (t.name != "model.norm.weight") continue;
      t.shape = {31};
      t.bytes = std::string_view(reinterpret_cast<const char*>(thirty_one.data()), 31 * 4);
    }
  });
  expect_error(load(reshaped), StatusCode::kInvalidArgument,
               {"model.norm.weight", "model.safetensors", "[31]", "[32]"});

  const fs::path integer = EditedCopy(llama, "integer", [](auto& tensors) {
    for (auto& t : tensors) {
      if (t.name == "model.norm.weight") t.dtype = hf::TensorDType::kI32;  // same bytes, wrong kind
    }
  });
  expect_error(load(integer), StatusCode::kInvalidArgument, {"model.norm.weight", "model.safetensors", "I32"});

  // A tied head kept in the file is passed over (some writers keep it).
  auto qwen = hf::HfCheckpoint::Open(Dir("qwen2", "bf16").string());
  ASSERT_TRUE(qwen.ok());
  const plan::ModelDesc qwen_desc = DescOf("qwen2", **qwen);
  ASSERT_TRUE(qwen_desc.tie_embeddings);
  const fs::path with_head = EditedCopy(Dir("qwen2", "bf16"), "tied_with_head", [](auto& tensors) {
    for (const auto& t : std::vector<hf::TensorToWrite>(tensors)) {
      if (t.name == "model.embed_tokens.weight") tensors.push_back({"lm_head.weight", t.dtype, t.shape, t.bytes});
    }
  });
  auto opened = hf::HfCheckpoint::Open(with_head.string());
  ASSERT_TRUE(opened.ok());
  auto qwen_model = Build(qwen_desc);
  EXPECT_TRUE(LoadHfWeights(*qwen_model, qwen_desc, **opened, 0, 1, torch::kFloat32).ok());

  // The wrong architecture's file: llama's has no q/k/v biases.
  auto biased = Build(qwen_desc);
  plan::ModelDesc llama_shaped_qwen = desc;
  llama_shaped_qwen.extra["qkv_bias"] = 1;
  auto model = Build(llama_shaped_qwen);
  expect_error(LoadHfWeights(*model, llama_shaped_qwen, **ckpt, 0, 1, torch::kFloat32), StatusCode::kNotFound,
               {"model.layers.0.self_attn.q_proj.bias", "[48]"});
  // A model that was not built from the desc.
  expect_error(LoadHfWeights(*biased, desc, **ckpt, 0, 1, torch::kFloat32), StatusCode::kInvalidArgument,
               {"was it built from this desc"});
  // No published layout: the built-in ViT.
  const plan::ModelDesc vit = fixtures::VitModel({32, 1, 4, 64, 8, 4, 3});
  auto vit_model = Build(vit);
  expect_error(LoadHfWeights(*vit_model, vit, **ckpt, 0, 1, torch::kFloat32), StatusCode::kInvalidArgument,
               {"built-in ViT"});
  expect_error(ExportHfTensors(*vit_model, vit, torch::kFloat32).status(), StatusCode::kInvalidArgument,
               {"built-in ViT"});
  expect_error(ExportHfTensors(*Build(desc), desc, torch::kInt32).status(), StatusCode::kInvalidArgument, {"bf16"});
}

}  // namespace
}  // namespace maestro::runtime
