// SPDX-License-Identifier: Apache-2.0
// How fast one section's model trains on one device, and how much device
// memory it takes: the measurement behind `maestro-bench gpu` (a ~1B decoder
// on CUDA, its MFU; a ViT-B/16 and a Qwen2-VL-sized vision tower against the
// step model), the validation case of `maestro profile --kernels`, and their
// CPU smoke tests. No torch types here: bench/ includes it without torch's
// headers.
//
// One step of a decoder = forward of (micro_batch, seq_len) random token ids
// -> hidden (B, T, C) -> the head and the fp32 cross-entropy against the ids
// shifted by one -> backward -> AdamW. One step of a ViT = forward of
// (micro_batch, channels, image_size, image_size) random images -> rows
// (B, N', C') -> the mean of their squares (a stand-in for the gradient the
// next section sends; one elementwise pass) -> backward -> AdamW. `warmup`
// untimed steps, then `steps` timed ones, the device synchronized around
// them only.
//
// Precision (`precision`):
//   "bf16"  parameters, gradients and AdamW's moments in bf16, AdamW's
//           per-parameter loop, a decoder's loss whole: the configuration
//           of the H100 measurements (../shared/research/h100-measurements.md
//           section 1) and of the first hand-built MFU figure;
//   "mixed" what maestro-worker runs on a GPU (runtime/section_runner.h
//           "Device and precision"): fp32 master weights, the forward under
//           autocast to bf16 (weight casts cached for the step), fused AdamW
//           where this libtorch has it for the device (else the loop), a
//           decoder's loss through runtime/vocab_loss.cc (in chunks past
//           plan::kLossWholeTokens, as the runtime runs it);
//   "fp32"  everything fp32 (the CPU's).
// With `phases`, `steps` more steps are timed with the device synchronized
// between forward (the loss included), backward and the optimizer, and the
// optimizer step alone `steps` times as fused AdamW (where available) and as
// torch::optim::AdamW's loop.
// May call: libtorch, runtime/models, runtime/vocab_loss, runtime/torch_compat, plan.
// Thread-safety: one call at a time.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::runtime {

struct SectionSpeedOptions {
  std::string device = "cuda";     // "cuda" or "cpu"
  std::string precision = "bf16";  // "bf16", "mixed" or "fp32" (above)
  int micro_batch = 4;             // samples (decoder) or images (ViT)
  int seq_len = 2048;              // decoder: tokens per sample (ignored for a ViT)
  int warmup = 3;
  int steps = 10;
  bool phases = false;  // also time the phases apart and the optimizer alone (above)
};

struct SectionSpeed {
  int64_t params = 0;               // parameters of the built model
  double seconds_per_step = 0.0;    // mean over the timed steps
  double tokens_per_second = 0.0;   // decoder: B x T; ViT: images x patches
  double samples_per_second = 0.0;  // decoder: sequences; ViT: images
  int64_t tokens_per_step = 0;
  // With `phases` (else -1): means over the phase-timed steps.
  double forward_seconds = -1, backward_seconds = -1, optimizer_seconds = -1;
  // With `phases`, the optimizer step alone (else, or not available, -1).
  double optimizer_fused_seconds = -1, optimizer_loop_seconds = -1;
  // One more step's forward and backward, its ops counted (RecordFunction's
  // global callbacks: every op the dispatcher calls, nested ones too, and
  // every autograd node run, on any thread): what the CPU issues, against
  // which the step model's count of tracked kernels can be set. -1: not counted.
  int64_t aten_ops = -1, autograd_nodes = -1;
  // The CUDA caching allocator's peak of allocated bytes over the timed
  // steps (weights, gradients, moments and the step's activations); -1 on
  // the CPU and where this libtorch cannot say (before 2.9).
  int64_t peak_allocated_bytes = -1;
  std::string device;     // what it ran on
  std::string dtype;      // "bf16" or "fp32": the activations'
  std::string precision;  // as given
};

// Whether libtorch can run on CUDA here; when not, *why says why (built
// without CUDA, or no device visible).
bool CudaUsable(std::string* why);

// REQUIRES: desc.kind is kDecoder (dense or MoE) or kVit. FailedPrecondition
// when the device is CUDA and CudaUsable() is false; InvalidArgument for
// another kind, device or precision.
StatusOr<SectionSpeed> MeasureSectionTraining(const plan::ModelDesc& desc, const SectionSpeedOptions& options);

// How an issue probe (plan/issue_probe.h: the ViT or the decoder) is timed:
// micro-batch 1 (its images or one sequence of kIssueProbeTokens), the
// runtime's precision on the device ("mixed" on CUDA, "fp32" on the CPU),
// the phases apart, `steps` after 3 warm-up. `maestro profile --kernels`
// and `maestro-bench gpu` both time it so.
SectionSpeedOptions IssueProbeOptions(const plan::ModelDesc& probe, bool cuda, int steps);

}  // namespace maestro::runtime
