// SPDX-License-Identifier: Apache-2.0
// The Qwen vision towers' packed input under ViT context parallelism
// (VitEncoderImpl::ForwardPacked with context_parallel set), in one process:
// three threads are the three CP ranks of an in-process launcher::Backend
// (AllGather and ReduceScatter over shared memory). Packed images of several
// sizes and a video (segments of unequal lengths, split mid-segment over the
// ranks, the last chunk padded) give, on every rank, the output of the
// unsplit model; with the output's gradient on rank 0 only (as the
// executor's link end gives it), the input and parameter gradients summed
// over the ranks equal the unsplit model's -- for Qwen2-VL and Qwen2.5-VL
// (window and full-attention blocks), plain and with full or selective
// recomputation.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "launcher/comm.h"
#include "plan/model_desc.h"
#include "runtime/models/encoders.h"
#include "tests/fixtures/models.h"

namespace maestro::runtime {
namespace {

// Every rank deposits its bytes, then reads everyone's: one rendezvous per
// collective, in issue order (as the block collectives require).
class SharedMemoryGroup {
 public:
  explicit SharedMemoryGroup(int size) : size_(size), deposits_(static_cast<size_t>(size)) {}
  int size() const { return size_; }

  std::vector<std::vector<char>> Exchange(int rank, std::vector<char> mine) {
    std::unique_lock<std::mutex> lock(mu_);
    // Wait until the previous round's readers are gone.
    Wait(lock, [&] { return readers_ == 0; });
    deposits_[static_cast<size_t>(rank)] = std::move(mine);
    ++deposited_;
    if (deposited_ == size_) {
      readers_ = size_;
      cv_.notify_all();
    }
    Wait(lock, [&] { return readers_ > 0 && deposited_ == size_; });
    auto all = deposits_;
    if (--readers_ == 0) {
      deposited_ = 0;
      cv_.notify_all();
    }
    return all;
  }

 private:
  template <typename Ready>
  void Wait(std::unique_lock<std::mutex>& lock, Ready ready) {
    if (!cv_.wait_for(lock, std::chrono::seconds(60), ready)) throw std::runtime_error("a CP rank did not arrive");
  }
  int size_;
  std::vector<std::vector<char>> deposits_;
  int deposited_ = 0, readers_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
};

class DoneWork : public launcher::Work {
 public:
  DoneWork() : Work(launcher::Millis(1000)) {}
  Status WaitFor(launcher::Millis) override { return Status::Ok(); }
  bool IsCompleted() override { return true; }
};

// A CPU backend over SharedMemoryGroup: the block collectives in fp32.
class SharedMemoryBackend : public launcher::Backend {
 public:
  SharedMemoryBackend(SharedMemoryGroup& group, int rank) : shared_(group) {
    info_.description = "in-process cp group";
    for (int r = 0; r < group.size(); ++r) info_.ranks.push_back(r);
    info_.my_index = info_.world_rank = rank;
  }
  const char* name() const override { return "shared_memory"; }
  launcher::Device device() const override { return launcher::Device::kCpu; }
  const launcher::GroupInfo& group() const override { return info_; }
  launcher::Millis timeout() const override { return launcher::Millis(60000); }

  StatusOr<launcher::WorkPtr> AllGather(launcher::Buffer in, launcher::Buffer out) override {
    auto all = shared_.Exchange(info_.my_index, Bytes(in));
    for (size_t r = 0; r < all.size(); ++r)
      std::memcpy(static_cast<char*>(out.data) + r * in.bytes(), all[r].data(), in.bytes());
    return launcher::WorkPtr(new DoneWork());
  }
  StatusOr<launcher::WorkPtr> ReduceScatter(launcher::Buffer in, launcher::Buffer out, launcher::ReduceOp) override {
    EXPECT_EQ(in.dtype, launcher::DType::kF32);
    auto all = shared_.Exchange(info_.my_index, Bytes(in));
    auto* sum = static_cast<float*>(out.data);
    std::fill(sum, sum + out.count, 0.0f);
    for (const auto& part : all) {
      const auto* block = reinterpret_cast<const float*>(part.data()) + out.count * static_cast<size_t>(info_.my_index);
      for (size_t i = 0; i < out.count; ++i) sum[i] += block[i];
    }
    return launcher::WorkPtr(new DoneWork());
  }
  StatusOr<launcher::WorkPtr> AllReduce(launcher::Buffer, launcher::ReduceOp) override {
    return Unsupported("all_reduce");
  }
  StatusOr<launcher::WorkPtr> Broadcast(launcher::Buffer, int) override { return Unsupported("broadcast"); }
  StatusOr<launcher::WorkPtr> Send(launcher::Buffer, int, int) override { return Unsupported("send"); }
  StatusOr<launcher::WorkPtr> Recv(launcher::Buffer, int, int) override { return Unsupported("recv"); }
  StatusOr<launcher::WorkPtr> Barrier() override { return Unsupported("barrier"); }

