// SPDX-License-Identifier: Apache-2.0
// runtime_ep_probe: started under mpirun by tests/runtime/expert_parallel_test.cc
// on a plan whose section 'student' has ep = 2; exercises the EP exchange of
// MoE layers (runtime/parallel/expert_parallel.h) inside a real job and exits
// 0 only when every check passed. Scenarios:
//   probe PLAN exchange   RunExpertsParallel with uneven slot counts (one
//                         round with a rank of zero tokens): outputs and
//                         token gradients equal every expert run locally
//   probe PLAN mismatch   EP rank 1 runs one MoE exchange fewer than EP rank
//                         0 (a broken lockstep): the job must end with the
//                         launcher's timeout naming the ep group, not hang
// Ranks outside 'student' only join the final barrier.
// May call: launcher, plan, runtime/parallel/expert_parallel.h, libtorch.
#include <fmt/format.h>
#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "base/exit_codes.h"
#include "launcher/failure.h"
#include "launcher/worker_context.h"
#include "plan/plan.h"
#include "runtime/parallel/expert_parallel.h"

namespace ml = maestro::launcher;
namespace rt = maestro::runtime;
using maestro::Status;

namespace {

constexpr int64_t kExperts = 4, kHidden = 8;
int g_rank = -1;

// Expert e of the probe: rows (M, C) -> rows * (e + 1) + e / 2.
torch::Tensor ProbeExpert(int64_t e, const torch::Tensor& rows) {
  return rows * static_cast<double>(e + 1) + 0.5 * static_cast<double>(e);
}

// tokens (N, C) of this rank and its routing: two slots per token.
std::vector<torch::Tensor> Routing(int64_t n, int rank) {
  std::vector<std::vector<int64_t>> of(kExperts);
  for (int64_t t = 0; t < n; ++t) {
    of[static_cast<size_t>((t + rank) % kExperts)].push_back(t);
    of[static_cast<size_t>((3 * t + 1) % kExperts)].push_back(t);
  }
  std::vector<torch::Tensor> out;
  for (const auto& ids : of) out.push_back(torch::tensor(ids, torch::kInt64));
  return out;
}

int Exchange(rt::ExpertParallelExchange& ep) {
  int failures = 0;
  const int rank = ep.rank();
  const int64_t local = kExperts / ep.size();
  for (int round = 0; round < 3; ++round) {
    const int64_t n = round == 1 && rank == 1 ? 0 : 5 + 3 * rank + round;  // round 1: rank 1 has no token
    torch::manual_seed(17 * round + rank);
    auto tokens = torch::randn({n, kHidden}, torch::kFloat32).requires_grad_(true);
    const auto routing = Routing(n, rank);
    int wrong_expert = 0;
    auto got = rt::RunExpertsParallel(
        tokens, routing,
        [&](int64_t e, const torch::Tensor& rows) {
          if (e / local != rank) ++wrong_expert;
          return ProbeExpert(e, rows);
        },
        &ep);
    auto mirror = tokens.detach().clone().requires_grad_(true);
    std::vector<torch::Tensor> want_parts;
    for (int64_t e = 0; e < kExperts; ++e) {
      want_parts.push_back(ProbeExpert(e, mirror.index_select(0, routing[static_cast<size_t>(e)])));
    }
    auto want = torch::cat(want_parts);  // (S, C)
    auto weights = torch::arange(want.numel(), torch::kFloat32).view_as(want) / 7.0;
    (got * weights).sum().backward();
    (want * weights).sum().backward();
    const bool same_shape = got.sizes() == want.sizes();
    const double out_error = same_shape && want.numel() > 0 ? (got - want).abs().max().item<double>() : 0.0;
    const double grad_error =
        n > 0 && tokens.grad().defined() ? (tokens.grad() - mirror.grad()).abs().max().item<double>() : 0.0;
    if (!same_shape || out_error > 1e-6 || grad_error > 1e-5 || wrong_expert > 0 ||
        (n > 0 && !tokens.grad().defined())) {
      std::fprintf(stderr,
                   "[ep probe rank %d] round %d: shape %s, output error %g, gradient error %g, %d calls of "
                   "another rank's expert\n",
                   g_rank, round, same_shape ? "ok" : "differs", out_error, grad_error, wrong_expert);
      ++failures;
    }
  }
  return failures;
}

void Mismatch(rt::ExpertParallelExchange& ep) {
  const int layers = ep.rank() == 0 ? 2 : 1;  // EP rank 1 skips a MoE layer
  for (int layer = 0; layer < layers; ++layer) {
    auto tokens = torch::randn({4, kHidden});
    rt::RunExpertsParallel(tokens, Routing(4, ep.rank()), ProbeExpert, &ep);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s PLAN exchange|mismatch\n", argv[0]);
    return maestro::kExitUsage;
  }
  auto plan = maestro::plan::LoadPlan(argv[1]);
  auto options = ml::CommOptionsFromEnv(ml::ProcessEnv(), {});
  if (!plan.ok() || !options.ok()) {
    std::fprintf(stderr, "%s\n", (plan.ok() ? options.status() : plan.status()).ToString().c_str());
    return maestro::kExitUsage;
  }
  const std::string scenario = argv[2];
  auto ctx = ml::WorkerContext::Start(*plan, *options, &g_rank);
  if (!ctx.ok()) {
    if (g_rank < 0) return maestro::kExitUsage;
    ml::AbortJob(g_rank, ctx.status(), maestro::kExitFailure);
  }
  auto& comms = (*ctx)->comms();
  const auto& section = plan->sections[static_cast<size_t>((*ctx)->place().coords.section)];
  int failures = 0;
  if (section.name == "student") {
    rt::GroupExpertExchange ep(comms.group(maestro::plan::GroupKind::kEP));
    try {
      if (scenario == "exchange") failures += Exchange(ep);
      if (scenario == "mismatch") Mismatch(ep);
    } catch (const std::exception& e) {
      ml::AbortJob(g_rank, maestro::Status::Timeout(e.what()), maestro::kExitPeerFailure);
    }
  }
  // The final barrier waits longer than the EP group's timeout, so that a
  // broken lockstep is reported by the rank waiting in the EP group.
  auto barrier = comms.world().Barrier();
  const Status waited = barrier.ok() ? (*barrier)->WaitFor(comms.world().timeout() * 5) : barrier.status();
  if (!waited.ok()) ml::AbortJob(g_rank, waited, maestro::kExitPeerFailure);
  int total = failures;
  const auto summed = ml::Complete(
      comms.world().AllReduce(ml::Buffer{&total, 1, ml::DType::kI32, ml::Device::kCpu}, ml::ReduceOp::kSum));
  if (!summed.ok()) ml::AbortJob(g_rank, summed, maestro::kExitPeerFailure);
  if (g_rank == 0) std::printf(total == 0 ? "PROBE OK\n" : "PROBE FAILED (%d)\n", total);
  return total == 0 ? 0 : 1;
}
