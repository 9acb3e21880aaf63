// SPDX-License-Identifier: Apache-2.0
// The step model's accumulator (compiler/step_model.cc only): StepSum adds
// GEMM, attention, memory-bound and parameter terms of one section's pass
// into a StepBreakdown, each kernel at least the device's launch floor;
// Bytes gives the eager op chains' bytes per element. Split from
// step_model.cc, which holds the terms of each model kind.
// May call: compiler/device_profile.h, compiler/step_breakdown.h. Internal:
// only step_model.cc includes it.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/device_profile.h"
#include "compiler/step_breakdown.h"

namespace maestro::compiler::step_terms {

// A kernel that does not run (a cast to the dtype a tensor already has).
constexpr double kNoKernel = -1;

// Where an op sits for pipeline parallelism: the blocks split over the
// stages; the embedding / patch stem runs on the first, the head and the
// loss on the last.
enum class Part { kPre = 0, kBlocks = 1, kPost = 2 };
enum class Phase { kForward = 0, kBackward = 1 };

// Adds terms; every kernel costs at least the device's launch floor (eager
// libtorch issues kernels one by one from the CPU; a kernel shorter than the
// CPU-side cost of issuing it leaves the GPU waiting). It also counts the
// autograd-tracked kernels of each part and phase (every forward and
// backward kernel, and the autocast weight casts; not AdamW's, which run
// without autograd): in a training pass under autocast (the runtime's mixed
// precision on a GPU), where the device profile gives what one costs the CPU to issue
// (DeviceProfile::training_issue_seconds), a part's phase takes at least its
// kernels times that, since eager libtorch on a GPU overlaps the CPU's
// issuing with the device's running and the slower of the two sets the pace
// (docs/step_model.md, "The CPU's issue cost"). Pure bf16 and fp32 passes,
// and forward-only ones (no autograd), keep the per-kernel floor alone: the
// cost was measured under autograd and autocast.
class StepSum {
 public:
  StepSum(const DeviceProfile& device, bool train) : device_(device), train_(train) {}

  bool train() const { return train_; }
  double Kernel(double seconds) const { return std::max(seconds, device_.kernel_launch_seconds); }
  double Gemm1(double m, double k, double n) const {
    return std::max(2 * m * k * n / device_.GemmFlopsPerSecond(m, k, n), device_.kernel_launch_seconds);
  }

  // y = x W^T with x (m, k), W (n, k), `times` over; in backward dX (m rows,
  // inner n) unless the input needs no gradient (pixels, a detached teacher
  // hidden state) and dW (n rows, inner m) unless W is frozen.
  void Gemm(std::string_view name, Part part, double m, double k, double n, double times, bool input_grad = true,
            bool weight_grad = true) {
    const double fwd = times * Gemm1(m, k, n);
    double bwd = 0;
    double kernels = times;
    if (train_) {
      if (input_grad) bwd += times * Gemm1(m, n, k), kernels += times;
      if (weight_grad) bwd += times * Gemm1(n, m, k), kernels += times;
    }
    Add(part, Phase::kForward, fwd, times);
    Add(part, Phase::kBackward, bwd, kernels - times);
    out_.gemm_seconds += fwd + bwd;
    Term(kernels, fwd + bwd, "gemm ", name);
  }

  // The forward of y = x W^T run again in backward (a recomputed region):
  // `times` forward GEMMs charged to the backward phase.
  void GemmRecomputed(std::string_view name, Part part, double m, double k, double n, double times) {
    if (!train_) return;
    const double fwd = times * Gemm1(m, k, n);
    Add(part, Phase::kBackward, fwd, times);
    out_.gemm_seconds += fwd;
    Term(times, fwd, "gemm ", name, " (recomputed)");
  }

  // Memory-bound kernels: each entry is one kernel's bytes read + written
  // per token (or per step with tokens = 1; kNoKernel: skipped); `times`
  // repeats the set (layers). Backward sets count only when training.
  void Memory(std::string_view name, Part part, Phase phase, std::initializer_list<double> bytes_per_token,
              double tokens, double times) {
    if (phase == Phase::kBackward && !train_) return;
    double s = 0, kernels = 0;
    for (double b : bytes_per_token) {
      if (b < 0) continue;
      s += Kernel(b * tokens / device_.memory_bytes_per_s);
      kernels += 1;
    }
    s *= times;
    Add(part, phase, s, times * kernels);
    out_.memory_seconds += s;
    Term(times * kernels, s, "memory ", name, phase == Phase::kForward ? " forward" : " backward");
  }

