// SPDX-License-Identifier: Apache-2.0
// ZeRO-1 (a distributed optimizer): AdamW's states sharded over a section's
// DP group, or, with context parallelism, over its DP x CP group
// (plan::GroupKind::kDPxCP, as Megatron-LM's distributed optimizer:
// docs/gradient_sync.md); "DP" below is the group passed as `dp`. One step,
// after the last backward of the step:
//   1. reduce-scatter of the flat gradient over DP (sum), in buckets of at
//      most GradientBucketBytes() (data_parallel.h): rank d gets the summed
//      gradient of its shard only;
//   2. the global gradient norm from the shards (sums of squares in fp64,
//      all-reduced over DP; TP-sharded parameters' squares summed over TP,
//      replicated ones counted once: the one rule of
//      runtime/parallel/gradient_norm.h, which the replicated AdamW follows
//      too), and clipping of the shard to optimizer.grad_clip;
//   3. AdamW on the shard: m, v and the step count of this rank's elements
//      only, the update torch::optim::AdamW (libtorch 1.13) makes, op for op:
//      p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//      p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps);
//   4. all-gather of the updated shards into the parameters; gradients zeroed.
// Every collective goes through the launcher's Backend (MPI or NCCL alike).
//
// Layout (Megatron's distributed optimizer / DeepSpeed stage 1, one bucket).
// The section's trainable parameters (SectionRunner::Parameters() order) are
// laid end to end in ONE flat buffer of N elements, padded with zeros at the
// end to N_pad = G * S, S = ceil(N / G) rounded up to 16 elements (64 B), G =
// DP size. DP rank d owns elements [d * S, (d + 1) * S). A parameter may
// straddle two shards; padding has zero gradient and stays zero. The module's
// parameters are views into the flat parameter buffer and their .grad() views
// into the flat gradient buffer, so autograd accumulates into the buffer that
// is reduce-scattered and the all-gather writes the parameters in place: no
// full-size copy in either direction. The rank holds (fp32): weights 4N,
// gradients 4N, AdamW moments 8S; during the reduce-scatter one packed
// bucket (and MPI's buffers of it); during the step a gradient shard, AdamW's
// denominator and the all-gather's send buffer (4S each at most).
// TP x DP: each TP rank has its own flat buffer of its own slices and runs
// the above over its DP group (the ranks with the same TP index).
// PP x DP: likewise per pipeline stage; the norm's sum of squares is also
// summed over the stages (`pp`), a parameter held by two stages (a tied
// embedding: `counted_in_norm` false on one of them) counted once.
//
// Precision. This is fp32 only: the shard's "master" copy is the parameters'
// own slice of the flat buffer. bf16 model parameters with an fp32 master
// shard change only copy-in (the gradient shard, converted to fp32 before
// step 2) and copy-out (the fp32 master shard converted to the model's dtype
// into the all-gather's send buffer, GatherParameters): the master shard then
// becomes a tensor of its own (4S more), everything else stays.
//
// Devices. The flat buffers and moments live on the parameters' device
// (all of them on one); a backend that takes host memory (MPI) while they
// live on a GPU gets host copies of each collective's buffers
// (tensor_buffer.h OnBackendDevice), NCCL the device buffers themselves.
// Save writes host copies, so a checkpoint loads on either.
//
// EP (docs/moe.md): the routed experts' parameters (`routed_expert[i]`)
// differ between the ranks of an EP group, so they get their own flat buffer
// and shards over the expert-DP group (the dp/ep ranks holding the same
// experts): a second DistributedOptimizer inside this one, whose squares are
// also summed over the EP group. One norm clips both; Save/Load carry both.
//
// Checkpoints (runtime/checkpoint_slices.h): ShardPieces says which part of
// which parameter this rank's moments hold, as views a checkpoint writes
// from and loads into, so a checkpoint loads into any layout. Save/Load (a
// torch archive of m, v, the step count and the layout) read the format-1
// checkpoints of older runs, whose layout must match (Load checks and names it).
//
// Runtime-internal (torch). May call: launcher, runtime/collectives,
// runtime/tensor_buffer, plan (OptimizerDesc), libtorch.
// Thread safety: one thread per process.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "launcher/comm.h"
#include "plan/plan.h"
#include "runtime/parallel/gradient_norm.h"

namespace maestro::runtime {

class DistributedOptimizer {
 public:
  // `params`: the section's trainable parameters (each contiguous fp32 on
  // the CPU, any shape), in the same order on every DP rank; `tp_sharded[i]`
  // is true when params[i] is this rank's TP slice (its squares are summed
  // over `tp`). `dp`: the section's DP group (size >= 1); `tp`: its TP group,
  // or null without TP. `what` names the section in messages. `pp`: its
  // pipeline group, or null without PP; `counted_in_norm[i]` false leaves
  // params[i] out of the gradient norm (empty: every one counts). Rebinds
  // the parameters and their gradients to the flat buffers (values kept,
  // gradients zeroed). REQUIRES: dp, tp and pp outlive the optimizer.
  static StatusOr<std::unique_ptr<DistributedOptimizer>> Create(std::vector<torch::Tensor> params,
                                                                std::vector<bool> tp_sharded, launcher::Backend& dp,
                                                                launcher::Backend* tp, const plan::OptimizerDesc& desc,
                                                                std::string what, launcher::Backend* pp = nullptr,
                                                                std::vector<bool> counted_in_norm = {});
  // EP: as above, with the routed experts' parameters (routed_expert[i])
  // sharded over `expert_dp` and their squares summed over `ep` too.
  // REQUIRES: expert_dp and ep outlive the optimizer.
  static StatusOr<std::unique_ptr<DistributedOptimizer>> CreateWithExperts(
      std::vector<torch::Tensor> params, std::vector<bool> tp_sharded, std::vector<bool> routed_expert,
      launcher::Backend& dp, launcher::Backend& expert_dp, launcher::Backend& ep, launcher::Backend* tp,
      const plan::OptimizerDesc& desc, std::string what, launcher::Backend* pp = nullptr,
      std::vector<bool> counted_in_norm = {});

