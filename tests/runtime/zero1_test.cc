// SPDX-License-Identifier: Apache-2.0
// ZeRO-1 (runtime/parallel/distributed_optimizer.h), labels mpi;runtime:
//  - on one rank the shard's AdamW (weight decay, clipping, a changing LR)
//    gives torch::optim::AdamW's parameters, and Save/Load continues bit for
//    bit; a shard of another layout is refused naming it;
//  - maestro-worker ranks under mpirun train the tiny KD student at DP 2,
//    and at TP 2 x DP 2, with zero_stage = 1: every step's loss equals the
//    zero_stage = 0 run's and the monolithic reference's within 1e-5
//    relative, the final weights the zero_stage = 0 run's within 1e-5, and
//    the checkpoint holds one AdamW shard per DP rank (about half the bytes);
//  - a zero_stage = 1 run stopped after a checkpoint and resumed ends with
//    the weights and losses of an uninterrupted one, bit for bit.
// One torch TU (the checkpoints' weights are read back with torch).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "plan/plan.h"
#include "runtime/models/encoders.h"
#include "runtime/models/layers.h"
#include "runtime/parallel/distributed_optimizer.h"
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/checkpoint_weights.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using runtime::DistributedOptimizer;
using runtime_testing::LastCheckpoint;

// A DP group of one rank: the optimizer never communicates then, and says so
// here if it tried.
class OneRankGroup : public launcher::Backend {
 public:
  OneRankGroup() {
    info_.description = "a one-rank test group";
    info_.ranks = {0};
    info_.my_index = 0;
    info_.world_rank = 0;
  }
  const char* name() const override { return "one-rank"; }
  launcher::Device device() const override { return launcher::Device::kCpu; }
  const launcher::GroupInfo& group() const override { return info_; }
  launcher::Millis timeout() const override { return launcher::Millis(1000); }
  StatusOr<launcher::WorkPtr> AllReduce(launcher::Buffer, launcher::ReduceOp) override { return Used("all_reduce"); }
  StatusOr<launcher::WorkPtr> AllGather(launcher::Buffer, launcher::Buffer) override { return Used("all_gather"); }
  StatusOr<launcher::WorkPtr> ReduceScatter(launcher::Buffer, launcher::Buffer, launcher::ReduceOp) override {
    return Used("reduce_scatter");
  }
  StatusOr<launcher::WorkPtr> Broadcast(launcher::Buffer, int) override { return Used("broadcast"); }
  StatusOr<launcher::WorkPtr> Send(launcher::Buffer, int, int) override { return Used("send"); }
  StatusOr<launcher::WorkPtr> Recv(launcher::Buffer, int, int) override { return Used("recv"); }
  StatusOr<launcher::WorkPtr> Barrier() override { return Used("barrier"); }

 private:
  Status Used(const char* op) {
    ADD_FAILURE() << op << " on a one-rank group";
    return Status::Internal(op);
  }
  launcher::GroupInfo info_;
};

plan::OptimizerDesc TestOptimizer() {
  plan::OptimizerDesc desc;
  desc.lr = 1e-2;
  desc.weight_decay = 0.1;
  desc.beta1 = 0.9;
  desc.beta2 = 0.95;
  desc.grad_clip = 0.5;
  return desc;
}

// Parameters of shapes (7, 5), (13), (4, 3, 2), (1): 73 elements, so the
// flat buffer has padding.
std::vector<torch::Tensor> TestParameters() {
  torch::manual_seed(3);
  std::vector<torch::Tensor> params;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{7, 5}, {13}, {4, 3, 2}, {1}}) {
    params.push_back(torch::randn(shape).set_requires_grad(true));
  }
  return params;
}

std::vector<torch::Tensor> Clones(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone().set_requires_grad(true));
  return out;
}

// Step `step`'s gradients: large on odd steps (clipped), small on even ones.
std::vector<torch::Tensor> Gradients(const std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(100 + step);
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(torch::randn(p.sizes()) * (step % 2 == 1 ? 1.0 : 0.01));
  return grads;
}

// SectionRunner::OptimizerStep's clipping (norm from fp64 squares) and
// torch's AdamW at `lr`. Returns the norm.
double ReplicatedStep(torch::optim::AdamW& adamw, std::vector<torch::Tensor>& params,
                      const std::vector<torch::Tensor>& grads, double lr, double clip) {
  torch::NoGradGuard guard;
  double sq = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].mutable_grad() = grads[i].clone();
    sq += grads[i].to(torch::kFloat64).pow(2).sum().item<double>();
  }
  const double norm = std::sqrt(sq);
  if (norm > clip) {
    for (auto& p : params) p.mutable_grad().mul_(clip / (norm + 1e-6));
  }
  for (auto& group : adamw.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  adamw.step();
  return norm;
}

