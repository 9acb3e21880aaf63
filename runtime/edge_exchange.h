// SPDX-License-Identifier: Apache-2.0
// Cross-section links of one rank: the activations and gradients a step
// sends and receives over them.
//
// Wire protocol of a step. Messages are those of scheduler::ImpliedTransfers
// (one per edge, upstream micro-batch, downstream micro-batch); the k-th
// message of a link in that order travels with tag k (activations down,
// gradients up: launcher::LinkChannel). A message is the fp32 rows of its
// samples, in the transfer's sample order, each row of the upstream
// section's OutputRowShape(). Receivers reorder rows by sample id into
// micro-batch order. Links end at TP rank 0 of a replica; it broadcasts what
// arrives to the other TP ranks of its group, and only it sends (the rows are
// the same on every TP rank). With context parallelism (cp > 1) links end at
// tp = cp = 0: rows go to the CP ranks (a broadcast over CP among the tp = 0
// ranks, then over TP), input gradients are summed over CP (each CP rank's
// share of the sequence) before tp = cp = 0 sends them; a received gradient
// stays on CP rank 0 (the other CP ranks backpropagate zeros: the gather's
// backward sums them). With pipeline stages (pp > 1) links end at
// the first stage (rows in, input gradients out) and the last (rows out,
// gradients in); the other stages have no messages and every call is a
// no-op there. Other point-to-point tags: runtime/message_tags.h.
//
// Devices. The wire format above holds whatever the section computes on: a
// rank on a GPU copies its rows and gradients to the wire's device (the
// link's or TP group's backend: host fp32 for MPI, pinned and on a transfer
// stream; the GPU itself for NCCL) and what arrives back to its compute
// device (runtime/device_staging.h). Inputs and gradients handed to the
// section are fp32 on its compute device; gradients returned for rows of
// another dtype (bf16 under autocast) are in that dtype.
//
// Runtime-internal (torch). May call: runtime/collectives, runtime/device_staging, scheduler,
// launcher, plan, base, libtorch. Thread safety: one thread per process.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "base/status.h"
#include "launcher/communicators.h"
#include "launcher/launch_env.h"
#include "plan/plan.h"
#include "runtime/device_staging.h"
#include "scheduler/scheduler.h"

namespace maestro::runtime {

// True when the section at the upstream (producer) / downstream (consumer)
// end of plan edge `edge` trains.
bool EdgeProducerTrains(const plan::Plan& plan, int edge);
bool EdgeConsumerTrains(const plan::Plan& plan, int edge);

class EdgeExchange {
 public:
  // Waits on peers add to *blocked_seconds; `staging` moves tensors between
  // the compute device and the wire (both must outlive the exchange).
  EdgeExchange(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Communicators& comms,
               double* blocked_seconds, TransferStaging* staging);

  // This rank's messages of step `step`, with their link and tag.
  Status PlanStep(int64_t step, std::vector<scheduler::Transfer> transfers);

  // Forward of micro-batch `mb` (samples `ids`, in micro-batch order): per
  // input edge of `in_edges` with messages, the upstream rows of its samples
  // that the upstream section processed, in micro-batch order:
  // (n_e, upstream row shape...) fp32 on the compute device, leaves with requires_grad when this
  // section (`trains`) and the producer train.
  Status ReceiveRows(int mb, const std::vector<int64_t>& ids, const std::vector<int>& in_edges, bool trains,
                     std::map<int, torch::Tensor>* inputs);
  // Sends `rows` (B, row shape...) of micro-batch `mb` down every outgoing
  // message of `out_edges` (TP rank 0; asynchronous until DrainSends).
  Status SendRows(int mb, const std::vector<int64_t>& ids, const torch::Tensor& rows,
                  const std::vector<int>& out_edges);
  // Backward: the gradient of `rows` (B, row shape...) summed over every
  // training consumer of `out_edges`, on rows' device in rows' dtype; *any is
  // false when none sends one.
  StatusOr<torch::Tensor> ReceiveGradients(int mb, const std::vector<int64_t>& ids, const torch::Tensor& rows,
                                           const std::vector<int>& out_edges, bool* any);
  // Sends the gradients of `inputs` (as ReceiveRows gave them, after
  // backward) up to training producers (TP rank 0).
  Status SendInputGradients(int mb, const std::vector<int64_t>& ids, const std::map<int, torch::Tensor>& inputs);
  // Waits for every send of the step.
  Status DrainSends();
  // Non-blocking: lets the sends in flight progress (a test each) and drops
  // those completed, with their buffers (while a running-ahead rank computes).
  void PollSends();
  // The TP ranks of a replica share what arrives at its TP rank 0: t
  // (contiguous fp32, host or device) is broadcast from TP rank 0 in place
  // (through the TP backend's device).
  Status BroadcastInTp(torch::Tensor& t);

 private:
  // A message of this step seen from this rank: which transfer, which link, which tag.
  struct Message {
    const scheduler::Transfer* transfer = nullptr;
    launcher::LinkChannel* link = nullptr;
    int tag_index = 0;
  };
  struct PendingSend {
    torch::Tensor keep_alive;
    launcher::WorkPtr work;
  };
  // This rank holds the replica's links (tp = cp = 0).
  bool LinkEnd() const { return place_.coords.tp == 0 && place_.coords.cp == 0; }
  // t broadcast in place from rank 0 of `group` (through its backend's device).
  Status BroadcastInGroup(launcher::Backend& group, torch::Tensor& t);
  launcher::LinkChannel* FindLink(int edge, int up_dp, int down_dp);

  const plan::Plan& plan_;
  const launcher::RankPlace& place_;
  launcher::Communicators& comms_;
  double* blocked_seconds_;
  TransferStaging* staging_;
  int section_, replica_;
  int64_t step_ = 0;
  std::vector<scheduler::Transfer> transfers_;
  std::map<std::tuple<int, int>, std::vector<Message>> incoming_;  // (edge, down micro-batch) -> messages
  std::map<std::tuple<int, int>, std::vector<Message>> outgoing_;  // (edge, up micro-batch) -> messages
  std::vector<PendingSend> pending_;
};

}  // namespace maestro::runtime
