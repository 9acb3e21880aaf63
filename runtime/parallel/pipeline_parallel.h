// SPDX-License-Identifier: Apache-2.0
// Pipeline parallelism of a decoder section: this rank's stage and what
// crosses between stages over its PP group (the ranks of one TP, CP and DP
// index, one per stage, in stage order: plan/plan.h's layout). The stage
// split and the order of a stage's ops are runtime/parallel/pipeline_stages.h; the section
// runner builds and runs only its stage's layers (section_runner.h).
//
// Between stages s and s + 1, per micro-batch m (tags on the PP group's own
// communicator): the stage's output activation (B, T, C) goes up the stage
// order with tag 4m, a KD teacher's rows (B, T, C_teacher), which arrive at
// the first stage and are read by the last, are relayed with tag 4m + 1,
// and the gradient of the activation comes back with tag 4m + 2. Everything
// travels as fp32 in host memory on the MPI backend (on the backend's device
// otherwise). Sends are asynchronous until Drain; receives wait with the
// backend's timeout (the plan's comm_timeout_s), so a stage whose peer died
// ends with the launcher's error naming the group, never a hang.
//
// Tied embeddings: the first stage (embedding) and the last (head) each
// hold the tied matrix; SumTiedGradient adds their gradients so both step
// the same AdamW update and stay equal.
//
// Runtime-internal (torch). May call: launcher, runtime/collectives,
// runtime/tensor_buffer, libtorch. Thread safety: one thread per process.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "base/status.h"
#include "launcher/comm.h"

namespace maestro::runtime {

class PipelineGroup {
 public:
  // `group`: this rank's PP group (must outlive this); waits on peers add to
  // *blocked_seconds (may be null).
  PipelineGroup(launcher::Backend& group, double* blocked_seconds)
      : group_(group), blocked_(blocked_seconds != nullptr ? blocked_seconds : &unused_blocked_) {}

  int stage() const { return group_.group().my_index; }
  int stages() const { return group_.group().size(); }
  bool first() const { return stage() == 0; }
  bool last() const { return stage() == stages() - 1; }

  // What a message between stages carries (its tag: 4 * micro-batch + part).
  enum class Part { kActivation = 0, kTeacherRows = 1, kGradient = 2 };

  // To the next stage (asynchronous until Drain): t, any shape and dtype,
  // travels as fp32. REQUIRES: !last().
  Status SendDown(int micro_batch, Part part, const torch::Tensor& t);
  // From the previous stage: an fp32 tensor of `shape` on `device`.
  // REQUIRES: !first().
  StatusOr<torch::Tensor> ReceiveFromAbove(int micro_batch, Part part, at::IntArrayRef shape, torch::Device device);
  // The gradient of an activation to the previous stage (asynchronous).
  Status SendGradientUp(int micro_batch, const torch::Tensor& grad);
  // The gradient of this stage's output activation from the next stage:
  // fp32 of `shape` on `device`.
  StatusOr<torch::Tensor> ReceiveGradientFromBelow(int micro_batch, at::IntArrayRef shape, torch::Device device);
  // Waits for every asynchronous send.
  Status Drain();

  // In place, the sum over every stage. values: any length.
  Status SumOverStages(std::vector<double>& values);
  // t: contiguous fp32 (any shape, CPU or CUDA), summed over every stage in
  // place. Throws std::runtime_error on failure (called inside torch code).
  void SumOverStages(torch::Tensor& t);
  // First and last stage: grad (V, C) of the tied embedding becomes the sum
  // of both stages' gradients (in place). Other stages: nothing.
  Status SumTiedGradient(torch::Tensor& grad);

 private:
  Status Send(int peer, int tag, const torch::Tensor& t);
  StatusOr<torch::Tensor> Receive(int peer, int tag, at::IntArrayRef shape, torch::Device device);

  launcher::Backend& group_;
  double unused_blocked_ = 0.0;
  double* blocked_;
  struct PendingSend {
    torch::Tensor keep_alive;
    launcher::WorkPtr work;
  };
  std::vector<PendingSend> pending_;
};

}  // namespace maestro::runtime
