// SPDX-License-Identifier: Apache-2.0
// Tensor parallelism of the encoder side (runtime/models/encoders.h,
// ShardEncoderForTensorParallel): a ViT (built-in with a merger, CLIP,
// Qwen2-VL with its fused qkv and 2-D RoPE), an audio encoder and a
// projector, each split over a TP group of 2 simulated in this process (one
// thread per rank, the all-reduce summing the ranks' tensors in rank order),
// give the unsharded model's outputs, input gradient and parameter gradients
// (each rank's gradient = its slice of the unsharded gradient) within 1e-5
// relative (a gradient relative to at least 1e-3 of the model's largest); each rank's weights are exactly its slice of
// the unsharded model's; a TP size that does not divide the heads is refused by name.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "compiler/candidates.h"
#include "plan/model_desc.h"
#include "runtime/models/encoders.h"
#include "runtime/parallel/tensor_parallel.h"
#include "tests/fixtures/models.h"

namespace maestro::runtime {
namespace {

using plan::ModelDesc;
using plan::ModelKind;

// The TP group of `size` ranks as threads of this process. AllReduceSum is
// collective: every rank's tensor is summed in rank order (the same bits on
// every rank). A rank that never arrives makes the others throw after 60 s
// rather than hang.
class InProcessTpGroup {
 public:
  explicit InProcessTpGroup(int size) : size_(size), slots_(static_cast<size_t>(size)) {}
  int size() const { return size_; }

  void AllReduceSum(int rank, torch::Tensor& t) {
    slots_[static_cast<size_t>(rank)] = t.clone();
    Barrier();
    auto sum = slots_[0].clone();
    for (int r = 1; r < size_; ++r) sum += slots_[static_cast<size_t>(r)];
    Barrier();  // every rank has read the slots before the next round writes them
    t.copy_(sum);
  }

 private:
  void Barrier() {
    std::unique_lock<std::mutex> lock(mu_);
    const int64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return generation_ != generation; })) {
      throw std::runtime_error("a TP rank did not reach the all-reduce");
    }
  }

  int size_;
  std::vector<torch::Tensor> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int64_t generation_ = 0;
};

class ThreadReducer : public TensorParallelReducer {
 public:
  ThreadReducer(InProcessTpGroup& group, int rank) : group_(group), rank_(rank) {}
  void AllReduceSum(torch::Tensor& t) override { group_.AllReduceSum(rank_, t); }
  int rank() const override { return rank_; }
  int size() const override { return group_.size(); }

 private:
  InProcessTpGroup& group_;
  int rank_;
};

// What one model (a shard or the whole) computed on the case's input.
struct Computed {
  torch::Tensor output, input_grad;
  std::map<std::string, torch::Tensor> weights, grads;
  std::string error;
};

using Forward = std::function<torch::Tensor(torch::nn::Module&, const torch::Tensor&)>;

Forward ForwardOf(ModelKind kind) {
  return [kind](torch::nn::Module& m, const torch::Tensor& x) -> torch::Tensor {
    switch (kind) {
      case ModelKind::kVit: return m.as<VitEncoderImpl>()->forward(x);
      case ModelKind::kAudioEncoder: return m.as<AudioEncoderImpl>()->forward(x);
      case ModelKind::kProjector: return m.as<MlpProjectorImpl>()->forward(x);
      case ModelKind::kDecoder: break;
    }
    throw std::runtime_error("not an encoder");
  };
}

// Builds desc's model (seed 5), shards it when `tp` is set, runs input ->
// loss = sum(output * probe) -> backward.
Computed Run(const ModelDesc& desc, const torch::Tensor& input, const torch::Tensor& probe, TensorParallelReducer* tp) {
  Computed c;
  try {
    ModelBuildOptions options;
    options.seed = 5;
    auto built = BuildModel(desc, options);
    if (!built.ok()) throw std::runtime_error(built.status().ToString());
    auto& model = **built;
    if (tp != nullptr) {
      const Status sharded = ShardEncoderForTensorParallel(model, desc, tp);
      if (!sharded.ok()) throw std::runtime_error(sharded.ToString());
    }
    auto x = input.clone().set_requires_grad(true);
    c.output = ForwardOf(desc.kind)(model, x);
    (c.output * probe).sum().backward();
    c.input_grad = x.grad();
    for (const auto& item : model.named_parameters()) {
      c.weights[item.key()] = item.value().detach();
      // CLIP's post_layernorm and SigLIP's pooling head feed nothing a
      // section outputs: no gradient.
      if (item.value().grad().defined()) c.grads[item.key()] = item.value().grad();
    }
  } catch (const std::exception& e) {
    c.error = e.what();
  }
  return c;
}

