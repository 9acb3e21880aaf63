// SPDX-License-Identifier: Apache-2.0
// What maestro-worker's runtime runs, written once: the table of its
// features (RuntimeSupport) and one function per rule of what it refuses.
// The compiler plans from the table (compiler/candidates.h
// PlannerOnlyFeatures: the planner emits only configurations it allows;
// with --allow-planner-only the report marks the others) and refuses at
// compile time what the rules refuse (compiler/compile.h); the runtime
// checks a plan with CheckPlanRuns before it builds anything (the executor's
// setup, the one-process reference, the profiler), so a plan the compiler
// emits runs, and one edited by hand is refused by name with the fix.
// tests/runtime/runtime_refusal_test.cc holds the runtime to the table: it
// builds exactly what the table and the rules allow.
// Change a row here when the runtime gains a feature.
// Torch-free. May call: base, plan (model_desc: the model's features;
// tensor_parallel_split: the TP and EP splits). Thread safety: pure
// functions and constant data.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::plan {

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
  // checkpoints, with TP, DP and ZeRO-1 per stage (runtime/parallel/pipeline_stages.h,
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

// Every rule below for every section (a fused section: its own rules, then
// its components' with its configuration), then the run-ahead rule. Ok, or
// the first refusal. Each refusal is FailedPrecondition or InvalidArgument
// naming the section and the fix; `refused_section`, when given, is set to
// the name of the section (or fused component) refused.
Status CheckPlanRuns(const Plan& plan, const RuntimeSupport& support = kRuntimeSupport,
                     std::string* refused_section = nullptr);

// Every rule below for section `s` of `plan` (not fused; a fused section's
// component as CheckPlanRuns makes it, in ExpandFusedSections(plan)).
Status CheckSectionRuns(const Plan& plan, const SectionPlan& s, const RuntimeSupport& support = kRuntimeSupport);

// ---- one function per rule ----
// `s` is a section of `plan` (or, for a fused section's component, of
// ExpandFusedSections(plan)).

// The model is one the runtime builds (plan/model_desc.h ValidateModelDesc:
// its fields, and no feature it lacks such as dynamic NTK rope_scaling or mixed dense
// and MoE layers), and its M-RoPE sections fit its heads (plan/mrope.h CheckMrope).
Status CheckModelRuns(const SectionPlan& s);

// The section's edges are ones the runtime wires: a training section never
// feeds a forward-only one; decoder rows feed only a decoder (KD), one
// teacher at most, of the same vocabulary; a ViT or an audio encoder reads
// the data, not an edge; loss kind "kd" has its teacher; a MoE
// load-balancing loss belongs to a sink.
Status CheckSectionWiring(const Plan& plan, const SectionPlan& s);

// The data feeds the section: an audio encoder reads a manifest's clips
// (data.manifest and data.audio_token_id; the built-in datasets and corpora
// carry none); an M-RoPE decoder's images form grids (plan/mrope.h
// MropeImageGrid: not CLIP's class token first). (A decoder's sequences may
// be longer than its sliding window: runtime/models/decoder.h masks the
// attention.)
Status CheckSectionData(const Plan& plan, const SectionPlan& s);

// Tensor parallelism: the table's row for the model's kind, and tp divides
// the model (plan/tensor_parallel_split.h). In a fused section an encoder
// or projector tp does not divide runs whole on every TP rank: only its
// decoders are held to it.
Status CheckTensorParallelRuns(const SectionPlan& s, const RuntimeSupport& support = kRuntimeSupport);

// Pipeline parallelism: decoders (pp <= their layers); a fused section as
// FusedPipelineRefusal says.
Status CheckPipelineRuns(const SectionPlan& s, const RuntimeSupport& support = kRuntimeSupport);

// "" when the runtime pipelines fused section `fused` with its config's pp
// (any pp for pp = 1); otherwise why not, in words that name the section.
// It pipelines a fused section with exactly one training decoder, the
// section's only sink, run on every sample (activation "always"), fed by any
// encoders and projectors and by at most one forward-only decoder (a KD
// teacher, also run on every sample); every decoder has at least pp layers
// (docs/fused_pipeline.md). The compiler's grouping names this reason when it
// chooses a sectioned plan.
std::string FusedPipelineReason(const SectionPlan& fused);

// FusedPipelineReason with the fix a user of the runtime needs (recompile
// with --grouping sectioned); "" when it pipelines.
std::string FusedPipelineRefusal(const SectionPlan& fused);

// Context parallelism: decoder and ViT sections (a fused section: its
// decoders split the sequence, the rest runs whole), not with PP; a
// decoder's sequence splits into 2 * cp chunks (ContextParallelSplitError),
// carries no MoE load-balancing loss (a per-sample statistic) and no EP.
Status CheckContextParallelRuns(const Plan& plan, const SectionPlan& s,
                                const RuntimeSupport& support = kRuntimeSupport);

// "" when a sequence of `seq_len` tokens splits over `cp_size` CP ranks in
// the load-balanced causal split (2 * cp equal chunks; cp 1: always);
// otherwise why not.
std::string ContextParallelSplitError(int64_t seq_len, int cp_size);

// Expert parallelism: MoE decoder sections of their own, ep dividing the
// experts (plan/tensor_parallel_split.h CheckExpertParallelSplit).
Status CheckExpertParallelRuns(const SectionPlan& s, const RuntimeSupport& support = kRuntimeSupport);

// The rest of the table's rows for a training section's configuration: DP,
// micro-batching, ZeRO-1, recomputation and MoE layers.
Status CheckTrainingFeaturesRun(const SectionPlan& s, const RuntimeSupport& support = kRuntimeSupport);

// Run-ahead (docs/run_ahead.md): only a forward-only section that is not
// fused, feeds another section, has no EP and, with TP, PP or CP, has no
// upstream section.
Status CheckRunAheadRuns(const Plan& plan, const RuntimeSupport& support = kRuntimeSupport);

}  // namespace maestro::plan
