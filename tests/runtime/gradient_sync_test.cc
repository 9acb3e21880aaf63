// SPDX-License-Identifier: Apache-2.0
// The gradient sync over DP x CP (docs/gradient_sync.md), labels mpi;runtime:
//  - AllReduceGradients under mpirun (2 ranks, MPI backend) with buckets of
//    1, 7 and 16 elements and one that holds everything: every gradient
//    (a non-contiguous one too) is the sum of both ranks' that one process
//    computes, whatever the bucket;
//  - DistributedOptimizer under mpirun (2 ranks): a reduce-scatter in
//    buckets of 16 bytes per rank's shard gives the same parameters, bit for
//    bit, as one bucket, and moves them;
//  - maestro-worker ranks under mpirun against the one-process reference
//    (runtime/reference.h), every step's loss and the trained weights within
//    1e-5 relative: the tiny LM at DP 2 without ZeRO-1 in several buckets
//    (MAESTRO_GRADIENT_BUCKET_BYTES), at CP 2 x DP 2 with ZeRO-1 sharded over
//    the 4 DP x CP ranks (one optimizer shard per rank in the checkpoint), and
//    the tiny VLM's ViT at CP 2 with ZeRO-1 (sharded over its 2 CP ranks);
//  - the CP 2 x DP 2 ZeRO-1 run stopped after a checkpoint and resumed ends
//    as an uninterrupted one, bit for bit (losses, weights, every shard).
// The in-process tests re-run this binary under mpirun with a gtest filter
// naming themselves (OMPI_COMM_WORLD_SIZE set: one rank of that job).
// One torch TU.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "launcher/mpi_backend.h"
#include "plan/plan.h"
#include "runtime/models/encoders.h"
#include "runtime/parallel/data_parallel.h"
#include "runtime/parallel/distributed_optimizer.h"
#include "tests/fixtures/demo_images.h"
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/checkpoint_weights.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/mpi_world.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using launcher::testing::MpirunArgs;
using launcher::testing::RunCaptured;
using runtime_testing::LastCheckpoint;
using runtime_testing::Losses;
using runtime_testing::SectionedExamplePlan;
using runtime_testing::WritePlan;

// Parameters of shapes (3, 5), (7), (1), (2, 2, 3) and (4, 3): 47 elements.
std::vector<torch::Tensor> TestParameters() {
  torch::manual_seed(11);
  std::vector<torch::Tensor> params;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{3, 5}, {7}, {1}, {2, 2, 3}, {4, 3}}) {
    params.push_back(torch::randn(shape).set_requires_grad(true));
  }
  return params;
}

// Rank `rank`'s gradient of params[i] (every rank can make every rank's).
torch::Tensor RankGradient(const torch::Tensor& param, size_t i, int rank) {
  torch::manual_seed(static_cast<uint64_t>(500 + 10 * rank) + i);
  return torch::randn(param.sizes());
}

TEST(BucketedAllReduceMpi, EveryBucketSizeSumsTheGradientsAsOneProcess) {
  runtime_testing::OnEveryRank(2, [](launcher::Backend& world) {
    const int ranks = world.group().size(), me = world.group().my_index;
    ASSERT_EQ(ranks, 2);
    auto params = TestParameters();
    // 1 element per bucket, 7 (buckets straddle parameters), 16, everything.
    for (const int64_t bucket_bytes : {int64_t{4}, int64_t{28}, int64_t{64}, int64_t{1} << 20}) {
      std::vector<torch::Tensor> want;
      for (size_t i = 0; i < params.size(); ++i) {
        auto g = RankGradient(params[i], i, me);
        // The last parameter's gradient is a transposed (non-contiguous) view.
        if (i + 1 == params.size()) g = RankGradient(params[i].t(), i, me).t();
        params[i].mutable_grad() = g;
        torch::Tensor sum = torch::zeros(params[i].sizes());
        for (int r = 0; r < ranks; ++r) {
          sum += i + 1 == params.size() ? RankGradient(params[i].t(), i, r).t() : RankGradient(params[i], i, r);
        }
        want.push_back(sum);
      }
      ASSERT_FALSE(params.back().grad().is_contiguous());
      double blocked = 0;
      const Status synced = runtime::AllReduceGradients(world, params, &blocked, bucket_bytes);
      ASSERT_TRUE(synced.ok()) << synced.ToString();
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(torch::allclose(params[i].grad(), want[i], 1e-6, 1e-7))
            << "bucket " << bucket_bytes << " B, parameter " << i << ": max diff "
            << (params[i].grad() - want[i]).abs().max().item<float>();
      }
    }
  });
}

