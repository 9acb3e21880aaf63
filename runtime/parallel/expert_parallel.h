// SPDX-License-Identifier: Apache-2.0
// Expert parallelism (EP) of MoE layers (docs/moe.md): the EP group's ranks
// (ep consecutive DP ranks of a section, plan::GroupKind::kEP) each hold E/ep
// of the routed experts, EP rank r experts [r*E/ep, (r+1)*E/ep). A MoE layer
// routes its tokens as without EP, then
//   1. exchanges its per-expert slot counts (an all-gather of (E) counts:
//      every rank learns every rank's counts, so also the largest block);
//   2. dispatch: an all-to-all of the routed rows, padded to equal blocks of
//      P rows (P = the largest number of rows one rank sends another), block
//      j holding the rows for rank j's experts, expert by expert;
//   3. runs its own experts on the rows it received (from every rank);
//   4. combine: the all-to-all back, the results in the dispatched rows'
//      places.
// Equal blocks because launcher::Backend::AllToAll exists for them on MPI
// and NCCL alike (tested there); the padding is the price (P x ep rows per
// exchange instead of the mean), small while routing is balanced, which the
// load-balancing loss drives it to.
// Both all-to-alls are autograd functions whose backward is the same
// all-to-all of the gradient (the exchange is its own transpose), so the
// backward of a MoE layer runs two all-to-alls in the reverse order.
//
// Lockstep: every collective pairs the k-th call of every rank of the EP
// group, so each rank must run its MoE layers' exchanges in the same order
// and number. A rank with no micro-batch where a peer has one runs an empty
// one: RunExpertsParallel on zero tokens still serves the rows the peers
// send to its experts (runtime/executor.cc pads the programs).
//
// Runtime-internal (torch). May call: launcher, runtime/collectives,
// runtime/tensor_buffer, libtorch. Thread safety: one thread per process;
// the exchange must outlive the model that uses it.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "launcher/communicators.h"

namespace maestro::runtime {

// The EP group as a MoE layer sees it.
class ExpertParallelExchange {
 public:
  virtual ~ExpertParallelExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // counts: (E) fp32 (whole numbers) -> (G, E) fp32, row i rank i's counts.
  virtual torch::Tensor AllGatherCounts(const torch::Tensor& counts) = 0;
  // rows: (G*P, C) fp32 or bf16; block j goes to rank j. Returns (G*P, C)
  // of that dtype: block i is rank i's block for this rank. Not
  // differentiable (ExpertAllToAll is).
  virtual torch::Tensor AllToAllRows(const torch::Tensor& rows) = 0;
  // t: contiguous fp32, any shape; summed in place over the EP group (the
  // gradient norm's expert squares, gathering experts for a checkpoint).
  virtual void AllReduceSum(torch::Tensor& t) = 0;
};

// Over the rank's EP group (a launcher Backend). Throws std::runtime_error
// with the launcher's message (the rank, the group, the operation) when a
// collective fails or times out: the models call it inside autograd.
class GroupExpertExchange : public ExpertParallelExchange {
 public:
  explicit GroupExpertExchange(launcher::Backend& group) : group_(group) {}
  int rank() const override { return group_.group().my_index; }
  int size() const override { return group_.group().size(); }
  torch::Tensor AllGatherCounts(const torch::Tensor& counts) override;
  torch::Tensor AllToAllRows(const torch::Tensor& rows) override;
  void AllReduceSum(torch::Tensor& t) override;

 private:
  launcher::Backend& group_;
};

// rows: (G*P, C) any float dtype -> (G*P, C) in that dtype, through
// ep->AllToAllRows (bf16 rows as bf16, others as fp32); its backward is the
// same exchange of the gradient.
torch::Tensor ExpertAllToAll(const torch::Tensor& rows, ExpertParallelExchange* ep);

// The routed experts of one MoE layer under EP (steps 1-4 above).
//   tokens: (N, C), N >= 0, the layer's (TP-entered) input rows;
//   token_of_expert: E int64 tensors, (M_e) the token of each slot routed to
//     expert e (the same E on every rank, E divisible by G);
//   expert(e, rows (M, C)) -> (M, C): this rank's expert e (a global index
//     in [rank*E/G, (rank+1)*E/G)), called only for M > 0.
// Returns (S, C), S = sum_e M_e: the expert outputs of this rank's slots,
// expert 0's slots first, then expert 1's, each in token_of_expert's order.
torch::Tensor RunExpertsParallel(const torch::Tensor& tokens, const std::vector<torch::Tensor>& token_of_expert,
                                 const std::function<torch::Tensor(int64_t, const torch::Tensor&)>& expert,
                                 ExpertParallelExchange* ep);

}  // namespace maestro::runtime
