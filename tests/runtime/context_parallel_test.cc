// SPDX-License-Identifier: Apache-2.0
// Context parallelism (runtime/parallel/context_parallel.h), labels mpi;runtime:
//  - the load-balanced causal split (chunks r and 2*cp-1-r): positions, the
//    split of a tensor and its inverse, the refusal of a length 2*cp does not divide;
//  - GatherSequence under mpirun (2 ranks, MPI backend): the forward equals
//    the full tensor's rows in the gathered order, and the backward (each
//    rank weighting the gathered tensor differently) gives every rank the
//    gradient of its own rows that one process computes for the sum of all
//    ranks' losses.
// The GatherSequence test re-runs this binary under mpirun with a gtest
// filter naming itself (OMPI_COMM_WORLD_SIZE set: it is one rank of that
// job). One torch TU.
#include "runtime/parallel/context_parallel.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "launcher/mpi_backend.h"
#include "tests/launcher/run_util.h"

namespace maestro {
namespace {

using launcher::testing::MpirunArgs;
using launcher::testing::RunCaptured;
using runtime::ContextParallelPositions;
using runtime::GatheredContextParallelPositions;
using runtime::GatherSequence;
using runtime::JoinContextParallelParts;
using runtime::SplitSequenceForContextParallel;

bool IsMpirunRank() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
}

// Runs the current test as `ranks` processes under mpirun and expects them all to pass.
void RunThisTestUnderMpirun(int ranks) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  auto argv = MpirunArgs(ranks);
  argv.push_back(std::filesystem::read_symlink("/proc/self/exe").string());
  argv.push_back(std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name());
  argv.push_back("--gtest_color=no");
  const auto r = RunCaptured(argv, {{"MAESTRO_COMM_TIMEOUT_S", "60"}});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Every rank ran the test and passed it.
  int passed = 0;
  for (size_t at = r.output.find("[  PASSED  ] 1 test"); at != std::string::npos;
       at = r.output.find("[  PASSED  ] 1 test", at + 1)) {
    ++passed;
  }
  EXPECT_EQ(passed, ranks) << r.output;
}

TEST(ContextParallelSplit, ChunksRAndMirrorAndTheInverse) {
  // 16 tokens, cp 2: 4 chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  const auto p0 = ContextParallelPositions(16, 2, 0), p1 = ContextParallelPositions(16, 2, 1);
  EXPECT_TRUE(torch::equal(p0, torch::cat({torch::arange(0, 4), torch::arange(12, 16)})));
  EXPECT_TRUE(torch::equal(p1, torch::arange(4, 12)));
  // cp 4: every position exactly once over the ranks, each rank the same count.
  auto all = GatheredContextParallelPositions(24, 4);
  EXPECT_TRUE(torch::equal(std::get<0>(all.sort()), torch::arange(24)));
  auto x = torch::randn({2, 24, 3});
  std::vector<torch::Tensor> parts;
  for (int r = 0; r < 4; ++r) {
    parts.push_back(SplitSequenceForContextParallel(x, 1, 4, r));
    EXPECT_EQ(parts.back().size(1), 6);
    EXPECT_TRUE(torch::equal(parts.back(), x.index_select(1, ContextParallelPositions(24, 4, r))));
  }
  EXPECT_TRUE(torch::equal(JoinContextParallelParts(parts, 1), x));
  EXPECT_NE(runtime::ContextParallelSplitError(18, 2), "");
  EXPECT_EQ(runtime::ContextParallelSplitError(16, 2), "");
}

// The weight rank `rank` puts on the gathered tensor of `shape` (every rank can make every rank's).
torch::Tensor RankWeight(at::IntArrayRef shape, int rank) {
  torch::manual_seed(1000 + rank);
  return torch::randn(shape);
}

// On every rank: full x (same seed everywhere), this rank's part as a leaf, GatherSequence
// along `dim`, loss = sum(gathered * weight_of_this_rank); backward. Checked against one
// process: loss_total = sum over ranks of sum(x[gathered order] * weight_r).
void CheckGatherSequence(launcher::Backend& group, at::IntArrayRef full_shape, int64_t dim) {
  const int cp = group.group().size(), rank = group.group().my_index;
  torch::manual_seed(7);
  auto x = torch::randn(full_shape);
  const int64_t seq_len = x.size(dim);
  auto local = SplitSequenceForContextParallel(x, dim, cp, rank).detach().clone().requires_grad_(true);
  auto gathered = GatherSequence(local, dim, group);
  auto order = GatheredContextParallelPositions(seq_len, cp);
  auto expected_forward = x.index_select(dim, order);
  ASSERT_EQ(gathered.sizes(), expected_forward.sizes());
  EXPECT_TRUE(torch::allclose(gathered, expected_forward, 0, 0)) << "forward, dim " << dim;
  // The whole sequence in position order (GatherWholeSequence) is x itself.
  EXPECT_TRUE(torch::allclose(runtime::GatherWholeSequence(local.detach(), dim, group), x, 0, 0)) << "dim " << dim;
  (gathered * RankWeight(gathered.sizes(), rank)).sum().backward();

  auto x_ref = x.clone().requires_grad_(true);
  auto gathered_ref = x_ref.index_select(dim, order);
  torch::Tensor total = torch::zeros({});
  for (int r = 0; r < cp; ++r) total = total + (gathered_ref * RankWeight(gathered_ref.sizes(), r)).sum();
  total.backward();
  auto expected_grad = SplitSequenceForContextParallel(x_ref.grad(), dim, cp, rank);
  ASSERT_TRUE(local.grad().defined());
  EXPECT_TRUE(torch::allclose(local.grad(), expected_grad, 1e-5, 1e-6))
      << "backward, dim " << dim << ": max diff " << (local.grad() - expected_grad).abs().max().item<float>();
}

TEST(GatherSequenceMpi, TwoRanksForwardAndGradientEqualOneProcess) {
  if (!IsMpirunRank()) return RunThisTestUnderMpirun(2);
  auto session = launcher::MpiSession::Init();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  {
    auto world = (*session)->World(launcher::Millis(60000));
    ASSERT_TRUE(world.ok()) << world.status().ToString();
    ASSERT_EQ((*world)->group().size(), 2);
    CheckGatherSequence(**world, {2, 16, 5}, 1);    // hidden rows (B, T, C) along T
    CheckGatherSequence(**world, {2, 3, 8, 4}, 2);  // K / V (B, heads, T, D) along T
    CheckGatherSequence(**world, {12, 3}, 0);       // dim 0
    CheckGatherSequence(**world, {2, 4, 12}, -1);   // a negative dim
    // bf16 travels as fp32 and comes back in its dtype.
    torch::manual_seed(3);
    auto half = torch::randn({1, 8, 2}).to(torch::kBFloat16);
    auto g = GatherSequence(SplitSequenceForContextParallel(half, 1, 2, (*world)->group().my_index), 1, **world);
    EXPECT_EQ(g.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(g, half.index_select(1, GatheredContextParallelPositions(8, 2))));
  }
}

}  // namespace
}  // namespace maestro