TEST(BucketedReduceScatterMpi, SmallBucketsStepTheSameParametersAsOneBucket) {
  runtime_testing::OnEveryRank(2, [](launcher::Backend& world) {
    const int me = world.group().my_index;
    plan::OptimizerDesc desc;
    desc.lr = 1e-2;
    desc.weight_decay = 0.1;
    desc.grad_clip = 0.5;
    std::vector<std::vector<torch::Tensor>> runs;  // [one bucket, buckets of 4 elements of each shard]
    std::vector<int64_t> shard_numel;
    for (const char* bucket : {"", "32"}) {  // 32 B: 4 elements per rank's shard per bucket
      if (bucket[0] == '\0') {
        unsetenv("MAESTRO_GRADIENT_BUCKET_BYTES");
      } else {
        setenv("MAESTRO_GRADIENT_BUCKET_BYTES", bucket, 1);
      }
      auto params = TestParameters();
      const std::vector<bool> flags(params.size(), false);
      auto opt = runtime::DistributedOptimizer::Create(params, flags, world, nullptr, desc, "test");
      ASSERT_TRUE(opt.ok()) << opt.status().ToString();
      shard_numel.push_back((*opt)->shard_numel());
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < params.size(); ++i)
          params[i].mutable_grad().copy_(RankGradient(params[i], i, me + step));
        double blocked = 0;
        ASSERT_TRUE((*opt)->ReduceScatterGradients(&blocked).ok());
        ASSERT_TRUE((*opt)->StepShard(desc.lr, &blocked).ok());
        ASSERT_TRUE((*opt)->GatherParameters(&blocked).ok());
      }
      runs.push_back(params);
    }
    unsetenv("MAESTRO_GRADIENT_BUCKET_BYTES");
    ASSERT_EQ(shard_numel[0], 32) << "47 elements over 2 ranks: shards of 32 (a multiple of 16)";
    const auto initial = TestParameters();
    for (size_t i = 0; i < initial.size(); ++i) {
      EXPECT_TRUE(torch::equal(runs[1][i], runs[0][i])) << "parameter " << i;
      EXPECT_FALSE(torch::equal(runs[0][i], initial[i])) << "parameter " << i << " moved";
    }
  });
}

// ---- maestro-worker ranks against the reference ----

const std::string kWorker = runtime_testing::WorkerBinary();

// Fresh(name): <test-tmp>/runtime_gradient_sync/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_gradient_sync"};

launcher::testing::RunResult RunWorkers(const plan::Plan& p, const std::string& plan_path, const std::string& run_dir,
                                        const std::string& bucket_bytes = "",
                                        const std::vector<std::string>& extra = {}) {
  auto argv = MpirunArgs(p.world_size());
  if (!bucket_bytes.empty()) argv.insert(argv.end(), {"-x", "MAESTRO_GRADIENT_BUCKET_BYTES=" + bucket_bytes});
  argv.insert(argv.end(), {kWorker, "--no-eval", "--no-progress", "--run-dir", run_dir});
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(plan_path);
  return RunCaptured(argv, {{"MAESTRO_COMM_TIMEOUT_S", "60"}});
}