  // Flash SDPA: `forward_flops` per layer (the compiler's count), `layers`.
  void Attention(std::string_view name, double forward_flops, double head_dim, double context, double layers) {
    const double fwd = Kernel(forward_flops / device_.AttentionFlopsPerSecond(head_dim, context, false));
    double bwd = 0;
    if (train_) {
      const double both = Kernel(3 * forward_flops / device_.AttentionFlopsPerSecond(head_dim, context, true));
      bwd = std::max(both - fwd, device_.kernel_launch_seconds);
    }
    Add(Part::kBlocks, Phase::kForward, layers * fwd, layers);
    Add(Part::kBlocks, Phase::kBackward, layers * bwd, train_ ? layers : 0);
    attention_forward_ += layers * fwd;
    out_.attention_seconds += layers * (fwd + bwd);
    Term(layers * (train_ ? 2 : 1), layers * (fwd + bwd), "attention ", name);
  }

  // torch::optim::AdamW::step (torch/csrc/api/src/optim/adamw.cpp): per
  // parameter tensor of `numel` elements of `elem` bytes, 8 kernels:
  // exp_avg.mul_ (r1 w1), .add_(grad) (r2 w1), exp_avg_sq.mul_ (r1 w1),
  // .addcmul_(grad, grad) (r3 w1), sqrt (r1 w1), / sqrt(bc2) (r1 w1),
  // .add_(eps) (r1 w1), p.addcdiv_(m, denom) (r3 w1) elements. Weight decay
  // 0 (section_speed.cc) skips p.mul_. And autograd's accumulation of a
  // further micro-batch's gradient into .grad (r2 w1).
  void Parameters(std::string_view name, double numel, double tensors, double elem) {
    if (param_bytes_ > 0) elem = param_bytes_;
    total_numel_ += numel * tensors;
    total_tensors_ += tensors;
    elem_ = elem;
    double s = 0;
    for (double e : {2.0, 3.0, 2.0, 4.0, 2.0, 2.0, 2.0, 4.0})
      s += Kernel(e * elem * numel / device_.memory_bytes_per_s);
    optimizer_ += s * tensors;
    accumulate_ += tensors * Kernel(3 * elem * numel / device_.memory_bytes_per_s);
    if (keep_terms_) optimizer_terms_.push_back({"optimizer AdamW " + std::string(name), s * tensors, tensors * 8});
  }

  // One micro-batch's phase of a part: the device's time, or the CPU's time
  // to issue its kernels where that is longer.
  double Seconds(Part part, Phase phase) const {
    const auto p = static_cast<size_t>(part), f = static_cast<size_t>(phase);
    return std::max(seconds_[p][f], kernels_[p][f] * IssueSeconds());
  }
  // Once per step: AdamW and, under autocast, the weights' casts to bf16.
  double optimizer() const {
    if (optimizer_shards_ > 1) return FlatShardAdamW() + WeightCasts();
    return (fused_adamw_ ? FusedAdamW() : optimizer_) + WeightCasts();
  }
  // The autocast weight casts (autograd-tracked: issue-bound like the forward).
  double WeightCasts() const { return std::max(weight_casts_, weight_cast_kernels_ * IssueSeconds()); }
  // What one tracked kernel costs the CPU to issue in this pass (0: no bound).
  double IssueSeconds() const { return autocast_ && train_ ? device_.training_issue_seconds : 0.0; }
  void UseFlatShardAdamW(int shards) { optimizer_shards_ = shards; }
  void UseParamBytes(int bytes) { param_bytes_ = bytes; }
  // Mixed precision (fp32 masters, activations in bf16): the forward runs
  // under autocast (runtime/torch_compat.h AutocastGuard).
  void UseAutocast() { autocast_ = true; }
  bool autocast() const { return autocast_; }
  // Under autocast, `tensors` fp32 weights of `numel` elements that matmuls
  // read: each cast to bf16 once per step (r4 w2; autocast caches the cast
  // until the optimizer step clears it, runtime/section_optimizer.cc), and
  // each one's bf16 gradient cast back to the fp32 master's dtype in every
  // micro-batch's backward (r2 w4; the cast's backward). Nothing otherwise.
  void AutocastWeights(std::string_view name, Part part, double numel, double tensors) {
    if (!autocast_) return;
    const double one = Kernel(6 * numel / device_.memory_bytes_per_s);
    weight_casts_ += tensors * one;
    weight_cast_kernels_ += tensors;
    if (train_) {
      Add(part, Phase::kBackward, tensors * one, tensors);
      out_.memory_seconds += tensors * one;
      Term(tensors, tensors * one, "memory autocast gradient casts to fp32 ", name);
    }
  }
  // ZeRO-1's AdamW (runtime/parallel/distributed_optimizer.cc): the 8 kernels
  // of Parameters() once each over the flat shard of total / shards elements.
  double FlatShardAdamW() const {
    const double numel = total_numel_ / optimizer_shards_;
    double s = 0;
    for (double e : {2.0, 3.0, 2.0, 4.0, 2.0, 2.0, 2.0, 4.0})
      s += Kernel(e * elem_ * numel / device_.memory_bytes_per_s);
    return s;
  }
  void UseFusedAdamW() { fused_adamw_ = true; }
  // Without terms: only the sums (the planner's millions of evaluations).
  void DropTerms() { keep_terms_ = false; }
  // at::_fused_adamw_ (ATen native/cuda/fused_adamw_impl.cu over
  // MultiTensorApply.cuh): one pass reading param, grad, m, v and writing
  // param, m, v (7 element accesses); a launch holds at most 36 tensors of
  // depth 4 and 320 blocks of 65536 elements.
  double FusedAdamW() const {
    const double bytes = 7 * elem_ * total_numel_;
    const double launches = std::max(std::ceil(total_tensors_ / 36.0), std::ceil(total_numel_ / (320.0 * 65536.0)));
    return std::max(bytes / device_.memory_bytes_per_s, launches * device_.kernel_launch_seconds) +
           device_.kernel_launch_seconds;
  }
  double accumulate() const { return accumulate_; }
  // The attention cores' forward (what selective recomputation runs again).
  double attention_forward() const { return attention_forward_; }