double ShardedStep(DistributedOptimizer& opt, std::vector<torch::Tensor>& params,
                   const std::vector<torch::Tensor>& grads, double lr) {
  torch::NoGradGuard guard;
  for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad().copy_(grads[i]);
  double blocked = 0;
  EXPECT_TRUE(opt.ReduceScatterGradients(&blocked).ok());
  auto norm = opt.StepShard(lr, &blocked);
  EXPECT_TRUE(norm.ok()) << norm.status().ToString();
  EXPECT_TRUE(opt.GatherParameters(&blocked).ok());
  return norm.ok() ? *norm : -1;
}

// max |a - b| over max |b|, per tensor, the largest.
double MaxRelativeDifference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(b[i].abs().max().item<double>(), 1e-30);
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>() / scale);
  }
  return worst;
}

TEST(DistributedOptimizer, OneRankEqualsTorchAdamWWithWeightDecayClippingAndAChangingLr) {
  const plan::OptimizerDesc desc = TestOptimizer();
  auto reference = TestParameters();
  auto sharded = Clones(reference);
  const auto initial = Clones(reference);
  torch::optim::AdamW adamw(
      reference,
      torch::optim::AdamWOptions(desc.lr).betas({desc.beta1, desc.beta2}).weight_decay(desc.weight_decay).eps(1e-8));
  OneRankGroup dp;
  auto opt = DistributedOptimizer::Create(sharded, {false, false, false, false}, dp, nullptr, desc, "test");
  ASSERT_TRUE(opt.ok()) << opt.status().ToString();
  EXPECT_EQ((*opt)->numel(), 73);
  EXPECT_EQ((*opt)->shard_numel(), 80) << "73 elements padded to a multiple of 16";
  for (int step = 0; step < 6; ++step) {
    const auto grads = Gradients(reference, step);
    const double lr = desc.lr * (step + 1) / 6.0;
    const double want = ReplicatedStep(adamw, reference, grads, lr, desc.grad_clip);
    const double got = ShardedStep(**opt, sharded, grads, lr);
    EXPECT_NEAR(got, want, 1e-12 * want) << "step " << step;
    EXPECT_LE(MaxRelativeDifference(sharded, reference), 1e-6) << "step " << step;
    for (const auto& p : sharded) EXPECT_EQ(p.grad().abs().max().item<float>(), 0.0f) << "gradients zeroed";
  }
  EXPECT_EQ((*opt)->step_count(), 6);
  EXPECT_GT(MaxRelativeDifference(sharded, initial), 1e-3) << "six steps moved the parameters";
}

TEST(DistributedOptimizer, SaveAndLoadContinueBitForBitAndAnotherLayoutIsRefused) {
  const plan::OptimizerDesc desc = TestOptimizer();
  auto a = TestParameters();
  OneRankGroup dp;
  auto first = DistributedOptimizer::Create(a, {false, false, false, false}, dp, nullptr, desc, "test");
  ASSERT_TRUE(first.ok());
  for (int step = 0; step < 3; ++step) ShardedStep(**first, a, Gradients(a, step), desc.lr);
  auto bytes = (*first)->Save();
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();

  auto b = Clones(a);  // the model as a checkpoint gives it back
  auto second = DistributedOptimizer::Create(b, {false, false, false, false}, dp, nullptr, desc, "test");
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE((*second)->Load(*bytes).ok());
  EXPECT_EQ((*second)->step_count(), 3);
  for (int step = 3; step < 6; ++step) {
    ShardedStep(**first, a, Gradients(a, step), desc.lr);
    ShardedStep(**second, b, Gradients(b, step), desc.lr);
  }
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;

  auto c = TestParameters();
  c.push_back(torch::zeros({40}).set_requires_grad(true));
  auto other = DistributedOptimizer::Create(c, {false, false, false, false, false}, dp, nullptr, desc, "section 'x'");
  ASSERT_TRUE(other.ok());
  const Status refused = (*other)->Load(*bytes);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("another layout (73 parameters, DP 1, rank 0)"), std::string::npos)
      << refused.ToString();
  EXPECT_NE(refused.message().find("section 'x'"), std::string::npos) << refused.ToString();
}

// ---- whole runs under mpirun ----

