// SPDX-License-Identifier: Apache-2.0
#include "runtime/edge_exchange.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "base/checks.h"
#include "runtime/collectives.h"
#include "runtime/section_runner.h"
#include "runtime/tensor_buffer.h"

namespace maestro::runtime {

using launcher::LinkChannel;

bool EdgeProducerTrains(const plan::Plan& plan, int edge) {
  const auto& up = plan.sections[static_cast<size_t>(plan.section_index(plan.edges[static_cast<size_t>(edge)].from))];
  return up.mode == plan::SectionMode::kTrain;
}

bool EdgeConsumerTrains(const plan::Plan& plan, int edge) {
  const auto& down = plan.sections[static_cast<size_t>(plan.section_index(plan.edges[static_cast<size_t>(edge)].to))];
  return down.mode == plan::SectionMode::kTrain;
}

EdgeExchange::EdgeExchange(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Communicators& comms,
                           double* blocked_seconds, TransferStaging* staging)
    : plan_(plan),
      place_(place),
      comms_(comms),
      blocked_seconds_(blocked_seconds),
      staging_(staging),
      section_(place.coords.section),
      replica_(place.coords.dp) {}

LinkChannel* EdgeExchange::FindLink(int edge, int up_dp, int down_dp) {
  for (auto& link : comms_.links()) {
    if (link.link().edge == edge && link.link().up_dp == up_dp && link.link().down_dp == down_dp) return &link;
  }
  return nullptr;
}

Status EdgeExchange::PlanStep(int64_t step, std::vector<scheduler::Transfer> transfers) {
  step_ = step;
  transfers_ = std::move(transfers);
  incoming_.clear();
  outgoing_.clear();
  std::map<std::tuple<int, int, int>, int> next_tag;
  for (const auto& t : transfers_) {
    const int tag = next_tag[{t.edge, t.up_replica, t.down_replica}]++;
    // With pipeline stages, links end at the first stage (rows in) and the last (rows out).
    const int stages = plan_.sections[static_cast<size_t>(section_)].config.pp;
    const bool down_here = plan_.section_index(plan_.edges[static_cast<size_t>(t.edge)].to) == section_ &&
                           t.down_replica == replica_ && place_.coords.pp == 0;
    const bool up_here = plan_.section_index(plan_.edges[static_cast<size_t>(t.edge)].from) == section_ &&
                         t.up_replica == replica_ && place_.coords.pp == stages - 1;
    if (!down_here && !up_here) continue;
    // Links end at TP rank 0 of a replica; the other TP ranks get its data by broadcast.
    LinkChannel* link = LinkEnd() ? FindLink(t.edge, t.up_replica, t.down_replica) : nullptr;
    if (link == nullptr && LinkEnd()) {
      return Status::Internal(fmt::format("no link for edge {} dp {} -> dp {}", t.edge, t.up_replica, t.down_replica));
    }
    if (down_here) incoming_[{t.edge, t.down_micro_batch}].push_back({&t, link, tag});
    if (up_here) outgoing_[{t.edge, t.up_micro_batch}].push_back({&t, link, tag});
  }
  return Status::Ok();
}

Status EdgeExchange::BroadcastInTp(torch::Tensor& t) {
  if (plan_.sections[static_cast<size_t>(section_)].config.tp == 1) return Status::Ok();
  return BroadcastInGroup(comms_.group(plan::GroupKind::kTP), t);
}

Status EdgeExchange::BroadcastInGroup(launcher::Backend& group, torch::Tensor& t) {
  // On the group backend's device (a copy only when t lives elsewhere).
  torch::Tensor wire = group.device() == launcher::Device::kCpu ? staging_->ToWire(t, launcher::Device::kCpu)
                       : t.is_cuda()                            ? t
                                                                : staging_->ToCompute(t);
  MAESTRO_RETURN_IF_ERROR(TimedWait(group.Broadcast(FloatBuffer(wire), 0), blocked_seconds_));
  CopyBackFromBackend(t, wire);
  return Status::Ok();
}

namespace {
// Positions as an index on `like`'s device.
torch::Tensor IndexOn(const std::vector<int64_t>& positions, const torch::Tensor& like) {
  return torch::tensor(positions, torch::kInt64).to(like.device());
}
}  // namespace

Status EdgeExchange::ReceiveRows(int mb, const std::vector<int64_t>& ids, const std::vector<int>& in_edges, bool trains,
                                 std::map<int, torch::Tensor>* inputs) {
  // Receive every upstream row of this micro-batch, then order them as the micro-batch.
  for (int e : in_edges) {
    auto it = incoming_.find({e, mb});
    if (it == incoming_.end()) continue;
    const int up = plan_.section_index(plan_.edges[static_cast<size_t>(e)].from);
    const std::vector<int64_t> row_shape = RowShapeOf(plan_, up);
    torch::Tensor input;
    if (LinkEnd()) {
      std::unordered_map<int64_t, torch::Tensor> by_id;
      launcher::Device wire = launcher::Device::kCpu;
      for (const auto& msg : it->second) {
        std::vector<int64_t> shape{static_cast<int64_t>(msg.transfer->sample_ids.size())};
        shape.insert(shape.end(), row_shape.begin(), row_shape.end());
        wire = msg.link->backend().device();
        auto buf = staging_->WireBuffer(shape, wire);
        MAESTRO_RETURN_IF_ERROR(TimedWait(msg.link->RecvActivation(FloatBuffer(buf), msg.tag_index), blocked_seconds_));
        for (size_t i = 0; i < msg.transfer->sample_ids.size(); ++i) {
          by_id[static_cast<int64_t>(msg.transfer->sample_ids[i])] = buf[static_cast<int64_t>(i)];
        }
      }
      std::vector<torch::Tensor> ordered;
      for (int64_t id : ids) {
        auto r = by_id.find(id);
        if (r != by_id.end()) ordered.push_back(r->second);
      }
      if (ordered.size() != by_id.size()) {
        return Status::Internal(
            fmt::format("step {}: edge {} delivered rows of samples outside micro-batch {}", step_, e, mb));
      }
      std::vector<int64_t> shape{static_cast<int64_t>(ordered.size())};
      shape.insert(shape.end(), row_shape.begin(), row_shape.end());
      input = staging_->WireBuffer(shape, wire);  // pinned on a GPU rank, for the copy to the device
      at::stack_out(input, ordered);
    } else {
      int64_t rows = 0;
      for (const auto& msg : it->second) rows += static_cast<int64_t>(msg.transfer->sample_ids.size());
      std::vector<int64_t> shape{rows};
      shape.insert(shape.end(), row_shape.begin(), row_shape.end());
      const bool cp_receives = place_.coords.cp != 0 && place_.coords.tp == 0;
      input =
          staging_->WireBuffer(shape, comms_.group(cp_receives ? plan::GroupKind::kCP : plan::GroupKind::kTP).device());
    }
    // Context parallelism: tp = cp = 0 hands the rows to the other CP ranks' tp = 0, each of which hands them on over
    // TP.
    if (plan_.sections[static_cast<size_t>(section_)].config.cp > 1 && place_.coords.tp == 0) {
      MAESTRO_RETURN_IF_ERROR(BroadcastInGroup(comms_.group(plan::GroupKind::kCP), input));
    }
    MAESTRO_RETURN_IF_ERROR(BroadcastInTp(input));
    input = staging_->ToCompute(input);  // the same tensor on the CPU
    if (trains && EdgeProducerTrains(plan_, e)) input.set_requires_grad(true);
    (*inputs)[e] = input;
  }
  return Status::Ok();
}

Status EdgeExchange::SendRows(int mb, const std::vector<int64_t>& ids, const torch::Tensor& rows,
                              const std::vector<int>& out_edges) {
  if (!LinkEnd()) return Status::Ok();
  std::unordered_map<int64_t, int64_t> position;
  for (size_t b = 0; b < ids.size(); ++b) position[ids[b]] = static_cast<int64_t>(b);
  for (int e : out_edges) {
    auto it = outgoing_.find({e, mb});
    if (it == outgoing_.end()) continue;
    for (const auto& msg : it->second) {
      std::vector<int64_t> pos;
      for (auto id : msg.transfer->sample_ids) pos.push_back(position.at(static_cast<int64_t>(id)));
      auto selected = staging_->ToWire(rows.detach().index_select(0, IndexOn(pos, rows)), msg.link->backend().device());
      MAESTRO_ASSIGN_OR_RETURN(auto work, msg.link->SendActivation(FloatBuffer(selected), msg.tag_index));
      pending_.push_back({selected, std::move(work)});
    }
  }
  return Status::Ok();
}

StatusOr<torch::Tensor> EdgeExchange::ReceiveGradients(int mb, const std::vector<int64_t>& ids,
                                                       const torch::Tensor& rows, const std::vector<int>& out_edges,
                                                       bool* any) {
  std::unordered_map<int64_t, int64_t> position;
  for (size_t b = 0; b < ids.size(); ++b) position[ids[b]] = static_cast<int64_t>(b);
  // Gradients of this micro-batch's rows from every training consumer, summed
  // in fp32 on rows' device.
  auto grad = torch::zeros(rows.sizes(), torch::TensorOptions().dtype(torch::kFloat32).device(rows.device()));
  *any = false;
  for (int e : out_edges) {
    if (!EdgeConsumerTrains(plan_, e)) continue;
    auto it = outgoing_.find({e, mb});
    if (it == outgoing_.end()) continue;
    for (const auto& msg : it->second) {
      std::vector<int64_t> pos;
      for (auto id : msg.transfer->sample_ids) pos.push_back(position.at(static_cast<int64_t>(id)));
      std::vector<int64_t> shape{static_cast<int64_t>(pos.size())};
      for (int64_t d = 1; d < rows.dim(); ++d) shape.push_back(rows.size(d));
      if (LinkEnd()) {
        auto buf = staging_->WireBuffer(shape, msg.link->backend().device());
        MAESTRO_RETURN_IF_ERROR(TimedWait(msg.link->RecvGradient(FloatBuffer(buf), msg.tag_index), blocked_seconds_));
        grad.index_add_(0, IndexOn(pos, grad), staging_->ToCompute(buf));
      }
      *any = true;
    }
  }
  grad = grad.contiguous();
  if (*any) MAESTRO_RETURN_IF_ERROR(BroadcastInTp(grad));
  return grad.to(rows.scalar_type());
}

Status EdgeExchange::SendInputGradients(int mb, const std::vector<int64_t>& ids,
                                        const std::map<int, torch::Tensor>& inputs) {
  // TP rank 0: the gradients of the replicated inputs are whole on every TP
  // rank. Context parallelism: each CP rank holds the gradient of its part of
  // the sequence; their sum (over CP, on the tp = 0 ranks) is the whole.
  const bool cp_sums = plan_.sections[static_cast<size_t>(section_)].config.cp > 1 && place_.coords.tp == 0;
  for (const auto& [e, input] : inputs) {
    if (!EdgeProducerTrains(plan_, e) || (!LinkEnd() && !cp_sums)) continue;
    auto it = incoming_.find({e, mb});
    if (it == incoming_.end()) continue;
    if (cp_sums) {
      auto& cp = comms_.group(plan::GroupKind::kCP);
      auto summed = staging_->ToWire(input.grad().defined() ? input.grad() : torch::zeros_like(input), cp.device());
      MAESTRO_RETURN_IF_ERROR(TimedWait(cp.AllReduce(FloatBuffer(summed), launcher::ReduceOp::kSum), blocked_seconds_));
      if (!LinkEnd()) continue;
      torch::NoGradGuard no_grad;
      torch::Tensor handle = input;  // shares the tensor: its gradient becomes the sum
      handle.mutable_grad() = staging_->ToCompute(summed).to(input.scalar_type());
    }
    // input rows are in micro-batch order of the samples the upstream processed.
    std::unordered_map<int64_t, int64_t> input_pos;
    int64_t k = 0;
    std::unordered_map<int64_t, bool> in_edge;
    for (const auto& msg : it->second) {
      for (auto id : msg.transfer->sample_ids) in_edge[static_cast<int64_t>(id)] = true;
    }
    for (int64_t id : ids) {
      if (in_edge.count(id)) input_pos[id] = k++;
    }
    auto input_grad = input.grad().defined() ? input.grad() : torch::zeros_like(input);
    for (const auto& msg : it->second) {
      std::vector<int64_t> pos;
      for (auto id : msg.transfer->sample_ids) pos.push_back(input_pos.at(static_cast<int64_t>(id)));
      auto rows = staging_->ToWire(input_grad.index_select(0, IndexOn(pos, input_grad)), msg.link->backend().device());
      MAESTRO_ASSIGN_OR_RETURN(auto work, msg.link->SendGradient(FloatBuffer(rows), msg.tag_index));
      pending_.push_back({rows, std::move(work)});
    }
  }
  return Status::Ok();
}

void EdgeExchange::PollSends() {
  pending_.erase(
      std::remove_if(pending_.begin(), pending_.end(), [](PendingSend& send) { return send.work->IsCompleted(); }),
      pending_.end());
}

Status EdgeExchange::DrainSends() {
  const auto drain = std::chrono::steady_clock::now();
  for (auto& send : pending_) MAESTRO_RETURN_IF_ERROR(send.work->Wait());
  pending_.clear();
  *blocked_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - drain).count();
  return Status::Ok();
}

}  // namespace maestro::runtime