 private:
  static std::vector<char> Bytes(const launcher::Buffer& b) {
    const auto* p = static_cast<const char*>(b.data);
    return std::vector<char>(p, p + b.bytes());
  }
  SharedMemoryGroup& shared_;
  launcher::GroupInfo info_;
};

struct Result {
  torch::Tensor output, input_grad;
  std::map<std::string, torch::Tensor> grads;
  int64_t block_rows = 0;
};

// desc's tower on `patches` with `grids`, on CP rank `rank` of `cp` (null:
// unsplit); loss = sum(output * probe) on rank 0, 0 elsewhere.
Result Run(const plan::ModelDesc& desc, const torch::Tensor& patches, const std::vector<PatchGrid>& grids,
           const torch::Tensor& probe, launcher::Backend* cp, plan::RecomputeGranularity recompute) {
  ModelBuildOptions options;
  options.seed = 3;
  auto vit = BuildVitEncoder(desc, options);
  EXPECT_TRUE(vit.ok()) << vit.status().ToString();
  {
    auto gen = at::detail::createCPUGenerator(9);  // off the trivial init (norms, biases)
    torch::NoGradGuard no_grad;
    for (auto& p : (*vit)->parameters()) p.add_(torch::empty(p.sizes()).normal_(0.0, 0.05, gen));
  }
  (*vit)->context_parallel = cp;
  (*vit)->SetRecompute(recompute);
  auto x = patches.clone().requires_grad_(true);
  Result r;
  r.output = (*vit)->ForwardPacked(x, grids);
  r.block_rows = (*vit)->blocks_input_rows();
  const bool first = cp == nullptr || cp->group().my_index == 0;
  (r.output * (first ? probe : torch::zeros_like(probe))).sum().backward();
  r.input_grad = x.grad();
  for (const auto& item : (*vit)->named_parameters()) {
    r.grads[item.key()] = item.value().grad().defined() ? item.value().grad() : torch::zeros_like(item.value());
  }
  return r;
}

double RelDiff(const torch::Tensor& got, const torch::Tensor& want, double floor) {
  const double scale = std::max(want.abs().max().item<double>(), floor);
  return (got - want).abs().max().item<double>() / scale;
}

constexpr int kCp = 3;

void ExpectCpEqualsTheWhole(const plan::ModelDesc& desc, const std::vector<PatchGrid>& grids,
                            plan::RecomputeGranularity recompute) {
  torch::set_num_threads(1);
  int64_t n = 0;
  for (const PatchGrid& g : grids) n += g.t * g.h * g.w;
  auto gen = at::detail::createCPUGenerator(7);
  const auto patches = torch::empty({n, 3 * 2 * 4 * 4}).normal_(0.0, 1.0, gen);
  const auto probe = torch::empty({n / 4, 24}).normal_(0.0, 1.0, gen);
  const Result whole = Run(desc, patches, grids, probe, nullptr, recompute);
  EXPECT_EQ(whole.block_rows, n);

  SharedMemoryGroup shared(kCp);
  std::vector<Result> ranks(kCp);
  std::vector<std::string> errors(kCp);
  std::vector<std::thread> threads;
  for (int r = 0; r < kCp; ++r) {
    threads.emplace_back([&, r] {
      try {
        SharedMemoryBackend cp(shared, r);
        ranks[static_cast<size_t>(r)] = Run(desc, patches, grids, probe, &cp, recompute);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const std::string& error : errors) ASSERT_TRUE(error.empty()) << error;
  double largest = 0.0;
  for (const auto& [name, g] : whole.grads) largest = std::max(largest, g.abs().max().item<double>());
  auto input_grad = torch::zeros_like(whole.input_grad);
  for (const Result& mine : ranks) {
    EXPECT_EQ(mine.block_rows, (n + kCp - 1) / kCp);  // this rank's chunk (the last one padded)
    EXPECT_LT(RelDiff(mine.output, whole.output, 0.0), 1e-5);
    input_grad = input_grad + mine.input_grad;
  }
  EXPECT_LT(RelDiff(input_grad, whole.input_grad, 0.0), 1e-5);
  for (const auto& [name, g] : whole.grads) {
    auto sum = torch::zeros_like(g);
    for (const Result& mine : ranks) sum = sum + mine.grads.at(name);
    EXPECT_LT(RelDiff(sum, g, 1e-3 * largest), 1e-5) << name;
  }
}

// Five image sizes and a 2-frame video: 156 patches (52 a rank), so
// segments are cut mid-way.
const std::vector<PatchGrid> kQwen2Grids{{1, 4, 4}, {1, 2, 6}, {1, 6, 2}, {1, 4, 8}, {1, 6, 6}, {2, 4, 6}};
// 3 x 3, 5 x 2 and 1 x 3 merged units (padded windows), a 2-frame video and
// a 1 x 1-unit image: 140 patches, chunks of 47 (the last one padded by 1).
const std::vector<PatchGrid> kQwen25Grids{{1, 6, 6}, {1, 10, 4}, {1, 2, 6}, {2, 6, 4}, {1, 2, 2}};

TEST(QwenVisionContextParallel, Qwen2VlPackedCp3EqualsTheWhole) {
  ExpectCpEqualsTheWhole(fixtures::TinyQwen2VlVisionModel(), kQwen2Grids, plan::RecomputeGranularity::kNone);
}

TEST(QwenVisionContextParallel, Qwen25VlPackedCp3EqualsTheWhole) {
  ExpectCpEqualsTheWhole(fixtures::TinyQwen25VlVisionModel(), kQwen25Grids, plan::RecomputeGranularity::kNone);
}

TEST(QwenVisionContextParallel, Qwen25VlPackedCp3WithFullAndSelectiveRecomputeEqualsTheWhole) {
  ExpectCpEqualsTheWhole(fixtures::TinyQwen25VlVisionModel(), kQwen25Grids, plan::RecomputeGranularity::kFull);
  ExpectCpEqualsTheWhole(fixtures::TinyQwen25VlVisionModel(), kQwen25Grids, plan::RecomputeGranularity::kSelective);
}

}  // namespace
}  // namespace maestro::runtime