// max |got - want| / max(max |want|, floor).
double RelDiff(const torch::Tensor& got, const torch::Tensor& want, double floor = 0.0) {
  const double scale = std::max(want.abs().max().item<double>(), floor);
  return (got - want).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

// The case: desc's model on `input`, unsharded vs 2 TP ranks.
void ExpectShardsComputeTheWhole(const std::string& name, const ModelDesc& desc, const torch::Tensor& input) {
  SCOPED_TRACE(name);
  torch::set_num_threads(1);
  auto gen = at::detail::createCPUGenerator(11);
  ModelBuildOptions options;
  options.seed = 5;
  auto shape_model = BuildModel(desc, options);
  ASSERT_TRUE(shape_model.ok());
  torch::Tensor shape_out;
  {
    torch::NoGradGuard guard;
    shape_out = ForwardOf(desc.kind)(**shape_model, input);
  }
  auto probe = torch::empty(shape_out.sizes()).normal_(0.0, 1.0, gen);
  const Computed full = Run(desc, input, probe, nullptr);
  ASSERT_TRUE(full.error.empty()) << full.error;

  constexpr int kTp = 2;
  InProcessTpGroup group(kTp);
  std::vector<Computed> ranks(kTp);
  std::vector<std::thread> threads;
  for (int r = 0; r < kTp; ++r) {
    threads.emplace_back([&, r] {
      ThreadReducer tp(group, r);
      ranks[static_cast<size_t>(r)] = Run(desc, input, probe, &tp);
    });
  }
  for (auto& t : threads) t.join();

  // A key bias's gradient is zero but for rounding (softmax ignores a shift
  // shared by every key): gradients are compared relative to at least 1e-3
  // of the model's largest gradient.
  double largest_grad = 0.0;
  for (const auto& [param, grad] : full.grads) largest_grad = std::max(largest_grad, grad.abs().max().item<double>());
  double worst = 0.0;
  int sharded = 0;
  for (int r = 0; r < kTp; ++r) {
    const Computed& mine = ranks[static_cast<size_t>(r)];
    ASSERT_TRUE(mine.error.empty()) << "rank " << r << ": " << mine.error;
    worst = std::max(worst, RelDiff(mine.output, full.output));
    worst = std::max(worst, RelDiff(mine.input_grad, full.input_grad));
    ASSERT_EQ(mine.weights.size(), full.weights.size());
    for (const auto& [param, weight] : mine.weights) {
      const TensorParallelSplit split = TensorParallelSplitOf(param);
      const auto want_weight = TensorParallelShardOf(full.weights.at(param), split, r, kTp);
      EXPECT_TRUE(torch::equal(weight, want_weight)) << param << " on rank " << r;
      if (split.sharded()) {
        EXPECT_LT(weight.numel(), full.weights.at(param).numel()) << param;
        ++sharded;
      }
      ASSERT_EQ(mine.grads.count(param), full.grads.count(param)) << param << " on rank " << r;
      if (!full.grads.count(param)) continue;
      const double d = RelDiff(mine.grads.at(param), TensorParallelShardOf(full.grads.at(param), split, r, kTp),
                               1e-3 * largest_grad);
      EXPECT_LT(d, 1e-5) << param << " on rank " << r;
      worst = std::max(worst, d);
    }
  }
  EXPECT_GT(sharded, 0);
  EXPECT_LT(worst, 1e-5);
  std::cout << name << ": " << sharded / kTp << " sharded parameters; outputs and gradients within " << worst
            << " relative of the unsharded model\n";
}

ModelDesc TinyVitWithMerger() {
  ModelDesc d = fixtures::TinyVitModel();
  d.out_dim = 24;
  d.extra["spatial_merge"] = 1;
  d.extra["merger_hidden"] = 48;
  return d;
}

torch::Tensor Input(std::vector<int64_t> shape) {
  auto gen = at::detail::createCPUGenerator(7);
  return torch::empty(shape).normal_(0.0, 1.0, gen);
}

TEST(EncoderTensorParallel, BuiltinVitWithMergerSplitInTwoEqualsTheWhole) {
  ExpectShardsComputeTheWhole("vit", TinyVitWithMerger(), Input({2, 3, 8, 8}));
}

TEST(EncoderTensorParallel, ClipVitSplitInTwoEqualsTheWhole) {
  ExpectShardsComputeTheWhole("clip", fixtures::TinyClipVisionModel(), Input({2, 3, 8, 8}));
}

// SigLIP: CLIP's separate q/k/v blocks with gelu_tanh and post_layernorm;
// its pooling head stays replicated (and, off the section's path, gradless).
TEST(EncoderTensorParallel, SiglipVitSplitInTwoEqualsTheWhole) {
  ExpectShardsComputeTheWhole("siglip", fixtures::TinySiglipVisionModel(), Input({2, 3, 10, 10}));
}

TEST(EncoderTensorParallel, Qwen2VlVitFusedQkvSplitInTwoEqualsTheWhole) {
  ExpectShardsComputeTheWhole("qwen2_vl", fixtures::TinyQwen2VlVisionModel(), Input({2, 3, 16, 16}));
}

// Qwen2.5-VL: the SwiGLU MLP's gate/up rows (with their biases) and down
// columns, RMSNorms replicated; windowed and full-attention blocks.
TEST(EncoderTensorParallel, Qwen25VlVitSwiGluSplitInTwoEqualsTheWhole) {
  ExpectShardsComputeTheWhole("qwen2_5_vl", fixtures::TinyQwen25VlVisionModel(), Input({2, 3, 24, 24}));
}

TEST(EncoderTensorParallel, AudioEncoderSplitInTwoEqualsTheWhole) {
  ExpectShardsComputeTheWhole("audio", fixtures::AudioEncoderModel({32, 2, 4, 64, 10, 12}), Input({2, 10, 12}));
}

TEST(EncoderTensorParallel, ProjectorSplitInTwoEqualsTheWhole) {
  ModelDesc d;
  d.kind = ModelKind::kProjector;
  d.in_dim = 24;
  d.out_dim = 32;
  ExpectShardsComputeTheWhole("projector", d, Input({2, 5, 24}));
}

// A fused qkv is split per q, k and v: rank r's rows are its heads' in each.
TEST(EncoderTensorParallel, FusedQkvShardTakesEachRanksHeadsOfQKAndV) {
  auto full = torch::arange(12).view({12, 1});  // q rows 0-3, k 4-7, v 8-11
  auto shard = TensorParallelShardOf(full, {0, 3}, 1, 2);
  EXPECT_TRUE(torch::equal(shard.flatten(), torch::tensor({2, 3, 6, 7, 10, 11}, torch::kLong)));
  auto whole = torch::zeros_like(full);
  PlaceTensorParallelShard(whole, shard, {0, 3}, 1);
  EXPECT_TRUE(torch::equal(whole.flatten(), torch::tensor({0, 0, 2, 3, 0, 0, 6, 7, 0, 0, 10, 11}, torch::kLong)));
}

TEST(EncoderTensorParallel, TpThatDoesNotDivideTheHeadsIsRefusedByName) {
  ModelDesc d = fixtures::VitModel({36, 1, 3, 64, 8, 4, 3});  // 3 heads
  auto built = BuildModel(d);
  ASSERT_TRUE(built.ok());
  InProcessTpGroup group(2);
  ThreadReducer tp(group, 0);
  const Status s = ShardEncoderForTensorParallel(**built, d, &tp);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("heads = 3"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("tp = 2 must divide heads"), std::string::npos) << s.message();
}

// Over `shapes` x TP 1-4: the planner (compiler::TpSplitsHeads) accepts a
// TP degree exactly when the runtime's sharding (ShardModelForTensorParallel)
// shards the built model, and a shard then holds fewer parameters than the
// whole. Counts the shapes built, the (shape, TP > 1) pairs split and those
// refused, and the pairs `counted` marks.
struct GridCounts {
  int built = 0, split = 0, refused = 0, counted = 0;
};
GridCounts ExpectPlannerAgreesWithTheRuntime(const std::vector<ModelDesc>& shapes,
                                             const std::function<bool(const ModelDesc&, int)>& counted = {}) {
  GridCounts n;
  for (const ModelDesc& d : shapes) {
    if (!ValidateModelDesc(d, "grid").ok()) continue;
    ++n.built;
    for (int tp : {1, 2, 3, 4}) {
      auto whole = BuildModel(d);
      auto model = BuildModel(d);
      EXPECT_TRUE(whole.ok() && model.ok()) << whole.status().ToString();
      if (!whole.ok() || !model.ok()) return n;
      InProcessTpGroup group(tp);
      ThreadReducer reducer(group, tp - 1);
      const Status sharded = ShardModelForTensorParallel(**model, d, &reducer);
      const bool planner = compiler::TpSplitsHeads(d, tp);
      const std::string what = std::string(plan::ModelKindName(d.kind)) + " heads " + std::to_string(d.heads) +
                               " kv_heads " + std::to_string(d.kv_heads) + " ffn_hidden " +
                               std::to_string(d.ffn_hidden) + " experts " + std::to_string(d.experts) +
                               " moe_ffn_hidden " + std::to_string(d.moe_ffn_hidden) + " out_dim " +
                               std::to_string(d.out_dim) + " tp " + std::to_string(tp);
      EXPECT_EQ(sharded.ok(), planner) << what << ": " << sharded.ToString();
      if (counted && counted(d, tp)) ++n.counted;
      if (sharded.ok() && tp > 1) {
        int64_t shard_params = 0, whole_params = 0;
        for (const auto& p : (*model)->parameters()) shard_params += p.numel();
        for (const auto& p : (*whole)->parameters()) whole_params += p.numel();
        EXPECT_LT(shard_params, whole_params) << what;
        ++n.split;
      }
      if (!sharded.ok()) ++n.refused;
    }
  }
  return n;
}

// The rule that a TP degree splits a model has one home
// (plan/tensor_parallel_split.h) that the planner (compiler::TpSplitsHeads)
// and the runtime call: over a grid of encoder and projector shapes the two
// agree (ExpectPlannerAgreesWithTheRuntime).
TEST(EncoderTensorParallel, PlannerAndRuntimeAgreeOnWhichTpSplitsAnEncoderOverAGrid) {
  std::vector<ModelDesc> shapes;
  for (int64_t heads : {1, 2, 3, 4, 6}) {
    for (int64_t ffn : {6, 8, 12, 16}) {
      shapes.push_back(fixtures::VitModel({24, 1, heads, ffn, 8, 2, 1}));
      for (double merger_hidden : {0.0, 36.0, 40.0}) {  // 0: spatial_merge^2 x hidden
        ModelDesc merged = fixtures::VitModel({24, 1, heads, ffn, 8, 2, 1});
        merged.extra["spatial_merge"] = 2;
        if (merger_hidden > 0) merged.extra["merger_hidden"] = merger_hidden;
        merged.out_dim = 12;
        shapes.push_back(merged);
      }
      shapes.push_back(fixtures::AudioEncoderModel({24, 1, heads, ffn, 4, 8}));
    }
  }
  for (int64_t out_dim : {6, 8, 9, 12}) {
    ModelDesc projector;
    projector.kind = ModelKind::kProjector;
    projector.in_dim = 10;
    projector.out_dim = out_dim;
    shapes.push_back(projector);
  }
  const GridCounts n = ExpectPlannerAgreesWithTheRuntime(shapes);
  EXPECT_GT(n.built, 30);
  EXPECT_GT(n.split, 20) << "the grid must contain shapes TP splits";
  EXPECT_GT(n.refused, 20) << "and shapes it refuses";
}

// The decoder's rule has the same home: over a grid of dense and MoE
// decoder shapes (KV heads fewer than TP among them, which the runtime does
// not replicate) the planner and the runtime agree.
TEST(EncoderTensorParallel, PlannerAndRuntimeAgreeOnWhichTpSplitsADecoderOverAGrid) {
  std::vector<ModelDesc> shapes;
  for (int64_t heads : {2, 4, 6, 8}) {
    for (int64_t kv_heads : {int64_t{1}, int64_t{2}, heads}) {
      if (heads % kv_heads != 0) continue;
      for (int64_t ffn : {12, 16, 18}) {
        shapes.push_back(fixtures::DecoderModel({48, 1, heads, kv_heads, ffn, 40}));
        ModelDesc moe = fixtures::DecoderModel({48, 1, heads, kv_heads, 16, 40});
        moe.experts = 4;
        moe.experts_per_token = 2;
        moe.moe_ffn_hidden = ffn;
        shapes.push_back(moe);
      }
    }
  }
  const GridCounts n = ExpectPlannerAgreesWithTheRuntime(
      shapes, [](const ModelDesc& d, int tp) { return d.kv_heads < tp && d.heads % tp == 0; });
  EXPECT_GT(n.built, 20);
  EXPECT_GT(n.split, 20) << "the grid must contain shapes TP splits";
  EXPECT_GT(n.refused, 20) << "and shapes it refuses";
  EXPECT_GT(n.counted, 5) << "and shapes with fewer KV heads than TP";
}

}  // namespace
}  // namespace maestro::runtime
