// SPDX-License-Identifier: Apache-2.0
// Small collectives of the runtime's control plane over a launcher Backend
// (the world or a group): integer broadcasts, byte strings between two ranks,
// and the tensor-parallel all-reduce a sharded decoder calls.
// May call: launcher, base, libtorch. Thread safety: one thread per process.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "launcher/communicators.h"
#include "runtime/models/decoder.h"

namespace maestro::runtime {

// Waits for a collective or point-to-point operation.
Status Wait(StatusOr<launcher::WorkPtr> work);

// A CPU buffer over a contiguous fp32 tensor `t` (any shape).
launcher::Buffer FloatBuffer(const torch::Tensor& t);

// Root 0's `values` (any length) on every rank of `group`.
Status BroadcastInts(launcher::Backend& group, std::vector<int64_t>& values);

// A byte string from this rank to `peer` (its length first), and its receipt.
Status SendBytes(launcher::Backend& group, const std::string& bytes, int peer, int tag);
StatusOr<std::string> RecvBytes(launcher::Backend& group, int peer, int tag);

// The TP all-reduce of a sharded decoder over `group` (its TP group).
class GroupReducer : public TensorParallelReducer {
 public:
  explicit GroupReducer(launcher::Backend& group) : group_(group) {}
  // t: contiguous fp32, any shape; summed in place over the group.
  void AllReduceSum(torch::Tensor& t) override;
  int rank() const override { return group_.group().my_index; }
  int size() const override { return group_.group().size(); }

 private:
  launcher::Backend& group_;
};

}  // namespace maestro::runtime