// Section `s`'s weights in the run's last checkpoint, by parameter name.
runtime_testing::NamedWeights SectionWeights(const plan::SectionPlan& s, const std::string& run_dir) {
  return runtime_testing::CheckpointWeights(s.model, run_dir, s.name);
}

// The "gradient sync" lines of the run's ranks for section `name`
// (runtime/executor.cc): how many ranks it spans, how, in how many buckets.
struct SyncLine {
  int ranks = 0;
  std::string how;
  int64_t buckets = 0;
};
std::vector<SyncLine> SyncLines(const std::string& output, const std::string& name) {
  const std::regex line(
      "section '" + name +
      R"(' [^:]*: gradient sync over (\d+) ranks \(dp x cp\): (all-reduce|reduce-scatter)[^,]*, (\d+) buckets?)");
  std::vector<SyncLine> out;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line); it != std::sregex_iterator(); ++it) {
    out.push_back({std::stoi((*it)[1]), (*it)[2], std::stoll((*it)[3])});
  }
  return out;
}

// Runs `p` under mpirun (buckets of `bucket_bytes` when set) and the
// one-process reference: every step's loss and each training section's
// final weights within 1e-5 relative. A ViT's fused attn.qkv.bias counts its
// q and v thirds (its key third's gradient is rounding noise that AdamW
// turns into steps of up to ~lr: held to lr x steps;
// tests/runtime/vit_context_parallel_test.cc). Returns the run's output.
std::string ExpectEqualsReference(const std::string& what, const plan::Plan& p, const std::string& dir,
                                  const std::string& bucket_bytes = "") {
  const std::string path = WritePlan(p, dir);
  const auto run = RunWorkers(p, path, dir + "/run", bucket_bytes);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  const auto reference = runtime_testing::RunReference(path, dir + "/reference");
  EXPECT_EQ(reference.exit_code, 0) << reference.output;
  if (run.exit_code != 0 || reference.exit_code != 0) return run.output;
  const auto got = Losses(dir + "/run"), want = Losses(dir + "/reference");
  EXPECT_EQ(static_cast<int64_t>(got.size()), p.data.steps) << run.output;
  EXPECT_EQ(want.size(), got.size()) << reference.output;
  if (got.empty() || want.size() != got.size()) return run.output;
  for (const auto& [step, loss] : got) {
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_NEAR(loss, want.at(step), 1e-5 * std::abs(want.at(step))) << what << " step " << step;
  }
  EXPECT_LT(got.rbegin()->second, got.begin()->second) << what << ": the loss moves";
  for (const auto& s : p.sections) {
    if (s.mode != plan::SectionMode::kTrain) continue;
    const auto mine = SectionWeights(s, dir + "/run"), ref = SectionWeights(s, dir + "/reference");
    EXPECT_FALSE(mine.empty()) << what << ": " << s.name;
    EXPECT_EQ(mine.size(), ref.size());
    if (mine.empty() || mine.size() != ref.size()) continue;
    double worst = 0;
    for (const auto& [name, t] : mine) {
      auto a = t, b = ref.at(name);
      if (name.size() >= 13 && name.compare(name.size() - 13, 13, "attn.qkv.bias") == 0) {
        const int64_t c = b.size(0) / 3;
        EXPECT_LE((a.narrow(0, c, c) - b.narrow(0, c, c)).abs().max().item<double>(),
                  s.optimizer.lr * static_cast<double>(p.data.steps))
            << what << ": " << s.name << "." << name << " (key bias)";
        a = torch::cat({a.narrow(0, 0, c), a.narrow(0, 2 * c, c)});
        b = torch::cat({b.narrow(0, 0, c), b.narrow(0, 2 * c, c)});
      }
      const double d = (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-30);
      EXPECT_LE(d, 1e-5) << what << ": " << s.name << "." << name;
      worst = std::max(worst, d);
    }
    std::printf("%s %s: final weights within %.2e relative of the reference\n", what.c_str(), s.name.c_str(), worst);
  }
  return run.output;
}