  StepBreakdown Breakdown(bool with_optimizer) const {
    StepBreakdown out = out_;
    if (with_optimizer && optimizer_shards_ > 1) {
      out.optimizer_seconds = FlatShardAdamW();
      if (keep_terms_) out.terms.push_back({"optimizer AdamW on the ZeRO-1 shard", out.optimizer_seconds, 8});
    } else if (with_optimizer && fused_adamw_) {
      out.optimizer_seconds = FusedAdamW();
      if (keep_terms_) {
        out.terms.push_back({"optimizer at::_fused_adamw_", out.optimizer_seconds, std::ceil(total_tensors_ / 36.0)});
      }
    } else if (with_optimizer) {
      out.optimizer_seconds = optimizer_;
      out.terms.insert(out.terms.end(), optimizer_terms_.begin(), optimizer_terms_.end());
    }
    if (weight_casts_ > 0) {
      out.optimizer_seconds += weight_casts_;
      if (keep_terms_)
        out.terms.push_back({"autocast weight casts to bf16 (once per step)", weight_casts_, weight_cast_kernels_});
    }
    // What the CPU's issuing adds beyond the device's time, phase by phase
    // (all parts, one micro-batch each; the step's totals are the sum).
    double issue = WeightCasts() - weight_casts_;
    double issue_kernels = weight_cast_kernels_;
    for (size_t p = 0; p < 3; ++p) {
      for (size_t f = 0; f < 2; ++f) {
        issue += std::max(0.0, kernels_[p][f] * IssueSeconds() - seconds_[p][f]);
        issue_kernels += kernels_[p][f];
      }
    }
    out.tracked_kernels = issue_kernels;
    if (issue > 0) {
      out.issue_seconds = issue;
      if (keep_terms_) out.terms.push_back({"cpu issue beyond the device's time (eager, autograd)", issue, 0});
    }
    out.total_seconds =
        out.gemm_seconds + out.attention_seconds + out.memory_seconds + out.optimizer_seconds + out.issue_seconds;
    return out;
  }

 private:
  void Add(Part part, Phase phase, double s, double kernels) {
    seconds_[static_cast<size_t>(part)][static_cast<size_t>(phase)] += s;
    kernels_[static_cast<size_t>(part)][static_cast<size_t>(phase)] += kernels;
  }
  void Term(double kernels, double seconds, std::string_view prefix, std::string_view name,
            std::string_view suffix = {}) {
    if (!keep_terms_) return;
    std::string text;
    text.reserve(prefix.size() + name.size() + suffix.size());
    text.append(prefix).append(name).append(suffix);
    out_.terms.push_back({std::move(text), seconds, kernels});
  }

  const DeviceProfile& device_;
  bool train_;
  std::array<std::array<double, 2>, 3> seconds_{};
  std::array<std::array<double, 2>, 3> kernels_{};  // autograd-tracked kernels
  double optimizer_ = 0, accumulate_ = 0;
  int optimizer_shards_ = 1;
  double param_bytes_ = 0;
  bool autocast_ = false;
  double weight_casts_ = 0, weight_cast_kernels_ = 0;
  double attention_forward_ = 0;
  double total_numel_ = 0, total_tensors_ = 0, elem_ = 2;
  bool fused_adamw_ = false;
  bool keep_terms_ = true;
  std::vector<StepTerm> optimizer_terms_;
  StepBreakdown out_;
};

// Bytes of the eager op chains, per element, for activations of `a` bytes.
struct Bytes {
  double a;
  // A kernel reading x and writing y activation-dtype elements (+ fp32 ones).
  double Act(double x) const { return x * a; }
  // A cast between the activation dtype and fp32 (none when they are equal).
  double Cast(double width) const { return a == 4 ? kNoKernel : (a + 4) * width; }
};

}  // namespace maestro::compiler::step_terms
