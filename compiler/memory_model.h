// SPDX-License-Identifier: Apache-2.0
// The memory model: what one rank of a section holds at its peak, term by
// term, following what maestro-worker's runtime does (not what a trainer
// could do). Each term names its source in the runtime; docs/spec.md ("Cost
// model") and docs/step_model.md ("Memory model") list them too.
//
//   weights     parameters of the rank's share (bytes per parameter by
//               ParamPrecision; under kMixedBf16 a training section adds the
//               bf16 copies autocast caches for the step of the weights its
//               matmuls read: all but a decoder's untied embedding table and
//               its norms; a forward-only section holds bf16); TP splits only the decoder blocks' q/k/v/o
//               and gate/up/down (runtime/models/decoder.cc
//               ShardDecoderForTensorParallel): the embedding, the LM head and
//               the norms stay whole on every TP rank; in an encoder or
//               projector the blocks' q/k/v/out and fc1/fc2, the merger's and
//               the projector's fc1/fc2 (runtime/models/encoders.h
//               ShardEncoderForTensorParallel): stems, positions, norms and
//               row-parallel biases stay whole. A KD student also holds
//               the teacher's output head, V x C_teacher in fp32
//               (runtime/section_build.cc TeacherHead).
//   gradients   one per trained parameter (train only), the parameter's dtype.
//   optimizer   AdamW's two moments (torch::optim::AdamW). Sharded over DP
//               when the configuration says zero_stage >= 1, which the
//               planner emits when RuntimeSupport::zero1_optimizer_sharding
//               (runtime/parallel/distributed_optimizer.h: the rank keeps the
//               moments of its 1/(DP x CP) of the flat parameters; zero_stage = 0:
//               whole gradients all-reduced, every DP rank steps a full AdamW).
//   activations what autograd keeps for the eager op chain of one micro-batch
//               (bytes per token per layer from the layer shapes, see
//               LayerActivationBytes), times the micro-batches in flight: a
//               sink runs each backward right after its forward (one); a
//               training section that waits for gradients from downstream
//               keeps every micro-batch of its replica, or at most the
//               schedule's in-flight cap + 1 (SectionWork::in_flight_cap,
//               plan::Plan::schedule_max_in_flight); pipeline stage s
//               holds min(pp - s, micro-batches) under 1F1B, and each stage
//               is priced with its own layers (EstimateStageMemory). A training decoder sink adds
//               its fp32 logits chain (log_softmax, KD's teacher logits and KL
//               terms) for at most one loss chunk's tokens (plan/loss_chunk.h:
//               the runtime runs a larger micro-batch's loss in chunks,
//               recomputed in backward); a forward-only section keeps no graph, only one
//               layer's working set and its output rows. Activation
//               recomputation (docs/recompute.md): full keeps each layer's
//               input and one layer's graph; selective drops each layer's
//               attention-core terms. The optimizer step's
//               own transient (gradient clipping squares the largest gradient
//               in fp64) replaces the activations when larger: they are freed
//               by then.
//   reserved    the device's reserve: on a GPU min(2 GB, 10%) (framework,
//               NCCL buffers, fragmentation); on a CPU slot the measured
//               baseline of a maestro-worker rank (kCpuWorkerBaselineBytes).
// Owns: MemoryBreakdown (the terms above), BytesOf, LayerActivationBytes,
// GradientSyncBytes, EstimateSectionMemory, EstimateStageMemory. The cost
// model (compiler/cost_model.h) calls it and holds its breakdown in every
// SectionCost.
// May call: compiler/section_work.h (the types), compiler/model.h, hf
// (layouts), plan. Thread safety: pure functions.
#pragma once

#include "compiler/section_work.h"
#include "plan/plan.h"