TEST(GradientSyncTrain, Dp2WithoutZero1InSeveralBucketsEqualsReference) {
  const plan::Plan p = SectionedExamplePlan("tiny_teacher.toml", {{"teacher", {1, 1, 2, 4, 0}}}, 4);
  // 64 KiB buckets: the tiny LM's gradients take several.
  const std::string output = ExpectEqualsReference("dp2_buckets", p, Fresh("dp2_buckets"), "65536");
  const auto lines = SyncLines(output, "teacher");
  ASSERT_EQ(lines.size(), 2u) << "one line per rank\n" << output;
  for (const auto& l : lines) {
    EXPECT_EQ(l.ranks, 2);
    EXPECT_EQ(l.how, "all-reduce");
    EXPECT_GT(l.buckets, 2) << "several buckets";
  }
}

TEST(GradientSyncTrain, Cp2Dp2Zero1ShardsOverFourRanksEqualsReferenceAndResumesBitIdentical) {
  const plan::Plan p = SectionedExamplePlan("tiny_teacher.toml", {{"teacher", {1, 2, 2, 4, 1}}}, 4);
  const std::string dir = Fresh("cp2_dp2_zero1");
  const std::string output = ExpectEqualsReference("cp2_dp2_zero1", p, dir, "65536");
  const auto lines = SyncLines(output, "teacher");
  ASSERT_EQ(lines.size(), 4u) << output;
  for (const auto& l : lines) {
    EXPECT_EQ(l.ranks, 4);
    EXPECT_EQ(l.how, "reduce-scatter");
    EXPECT_GT(l.buckets, 1);
  }
  // One AdamW shard per DP x CP rank, each written by its rank.
  const auto state = LastCheckpoint(dir + "/run");
  EXPECT_EQ(runtime_testing::PieceFiles(state, "teacher/adamw.").size(), 4u);

  // Stopped after step 2 and resumed: the same as the uninterrupted run.
  const std::string path = dir + "/plan.json";
  const auto first = RunWorkers(p, path, dir + "/split", "65536", {"--stop-after-steps", "2"});
  ASSERT_EQ(first.exit_code, 85) << "a stopped run exits 85 (requeue)\n" << first.output;
  const auto second = RunWorkers(p, path, dir + "/split", "65536");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const auto a = Losses(dir + "/run"), b = Losses(dir + "/split");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u) << "the resumed run starts at the next step, not over";
  for (const auto& [step, loss] : a) EXPECT_EQ(loss, b.at(step)) << "step " << step;
  const auto resumed = LastCheckpoint(dir + "/split");
  ASSERT_EQ(state.sections.size(), resumed.sections.size());
  for (const auto& [name, s] : state.sections) {
    ASSERT_TRUE(resumed.sections.count(name)) << name;
    EXPECT_TRUE(s.model == resumed.sections.at(name).model) << "weights of " << name;
    EXPECT_TRUE(s.optimizer == resumed.sections.at(name).optimizer) << "AdamW shard " << name;
  }
}

TEST(GradientSyncTrain, VitCp2Zero1ShardsOverItsCpRanksEqualsReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  const plan::Plan p = SectionedExamplePlan("tiny_vlm.toml", {{"vit", {1, 2, 1, 8, 1}}, {"llm", {1, 1, 1, 4, 0}}}, 4);
  const std::string dir = Fresh("vit_cp2_zero1");
  const std::string output = ExpectEqualsReference("vit_cp2_zero1", p, dir);
  const auto lines = SyncLines(output, "vit");
  ASSERT_EQ(lines.size(), 2u) << output;
  for (const auto& l : lines) {
    EXPECT_EQ(l.ranks, 2);
    EXPECT_EQ(l.how, "reduce-scatter");
  }
  const auto state = LastCheckpoint(dir + "/run");
  EXPECT_EQ(runtime_testing::PieceFiles(state, "vit/adamw.").size(), 2u) << "each CP rank writes its AdamW shard";
}

}  // namespace
}  // namespace maestro