  // Step 1: the flat gradient (N_pad) reduce-scattered into this rank's
  // gradient shard (S), bucket by bucket (each bucket (G, n) elements, at
  // most GradientBucketBytes(); packed unless one bucket covers all). Waits
  // count in *blocked_seconds.
  Status ReduceScatterGradients(double* blocked_seconds);
  // Steps 2 and 3 at learning rate `lr`: returns the global gradient norm
  // before clipping. The norm's two small all-reduces count in *blocked_seconds.
  StatusOr<double> StepShard(double lr, double* blocked_seconds);
  // Step 4: the parameters (N_pad) all-gathered from every rank's shard (S),
  // gradients zeroed for the next step.
  Status GatherParameters(double* blocked_seconds);

  // This rank's shard state as bytes (a torch archive: "exp_avg" (S),
  // "exp_avg_sq" (S), "step" (), "layout" (N, S, G, d)), and its load: a
  // shard of another layout is refused naming both. Load also re-binds the
  // parameters to the flat buffer (call it after loading the model).
  StatusOr<std::string> Save() const;
  Status Load(const std::string& bytes);

  // The part of parameter `param` (its index among Create's `params`) this
  // rank's shard holds: elements [begin, end) of its flat C order, and the
  // moments over them (writable views of length end - begin). Parameters the
  // shard does not reach have no piece; the routed experts' follow the rest.
  struct ShardPiece {
    size_t param = 0;
    int64_t begin = 0, end = 0;
    torch::Tensor exp_avg, exp_avg_sq;
  };
  std::vector<ShardPiece> ShardPieces();
  // The AdamW step count, after moments were loaded through ShardPieces.
  void SetStepCount(int64_t step);

  // The layout (for tests and messages).
  int64_t numel() const { return numel_; }        // N
  int64_t shard_numel() const { return shard_; }  // S
  int dp_size() const { return dp_size_; }        // G
  int dp_rank() const { return dp_rank_; }        // d
  int64_t step_count() const { return step_; }    // AdamW steps taken
  // The reduce-scatter's buckets per step (this one's, not the experts').
  int64_t reduce_scatter_buckets() const;

 private:
  DistributedOptimizer() = default;
  // Makes every parameter a view of its slot in flat_params_ (copying its
  // value in when a load replaced its storage) and every gradient a view of
  // flat_grads_ (its value kept). Cheap when already bound.
  void Bind();
  // in (G x n, on the parameters' device) reduce-scattered into out (n),
  // through host copies when the DP backend takes host memory (MPI) and the
  // parameters live on a GPU.
  Status ReduceScatterOnBackend(const torch::Tensor& in, torch::Tensor out, double* blocked_seconds);
  // The squares of this rank's shard of the gradient (parameters counted in
  // the norm only), by TP slice or replicated; StepShard sums them over the
  // groups (runtime/parallel/gradient_norm.h).
  StatusOr<GradientSquares> SquaresOfShard();
  // Clips the shard with the global `norm` and applies AdamW at `lr`.
  Status UpdateShard(double lr, double norm);

  std::string what_;
  std::unique_ptr<DistributedOptimizer> experts_;  // EP: the routed experts' own buffers
  launcher::Backend* ep_ = nullptr;                // EP: set on experts_ (squares summed over it)
  launcher::Backend* dp_ = nullptr;
  launcher::Backend* tp_ = nullptr;
  launcher::Backend* pp_ = nullptr;
  std::vector<bool> counted_in_norm_;
  plan::OptimizerDesc desc_;
  std::vector<torch::Tensor> params_;
  std::vector<bool> tp_sharded_;
  std::vector<size_t> param_index_;  // params_[i] is Create's params[param_index_[i]] (EP: of CreateWithExperts)
  std::vector<int64_t> offsets_;     // params_[i] occupies [offsets_[i], offsets_[i] + numel) of the flat buffers
  int64_t numel_ = 0, shard_ = 0;
  int dp_size_ = 1, dp_rank_ = 0;
  int64_t bucket_bytes_ = 0;                // the reduce-scatter's bucket (GradientBucketBytes)
  torch::Tensor flat_params_, flat_grads_;  // (G * S) fp32
  torch::Tensor exp_avg_, exp_avg_sq_;      // (S) fp32
  torch::Tensor grad_shard_;                // (S) fp32 between ReduceScatterGradients and StepShard
  int64_t step_ = 0;
};

}  // namespace maestro::runtime