namespace maestro::compiler {

// One rank's memory at its peak, term by term (bytes).
struct MemoryBreakdown {
  double weights = 0, gradients = 0, optimizer = 0, activations = 0, reserved = 0;
  double total() const { return weights + gradients + optimizer + activations + reserved; }
};

// What maestro-worker occupies on a CPU rank before it builds its section's
// model: libtorch, Open MPI + PMIx, the plan, the dataset and its sample
// index (VmRSS when RankLoop::Setup has opened the data; metrics.jsonl's
// "baseline_rss_bytes"). Measured on this repository's machine (Debian 12,
// libtorch 1.13 CPU, Open MPI 4.1.4, the built-in text data) with the runs
// of tests/runtime/memory_run_test.cc under `mpirun -np 1` and `-np 2`:
// 174.1-175.1 MB per rank (docs/step_model.md, "Memory model").
inline constexpr double kCpuWorkerBaselineBytes = 175e6;

// Bytes per parameter on a device, and the activations' dtype.
struct PrecisionBytes {
  double weight = 4, gradient = 4, optimizer = 8, activation = 4;
  double compute_copy = 0;    // a training section's bf16 copy of each matmul weight (mixed precision)
  double forward_weight = 4;  // a forward-only section's weights
};
// kFp32: fp32 weights, gradients and both AdamW moments: 4 + 4 + 8 = 16 B
// (runtime/models/layers.h ModelBuildOptions dtype), fp32 activations.
// kMixedBf16 (maestro-worker on a GPU): 4 (fp32 master) + 2 (the bf16 copy
// autocast caches from the step's first forward to its optimizer step) + 4
// (fp32 gradient, all-reduced in fp32) + 8 (fp32 moments) = 18 B per
// matmul weight, 16 B for the rest (embedding table, norms); bf16
// activations; forward-only sections 2 B (bf16 weights, no master). 18 B is
// also Megatron-LM's mixed-precision figure (bf16 weight + fp32 main grad +
// fp32 master + moments).
// kPureBf16: all four in bf16: 2 + 2 + 4 = 8 B, bf16 activations. No
// maestro-worker setting runs it (fp32 moments and master weights are what
// keeps bf16 training stable); a what-if for planning only.
PrecisionBytes BytesOf(ParamPrecision precision);

// Bytes autograd keeps per token for one layer of `model` in training, with
// TP `tp` and an attention context of `context` tokens, at `act_bytes` per
// activation element. `explicit_attention`: the T x T probabilities are kept
// per head (libtorch 1.13's path on CPU, runtime/torch_compat.h); otherwise
// a fused attention keeps its output and the log-sum-exp. The projector is
// one "layer". `attention_core_recomputed` (selective recomputation): the
// attention core keeps neither (Korthikanti et al. 2022, "Reducing
// Activation Recomputation in Large Transformer Models": a layer keeps
// sbh(34 + 5as/h) bytes in 16-bit, eq. 1; selective recomputation, section
// 5, drops the score-sized 5as/h term, keeping 34sbh).
double LayerActivationBytes(const plan::ModelDesc& model, int tp, int64_t context, double act_bytes,
                            bool explicit_attention, bool attention_core_recomputed = false);

// The transient of the gradient sync over DP x CP beyond the gradients
// (docs/gradient_sync.md): ZeRO-1's gradient shard, one packed bucket of at
// most plan::kGradientBucketBytes, and on a CPU slot (`cpu`, MPI) MPI's
// buffers for it; 0 when dp x cp is 1. `gradients`: the rank's gradient
// bytes that the sync covers.
double GradientSyncBytes(double gradients, const plan::ParallelConfig& config, bool cpu);

// The per-GPU memory of section `s` under `config`, with `microbatches`
// micro-batches per replica of `samples_per_microbatch` samples each, on
// `device`: for a pipelined decoder (pp > 1) its heaviest stage's
// (EstimateStageMemory). REQUIRES: config degrees >= 1.
MemoryBreakdown EstimateSectionMemory(const SectionWork& s, const plan::ParallelConfig& config, double microbatches,
                                      double samples_per_microbatch, const DeviceType& device);

// A rank of pipeline stage `stage` of a decoder section (pp > 1): its own
// layers (plan::StageLayerSpan: config.pp_layers or the even split), the
// embedding on the first stage, the final norm, head, loss chain and a KD
// student's teacher head on the last, the rows a stage before the last
// keeps for its backward, and 1F1B's min(pp - stage, micro-batches)
// micro-batches in flight. Any other section: EstimateSectionMemory.
MemoryBreakdown EstimateStageMemory(const SectionWork& s, const plan::ParallelConfig& config, int stage,
                                    double microbatches, double samples_per_microbatch, const DeviceType& device);

}  // namespace maestro::compiler
