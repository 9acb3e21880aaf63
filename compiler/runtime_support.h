// SPDX-License-Identifier: Apache-2.0
// The one table of what maestro-worker's runtime can execute today. The
// planner emits only configurations this table allows; with
// --allow-planner-only it searches the whole space and the report marks the
// sections whose configuration the runtime cannot run yet ("planner-only").
// Change a row here when the runtime gains a feature; nothing else changes.
// May call: plan. Thread safety: constant data.
#pragma once

#include <string>

#include "plan/plan.h"

namespace maestro::compiler {

struct RuntimeSupport {
  bool data_parallel = true;  // DP: whole gradients all-reduced, every replica steps a full AdamW
  // ZeRO-1: AdamW's states sharded over DP x CP (reduce-scatter of gradients,
  // all-gather of parameters; runtime/parallel/distributed_optimizer.h, for
  // every section whose plan says zero_stage >= 1 and DP x CP > 1;
  // docs/gradient_sync.md). Off: the
  // planner emits zero_stage = 0 and the memory model counts the whole
  // optimizer state on every DP rank.
  bool zero1_optimizer_sharding = true;
  bool micro_batching = true;
  bool tensor_parallel_decoder = true;
  // ViT / audio encoder / projector (a ViT's merger too): heads and MLP
  // inner units split Megatron-style (runtime/models/encoders.h
  // ShardEncoderForTensorParallel), in their own sections and inside fused
  // ones; proved equal to the reference by tests/runtime/encoder_tp_test.cc
  // and train_mpi_test.cc (VitTp2*, FusedVlmTp2*).
  bool tensor_parallel_encoder = true;
  // PP for decoder sections: stages of layers, 1F1B per stage, tied
  // embeddings summed between the first and last stage, per-stage
  // checkpoints, with TP, DP and ZeRO-1 per stage (runtime/pipeline.h,
  // docs/pipeline.md).
  bool pipeline_parallel_decoder = true;
  // PP for fused sections (docs/fused_pipeline.md): every decoder's layers in
  // stages, encoders and projectors whole on the first stage (what the
  // monolithic baseline assumes), a KD teacher streaming beside its student;
  // tests/runtime/fused_pipeline_test.cc. Lets a monolithic baseline with
  // PP > 1 be the fused plan (compile.cc FusedPlanBlocker).
  bool pipeline_parallel_fused = true;
  bool pipeline_parallel_encoder = false;
  // CP (`--runtime-support cp` sets every CP row). Decoders
  // (docs/context_parallel.md): the sequence in 2*cp load-balanced chunks,
  // K and V all-gathered per layer, gradients summed over CP; with TP, DP,
  // ZeRO-1 and recomputation (tests/runtime/context_parallel_test.cc).
  // Encoders (ViT sections of their own, with TP, DP and ZeRO-1): the
  // patches split in contiguous chunks, k/v all-gathered, attention per
  // image (docs/context_parallel_vit.md; vit_context_parallel_test.cc); the
  // audio encoder's stem is not split. Not with PP
  // (context_parallel_with_pipeline).
  bool context_parallel_decoder = true;
  bool context_parallel_encoder = true;
  bool context_parallel_with_pipeline = false;
  // CP inside fused sections (docs/fused_context_parallel.md): decoders run
  // decoder CP, encoders and projectors whole on every CP rank (what the
  // monolithic baseline assumes), their gradients summed over CP; PP = 1
  // (tests/runtime/fused_context_parallel_test.cc). Lets a monolithic
  // baseline with CP > 1 be the fused plan (compile.cc FusedPlanBlocker).
  bool context_parallel_fused = true;
  // EP of MoE decoder sections (docs/moe.md; runtime/parallel/
  // expert_parallel.h): experts split over EP groups of DP ranks, all-to-all
  // dispatch and combine, lockstep padding, expert-DP gradients and ZeRO-1,
  // with TP and PP; tests/runtime/expert_parallel_test.cc proves it equal to
  // the reference. The cost and memory models price it.
  bool expert_parallel = true;
  // MoE layers (Mixtral, Qwen2-MoE, Qwen3-MoE shapes; the load-balancing
  // loss; experts TP-sharded like a dense MLP): tests/runtime/moe_train_test.cc
  // proves DP 2 (and ZeRO-1) and TP 2 x DP 2 equal to the reference.
  bool mixture_of_experts = true;
  // Full and selective activation recomputation of the transformer blocks
  // (runtime/recompute.h; plan::RecomputeGranularity): equal to the
  // reference in tests/runtime/recompute_test.cc and recompute_mpi_test.cc.
  bool activation_recompute = true;
  // The kernels its code paths use (issue #19; the step model prices each,
  // compiler/step_model.h FusedOps): GQA inside SDPA instead of
  // repeat_interleave, at::rms_norm instead of the fp32 chain,
  // at::_fused_adamw_ instead of the per-parameter loop. The step model
  // prices them only on GPU types (measured kernel tables), where
  // maestro-worker runs a CUDA libtorch 2.x (Debian's 1.13 has no CUDA; the
  // GPU kit builds against PyTorch 2.11): runtime/torch_compat.h uses
  // enable_gqa inside at::scaled_dot_product_attention from 2.5 and
  // at::_fused_adamw_ on CUDA from 2.1 (compat::GqaAttention,
  // compat::FusedAdamWStep). A CPU slot (1.13: repeat_interleave, the
  // per-parameter loop) is priced by the efficiency curve or a measured
  // profile, which these rows do not touch. at::rms_norm is not used yet.
  // Run-ahead (docs/run_ahead.md): a forward-only section computes the rows
  // of the next global batches into its output spool while the training
  // sections finish the current one (runtime/run_ahead.h). With TP and/or
  // PP > 1 (a section without upstream sections), the rank that sends
  // downstream owns the spool and tells its TP peers and stages which rows
  // to compute (tests/runtime/run_ahead_mp_test.cc). With CP > 1 (and TP),
  // TP = CP = 0 owns it and the CP and TP peers compute the same rows
  // (`run_ahead_cp`; tests/runtime/run_ahead_cp_test.cc). Not with EP.
  // `run_ahead_stream`: a pipelined one running 2 or more batches ahead
  // streams from one step into the next (its stages lag the first by up to
  // PP - 1 micro-batches across the step boundary, runtime/run_ahead.h), so
  // it pays the pipeline fill once per start, not once per step
  // (tests/runtime/run_ahead_mp_test.cc RunAheadStream).
  bool run_ahead = true;
  bool run_ahead_model_parallel = true;
  bool run_ahead_context_parallel = true;
  bool run_ahead_stream = true;
  bool gqa_in_sdpa = true;
  bool fused_rms_norm = false;
  bool fused_adamw = true;
};

// What the runtime of this build supports.
inline constexpr RuntimeSupport kRuntimeSupport{};

// "" when `config` of a section with `model` runs on the runtime; otherwise
// the features that make it planner-only, e.g. "CP=2, recompute".
std::string PlannerOnlyFeatures(const plan::ModelDesc& model, const plan::ParallelConfig& config,
                                const RuntimeSupport& support = kRuntimeSupport);

}  // namespace maestro::compiler
