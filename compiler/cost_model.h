// SPDX-License-Identifier: Apache-2.0
// The cost model: for one section and one parallel configuration
// (TP, PP, CP, DP, micro-batch, recomputation) on one GPU type, the FLOPs per
// sample (forward, backward), the per-GPU memory (weights, gradients,
// optimizer states, activations of the micro-batches in flight:
// compiler/memory_model.h) and the time of one step; for an edge, the bytes that cross it
// and the time they take. Measured profiles replace the analytic compute time
// where one matches (same section, GPUs per replica and micro-batch).
//
// The formulas (docs/spec.md, "Cost model", has the full list):
//   compute of one micro-batch on one pipeline stage:
//     - on a device with kernel tables (DeviceType::kernels: every GPU type),
//       the step model from parts (compiler/step_model.h): GEMMs, attention
//       and the eager op chain's memory-bound kernels, forward and backward
//       apart, AdamW + .grad accumulation per step;
//     - otherwise (CPU slots without a `kernels` file) the efficiency curve
//       mb * FLOPs/sample * (train: 3, +1 with full recompute, + the
//       attention core's share with selective; forward: 1)
//       / (tp * pp * cp) / (peak * mfu * x / (x + x_half)),
//       x = mb * tokens / cp * hidden / tp, times w / (w + w_half), w = hidden / tp;
//     - a measured section profile replaces either;
//   + TP all-reduces (2 per layer forward, 2 more backward) over NVLink, CP
//   ring exchanges of K/V, PP sends; a replica runs m micro-batches in
//   (m + pp - 1) stage times (1F1B); DP x CP: ZeRO-1 reduce-scatter of the
//   gradients + all-gather of the parameters over the dp * cp ranks, or an
//   all-reduce without ZeRO-1, after the last micro-batch (not overlapped;
//   docs/gradient_sync.md); the optimizer step.
//   Memory per GPU: compiler/memory_model.h (what the runtime holds: bytes
//   per parameter by the device's precision, ZeRO-1 only where the runtime
//   shards, TP leaving the embedding and LM head whole, a KD student's
//   teacher head, activations from the layer shapes and the micro-batches in
//   flight, the device's reserve).
// What it prices (DeviceType, SectionWork, EdgeWork) is compiler/section_work.h,
// which the memory model reads too; this header includes it.
// May call: base, plan, compiler/section_work.h, compiler/step_model.h,
// compiler/memory_model.h.
// Thread safety: a CostModel is immutable after construction; Evaluate is
// const and may be called from several threads.
#pragma once

#include <vector>

#include "compiler/memory_model.h"
#include "compiler/section_work.h"
#include "plan/plan.h"

namespace maestro::compiler {

// Stage times of pipeline fill and drain per step of a PP = `pp` section
// with `microbatches` per replica per step: pp - 1, or, for a frozen one
// whose pipeline streams `batches_ahead` >= 2 batches ahead
// (runtime/run_ahead.h), only the stages the batches after the next do not
// cover: max(0, pp - 1 - (batches_ahead - 1) x floor(microbatches)).
double PipelineFillStages(int pp, int batches_ahead, double microbatches);

struct SectionCost {
  plan::ParallelConfig config;
  int gpus = 0;
  int nodes = 0;  // planning units it holds: whole nodes, or GPUs when its type packs_nodes (DeviceType::budget_units)
  MemoryBreakdown memory;               // a rank's (a pipelined decoder: its heaviest stage's)
  std::vector<MemoryBreakdown> stages;  // a pipelined decoder: each stage's (EstimateStageMemory)
  bool fits = false;
  double flops_forward_per_sample = 0;
  double flops_backward_per_sample = 0;
  double stage_seconds = 0;  // one micro-batch on one pipeline stage
  double microbatches = 0;   // per replica per step
  double fill_stages = 0;    // stage times of pipeline fill and drain per step: PP - 1 (less when it streams ahead)
  double dp_sync_seconds = 0;
  double step_seconds = 0;           // the section's busy time per step
  double useful_flops_per_step = 0;  // forward (+ backward) of its active samples
  bool measured = false;             // a profile replaced the analytic compute
  bool step_model = false;           // the step model from parts priced the compute (device kernel tables)
  // Not measured at this configuration's GPU count but at another: the
  // model's compute scaled by measured / modelled at calibrated_at_gpus
  // (0: not scaled).
  double calibration_scale = 0;
  int calibrated_at_gpus = 0;
  double forward_share = 0;      // forward / (forward + backward), measured or from parts; 0: unknown
  double optimizer_seconds = 0;  // optimizer step (+ gradient accumulation) per replica per step; 0: unknown
};

class CostModel {
 public:
  CostModel(std::vector<DeviceType> devices, int64_t global_batch);

  const std::vector<DeviceType>& devices() const { return devices_; }
  int64_t global_batch() const { return global_batch_; }

  // Nodes a het component of `gpus` GPUs holds on `device` (components do not
  // share nodes), or 0 when `gpus` is neither a divisor of gpus_per_node nor
  // a multiple of it. On a shared_node device: `gpus` (slots), or 0 when more
  // than the node has.
  // On a packs_nodes device: `gpus`, or 0 when more than the type's GPUs.
  int NodesFor(int device, int gpus) const;

  // REQUIRES: config degrees >= 1.
  SectionCost Evaluate(const SectionWork& section, const plan::ParallelConfig& config) const;

  // As Evaluate, but with an explicit number of micro-batches per replica and
  // samples per micro-batch (a monolithic trainer's encoder sees mb * p
  // samples per micro-batch on average).
  SectionCost EvaluateWith(const SectionWork& section, const plan::ParallelConfig& config, double microbatches,
                           double samples_per_microbatch) const;

  // Seconds per step to move the activations (and gradients back) of `edge`
  // between DP degrees dp_from and dp_to; links run concurrently, the side
  // with fewer replicas limits.
  double EdgeSeconds(const EdgeWork& edge, int dp_from, int dp_to) const;

 private:
  std::vector<DeviceType> devices_;
  int64_t global_batch_;
};

}  // namespace maestro::compiler
