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
  // ZeRO-1: AdamW's states sharded over DP (reduce-scatter of gradients,
  // all-gather of parameters; runtime/parallel/distributed_optimizer.h, for
  // every section whose plan says zero_stage >= 1 and DP > 1). Off: the
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
  bool pipeline_parallel_encoder = false;
  // CP, split by side (`--runtime-support cp` sets both). Decoders: not
  // in the runtime yet. Encoders (ViT sections of their own, with TP, DP and
  // ZeRO-1; not fused, where the decoder side would need CP too): the
  // patches split in contiguous chunks, k/v all-gathered, attention per
  // image (docs/context_parallel_vit.md; tests/runtime/vit_context_parallel_test.cc).
  bool context_parallel_decoder = false;
  bool context_parallel_encoder = true;
  // EP (docs/moe.md): not in the runtime yet; the cost and memory models
  // price it (all-to-all, E/ep experts per rank) for --allow-planner-only.
  bool expert_parallel = false;
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
  // sections finish the current one (runtime/run_ahead.h). The runtime's
  // spool is per rank of a TP = 1, PP = 1 section (a pipelined forward-only
  // section streams its forwards and has no spool, docs/pipeline.md), so a
  // tensor- or pipeline-parallel section's run-ahead is planner-only.
  bool run_ahead = true;
  bool run_ahead_model_parallel = false;
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
