// SPDX-License-Identifier: Apache-2.0
// RankLoop's EP lockstep members (runtime/rank_loop.h; ep > 1, docs/moe.md):
// the EP group's programs merged into one op sequence
// (runtime/parallel/expert_lockstep.h LockstepOps) that every peer runs, its
// own micro-batches in its own order and empty passes between, which serve
// its peers' token exchanges.
#include "base/checks.h"
#include "runtime/parallel/expert_lockstep.h"
#include "runtime/rank_loop.h"

namespace maestro::runtime::executor_internal {

Status RankLoop::RunExpertLockstep(std::vector<scheduler::Op>* ops) {
  const auto& c = plan_.sections[static_cast<size_t>(section_)].config;
  std::vector<std::vector<scheduler::Op>> peers;
  for (int k = 0; k < c.ep; ++k) {
    const int peer_index = schedule_.RankIndex(section_, place_.coords.expert_dp * c.ep + k);
    peers.push_back(peer_index < 0 ? std::vector<scheduler::Op>{}
                                   : OpsInStageOrder(schedule_.ranks[static_cast<size_t>(peer_index)]));
  }
  MAESTRO_ASSIGN_OR_RETURN(const auto lockstep, LockstepOps(peers, place_.coords.ep_rank));
  for (const LockstepOp& op : lockstep) {
    const bool own = op.micro_batch >= 0;
    if (op.kind == scheduler::OpKind::kForward) {
      MAESTRO_RETURN_IF_ERROR(own ? Forward(op.micro_batch) : ForwardNoTokens(op.slot));
    } else {
      MAESTRO_RETURN_IF_ERROR(own ? Backward(op.micro_batch) : BackwardNoTokens(op.slot));
    }
  }
  no_token_outputs_.clear();  // a forward-only section's empty forwards have no backward
  ops->erase(std::remove_if(ops->begin(), ops->end(),
                            [](const scheduler::Op& op) { return op.kind != scheduler::OpKind::kOptimizer; }),
             ops->end());
  return Status::Ok();
}

Status RankLoop::ForwardNoTokens(int slot) {
  const auto start = Clock::now();
  std::vector<torch::Tensor> outputs;
  MAESTRO_RETURN_IF_ERROR(TorchCall("an empty micro-batch's expert exchanges (EP lockstep)",
                                    [&] { outputs = runner_->ForwardNoTokens(); }));
  no_token_outputs_[slot] = std::move(outputs);
  busy_seconds_ += SecondsSince(start);
  return Status::Ok();
}

Status RankLoop::BackwardNoTokens(int slot) {
  const auto it = no_token_outputs_.find(slot);
  if (it == no_token_outputs_.end()) return Status::Internal("EP lockstep: an empty backward without its forward");
  const auto start = Clock::now();
  const std::vector<torch::Tensor> outputs = std::move(it->second);
  no_token_outputs_.erase(it);
  MAESTRO_RETURN_IF_ERROR(
      TorchCall("an empty micro-batch's expert exchanges (EP lockstep)", [&] { runner_->BackwardNoTokens(outputs); }));
  busy_seconds_ += SecondsSince(start);
  return Status::Ok();
}

}  // namespace maestro::runtime::executor_internal