// specs/tiny_kd.toml placed on this machine: the teacher on one rank (built
// from the seed), the student at `dp` x `tp` with micro-batches of 4,
// `zero_stage`, weight decay 0.1 (so the decoupled decay is exercised).
plan::Plan KdPlan(int dp, int tp, int zero_stage, int64_t steps) {
  // The student on ranks of its own.
  plan::Plan p = runtime_testing::CompiledExamplePlan("tiny_kd.toml", compiler::Grouping::kSectioned);
  if (plan::SectionPlan* student = runtime_testing::ShapeTinyKd(p, {tp, 1, 1, dp, 4}, {1, 1, 1, 1, 8}, zero_stage)) {
    student->optimizer.weight_decay = 0.1;
    runtime_testing::UseKdLoss(*student);
  }
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// Fresh(name): <test-tmp>/runtime_zero1/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_zero1"};

// Plan `p` (the student with zero_stage 1) against the same plan with
// zero_stage 0 and against the reference.
void ExpectZero1EqualsZero0AndReference(const std::string& what, const plan::Plan& p) {
  ASSERT_EQ(p.sections[static_cast<size_t>(p.section_index("student"))].config.zero_stage, 1);
  plan::Plan p0 = p;
  p0.sections[static_cast<size_t>(p0.section_index("student"))].config.zero_stage = 0;
  const std::string dir = Fresh(what);
  ASSERT_NO_FATAL_FAILURE(
      runtime_testing::ExpectRunEqualsReferenceAndOther(what, p, p0, dir, "zero0", " vs zero_stage 0"));

  const auto w1 = runtime_testing::WeightsOf(p, "student", dir + "/run");
  const auto w0 = runtime_testing::WeightsOf(p, "student", dir + "/zero0/run");
  ASSERT_FALSE(w1.empty());
  ASSERT_EQ(w1.size(), w0.size());
  std::string where;
  EXPECT_LE(runtime_testing::LargestRelativeDifference(w1, w0, &where), 1e-5) << what << ": " << where;

  // The checkpoint's AdamW moments: under ZeRO-1 every (TP, DP) rank writes
  // its own shard (about half of its TP rank's moments at DP 2); under
  // zero_stage 0 the DP replicas share the whole moments out, a parameter's
  // with it (runtime/replica_owners.h): every rank writes some, none its TP
  // rank's whole; the same global tensors.
  const auto c1 = LastCheckpoint(dir + "/run");
  const auto c0 = LastCheckpoint(dir + "/zero0/run");
  const auto& s = p.sections[static_cast<size_t>(p.section_index("student"))];
  const auto m1 = runtime_testing::PieceBytesByFile(c1, "student/adamw.");
  const auto m0 = runtime_testing::PieceBytesByFile(c0, "student/adamw.");
  ASSERT_EQ(m1.size(), static_cast<size_t>(s.config.tp * s.config.dp)) << what;
  ASSERT_EQ(m0.size(), static_cast<size_t>(s.config.tp * s.config.dp)) << what;
  double total1 = 0, total0 = 0, largest1 = 0, largest0 = 0;
  for (const auto& [file, bytes] : m0) {
    total0 += bytes;
    largest0 = std::max(largest0, bytes);
  }
  for (const auto& [file, bytes] : m1) {
    total1 += bytes;
    largest1 = std::max(largest1, bytes);
  }
  // The busiest TP rank's whole moments (ZeRO-1's files of its DP ranks together).
  std::map<int, double> by_tp;
  for (const auto& [file, bytes] : m1) {
    const int rank = std::stoi(file.substr(file.find("rank-") + 5));
    auto coords = plan::CoordsOfRank(p, rank);
    ASSERT_TRUE(coords.ok()) << file;
    by_tp[coords->tp] += bytes;
  }
  double busiest_tp_rank = 0;
  for (const auto& [tp, bytes] : by_tp) busiest_tp_rank = std::max(busiest_tp_rank, bytes);
  EXPECT_LT(largest1, 0.6 * busiest_tp_rank) << what;
  EXPECT_GT(largest1, 0.4 * busiest_tp_rank) << what;
  EXPECT_LT(largest0, 0.75 * busiest_tp_rank) << what << ": no replica writes its TP rank's whole moments";
  EXPECT_EQ(total1, total0) << what;
}

TEST(Zero1Training, KdStudentDp2EqualsZeroStage0AndTheReference) {
  ExpectZero1EqualsZero0AndReference("kd_dp2", KdPlan(2, 1, 1, 5));
}

TEST(Zero1Training, KdStudentTp2Dp2EqualsZeroStage0AndTheReference) {
  ExpectZero1EqualsZero0AndReference("kd_tp2_dp2", KdPlan(2, 2, 1, 4));
}

TEST(Zero1Training, StopAndResumeIsBitIdenticalToAnUninterruptedRun) {
  const plan::Plan p = KdPlan(2, 1, 1, 6);
  // Each DP rank writes its own shard's moments; the resumed run's equal
  // the uninterrupted one's, byte for byte.
  runtime_testing::ExpectStopAndResumeCheckpointsEqual("resume", p, Fresh("resume"), 3, 5, "student/adamw.", 2,
                                                       {/*optimizer_present=*/true, /*optimizer_bytes_equal=*/true});
}

}  // namespace
}  // namespace maestro
