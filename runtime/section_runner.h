// SPDX-License-Identifier: Apache-2.0
// SectionRunner: one section's compute on one rank, as both executors see it
// (the distributed one in executor.h and the one-process reference in
// reference.h), so that they differ only in where activations come from and
// where gradients go. Two kinds implement it:
//   - ModelRunner (runtime/model_runner.h): a section of one model. Its
//     build (section_build.cc: the model, then TP, the PP stage, CP, EP,
//     recompute and the initial weights applied to it in that order), its
//     forward per model kind (section_forward.cc), its optimizer
//     (section_optimizer.cc) and its state (section_state.cc) each have a
//     file.
//   - FusedSectionRunner (runtime/fused_section.h): a fused section, its
//     components' ModelRunners run one after another on every sample.
// A caller never asks which kind it has.
//
// May call: runtime/micro_batch (the micro-batch), plan, base, libtorch.
// Torch-internal: include only from runtime/*.cc and tests/runtime.
//
// Loss scaling. A sink's micro-batch loss is sum_b loss_b / global_batch,
// where loss_b is sample b's mean over its target tokens (a MoE decoder adds
// router_aux_loss_coef * sample b's load-balancing term, docs/moe.md; only a
// sink may have one). The step's gradient is then the sum of the
// micro-batches' gradients, whatever the placement and order of the samples
// (DP gradients are summed, not averaged).
//
// Device and precision (RunnerOptions; runtime/device_choice.h picks them).
// The model is built on options.device (weights from one CPU generator, so
// the same on any device); inputs are moved there. Precision kBf16 is mixed
// precision the PyTorch-AMP way: parameters, their gradients and AdamW's
// moments stay fp32 (the DP all-reduce is fp32), and Forward runs under
// autocast to bf16 (compat::AutocastGuard: matmuls in bf16; the norms, the
// softmax of the loss and the KD terms in fp32). Autocast's bf16 casts of the
// weights are cached from a step's first forward to its optimizer step, so
// a training section holds 4 (master) + 2 (bf16 copy) + 4 (gradient) + 8
// (moments) = 18 bytes per parameter (compiler/memory_model.h kMixedBf16). A
// forward-only section has no master to keep: its weights are bf16 (2 bytes).
// Checkpoints are device-independent: models are saved from CPU copies,
// and archives load onto the runner's device (and keep its dtypes).
//
// Thread safety: one thread.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "plan/plan.h"
#include "runtime/device_choice.h"
#include "runtime/micro_batch.h"

namespace maestro::launcher {
class Backend;  // launcher/comm.h
}  // namespace maestro::launcher

namespace maestro::runtime {

class TensorParallelReducer;   // runtime/parallel/tensor_parallel.h
class PipelineGroup;           // runtime/parallel/pipeline_parallel.h
class ExpertParallelExchange;  // runtime/parallel/expert_parallel.h

// Forward's inputs key of the previous pipeline stage's activation (B, T, C).
inline constexpr int kPipelineInput = -1;
// A pipelined fused KD section (docs/fused_pipeline.md): Forward's inputs key
// of the previous stage's frozen-teacher activation (B, T, C_teacher).
inline constexpr int kPipelineTeacherInput = -2;

struct RunnerOptions {
  torch::Device device = torch::kCPU;
  Precision precision = Precision::kFp32;  // kBf16: autocast, fp32 master weights (above)
  // false: no replicated AdamW (evaluation; or a ZeRO-1 section, whose
  // caller steps a DistributedOptimizer over Parameters()).
  bool build_optimizer = true;
  // Decoder sections with tp > 1: the all-reduce over this rank's TP group
  // (must outlive the runner). The model is sharded; SaveModel() gathers the
  // full weights (collective over the TP group), LoadModel() takes full
  // weights and keeps this rank's shard; the optimizer state is per shard.
  TensorParallelReducer* tensor_parallel = nullptr;
  // Decoder sections with pp > 1: this rank's pipeline stage (must outlive
  // the runner). The runner holds only the stage's layers
  // (runtime/parallel/pipeline_stages.h LayersOfStage; the first stage the
  // embeddings, the last the final norm, head and loss); Forward reads the
  // previous stage's activation from inputs[kPipelineInput] and a non-last
  // stage returns its activation as Output::rows. SaveModel() gathers the
  // whole model (collective over the PP and TP groups), LoadModel() takes the
  // whole model and keeps the stage's part; the optimizer state is per
  // stage. OptimizerStep's norm is over every stage (a tied embedding counted
  // once). A fused section with pp > 1: docs/fused_pipeline.md (decoders
  // staged, encoders on stage 0).
  PipelineGroup* pipeline = nullptr;
  // MoE decoder sections with ep > 1: this rank's EP group (must outlive the
  // runner). The model keeps this EP rank's routed experts (docs/moe.md);
  // SaveModel() gathers every expert (collective over the EP group too),
  // LoadModel() keeps this rank's; OptimizerStep's norm sums the routed
  // experts' squares over the EP group (each expert counted once).
  ExpertParallelExchange* expert_parallel = nullptr;
  // Decoder sections with cp > 1: this rank's CP group (must outlive the
  // runner; docs/context_parallel.md). Forward takes the whole micro-batch
  // (ids, targets, upstream rows: every CP rank has them), computes the
  // embeddings of the whole sequence and keeps this rank's load-balanced
  // part (SplitSequenceForContextParallel); the model all-gathers K and V.
  // A sink's loss is this rank's share: sum over its tokens / the sample's
  // whole target count, so the CP ranks' losses (and gradients) sum to the
  // unsplit one; Output::loss_samples counts on CP rank 0 only. Rows sent on
  // (a teacher's hidden states) are gathered whole on every CP rank. The
  // caller sums the parameters' and the inputs' gradients over CP.
  // ViT sections with cp > 1 (docs/context_parallel_vit.md): each CP rank
  // encodes its chunk of the micro-batch's patches; the rows Forward returns
  // are whole on every CP rank, and their gradient is given on CP rank 0
  // only (zeros on the others). The caller sums the parameters' gradients
  // over the CP group before the DP all-reduce.
  launcher::Backend* context_parallel = nullptr;
  // True when the caller loads this section's state from a Maestro
  // checkpoint right after Create (a resumed run): a training section then
  // skips its initial weights (`init_from`, HF `weights`). Forward-only
  // sections are not in checkpoints and always load theirs.
  bool resuming = false;
};

// The seed of a section's initial weights: the run's seed mixed with the
// section's name (splitmix64), so every process builds the same weights.
uint64_t SectionSeed(uint64_t run_seed, const std::string& section_name);

// The shape of one sample's row on the edges leaving section `section` of
// `plan` (what SectionRunner::OutputRowShape says, from the plan alone): a
// ViT's (K * VitOutputTokens, VitOutputDim) with K = MaxImagesPerSample
// (plan_data.h), an audio encoder's (K_audio * ceil(audio_frames / 2),
// hidden) with K_audio = MaxAudiosPerSample, a decoder's (seq_len, hidden) or a KD teacher's (seq_len, 2K or draws + 1:
// plan/teacher_rows.h), a projector's (rows of its input, out_dim).
std::vector<int64_t> RowShapeOf(const plan::Plan& plan, int section);

class SectionRunner {
 public:
  // Builds section `section` of `plan`: a FusedSectionRunner for a fused
  // section, else a ModelRunner. Initial weights: loaded from
  // section.init_from (a .mckpt or a run directory) when set, else from the
  // model's Hugging Face `weights` folder when set (this TP rank's slice
  // only, converted to the model's dtype), else from SectionSeed.
  static StatusOr<std::unique_ptr<SectionRunner>> Create(const plan::Plan& plan, int section,
                                                         const RunnerOptions& options = {});
  virtual ~SectionRunner();

  int section() const { return section_; }
  const plan::SectionPlan& section_plan() const { return section_plan_; }
  const RunnerOptions& options() const { return options_; }
  // True when the section (a fused one: any of its components) trains.
  virtual bool trains() const = 0;
  // The training runners whose state a checkpoint holds under their own
  // names: a fused section's training components, else this runner when it
  // trains.
  virtual std::vector<SectionRunner*> CheckpointedRunners() = 0;
  // True when no edge leaves the section: it computes a loss (train) or
  // nothing useful (forward).
  bool is_sink() const { return out_edges_.empty(); }
  const std::vector<int>& in_edges() const { return in_edges_; }
  const std::vector<int>& out_edges() const { return out_edges_; }

  // The shape of one sample's row on the edges that leave this section:
  // ViT (tokens, width), decoder (T, C), projector (rows, out_dim); the row
  // count of a projector is that of its input. Empty for a fused section
  // (it sends no rows).
  virtual std::vector<int64_t> OutputRowShape() const = 0;

  struct Output {
    torch::Tensor rows;     // (B, OutputRowShape...) when edges leave the section
    torch::Tensor loss;     // scalar, a sink that trains: sum_b loss_b / global_batch
    double loss_sum = 0.0;  // sum_b loss_b (for logs)
    int64_t loss_samples = 0;
    int64_t answers_right = 0;  // caption samples whose answer token is the argmax
    int64_t answers = 0;
    // A pipelined fused KD section's non-last stage: the frozen teacher's
    // activation (B, T, C_teacher) for the next stage (rows: the student's).
    torch::Tensor teacher_stage_rows;
    // Adds `part`'s loss and counts to this one's (rows are not added): the
    // one rule for summing the forwards of several sections or components.
    void AddLossAndCounts(const Output& part);
  };
  // One micro-batch. `data`: its B samples, every one activating this
  // section (a fused section: every sample; each component runs on the
  // samples that activate it, rows pass between components in memory and
  // autograd spans them; the loss is the sum of its sinks' losses).
  // `inputs`: per input edge (plan edge index), the rows of the samples the
  // upstream section processed, in micro-batch order: (n_e, upstream
  // OutputRowShape...). For a training section the caller makes them leaves
  // with requires_grad to read their gradients.
  virtual StatusOr<Output> Forward(const MicroBatchData& data, const std::map<int, torch::Tensor>& inputs) = 0;

  // Trainable parameters, in a fixed order (DP all-reduce, clipping).
  virtual std::vector<torch::Tensor> Parameters() = 0;
  // Per entry of Parameters(): true when it is this rank's TP slice (its
  // gradient's squares are summed over the TP group for the norm), false
  // when whole on every TP rank.
  virtual std::vector<bool> ParametersShardedOverTp() = 0;
  // Per entry of Parameters(): false for the one a gradient norm leaves out
  // (a tied embedding on a pipeline's last stage: the first stage counts it).
  virtual std::vector<bool> ParametersCountedInNorm() = 0;
  // Per entry of Parameters(): true for a routed expert's parameter (EP:
  // reduced over the expert-DP group, not DP; IsRoutedExpertParameter).
  virtual std::vector<bool> ParametersOfRoutedExperts() = 0;
  // EP, an empty micro-batch (lockstep, runtime/parallel/expert_lockstep.h):
  // this rank's part in its MoE layers' exchanges without tokens, forward
  // (returns what BackwardNoTokens takes) and backward.
  virtual std::vector<torch::Tensor> ForwardNoTokens() { return {}; }
  static void BackwardNoTokens(const std::vector<torch::Tensor>& outputs);
  // Gives every parameter without a gradient a zero one (a section that saw
  // no sample in a step, an MoE expert no token picked): the optimizer then
  // steps every parameter the same way on every rank and in the reference.
  void EnsureGradients();
  // Clips the (already DP-summed) gradients to optimizer.grad_clip, sets the
  // LR of `step`, steps AdamW and zeroes the gradients. Returns the norm
  // before clipping.
  virtual double OptimizerStep(int64_t step) = 0;

  // The weights changed outside OptimizerStep (a ZeRO-1 step gathered new
  // parameters): drops the bf16 casts that mixed precision caches from a
  // step's first forward to its optimizer step.
  void WeightsChanged();

  // Checkpoint state: model and optimizer as torch archives (bytes). With TP,
  // SaveModel() is collective over the TP group and returns the full model.
  // A fused section's state is saved and loaded per component
  // (CheckpointedRunners): on it these fail.
  virtual StatusOr<std::string> SaveModel() = 0;
  // What a sharded checkpoint (runtime/checkpoint_slices.h) needs to place
  // this rank's part of each parameter in its global tensor: one entry per
  // named parameter of the model, in module order (a fused section: none;
  // its components have theirs). `local` is this rank's tensor: empty (numel
  // 0) when another stage or EP rank holds the parameter; its TP split is
  // `split_dim` (-1: whole on every TP rank) in `split_parts` blocks
  // (TensorParallelSplit), this rank's slice `tp_rank` of `tp_size`.
  struct ParameterPlacement {
    std::string name;
    torch::Tensor local;
    int split_dim = -1;
    int split_parts = 1;
    int tp_rank = 0;
    int tp_size = 1;
    bool tied_copy = false;      // a later stage's copy of the tied embedding
    bool routed_expert = false;  // IsRoutedExpertParameter under EP
    bool trainable = false;      // in Parameters() (the k-th trainable entry is Parameters()[k])
  };
  virtual std::vector<ParameterPlacement> ParameterPlacements() { return {}; }
  // The replicated AdamW (null for a ZeRO-1 or forward-only runner).
  virtual torch::optim::AdamW* ReplicatedAdamW() { return nullptr; }
  virtual StatusOr<std::string> SaveOptimizer() = 0;
  virtual Status LoadModel(const std::string& bytes) = 0;
  virtual Status LoadOptimizer(const std::string& bytes) = 0;

  // The model. REQUIRES: a section of one model (a fused section has one
  // module per component: it throws).
  virtual torch::nn::Module& module();
  // True when the model is a TP shard (RunnerOptions::tensor_parallel, size > 1).
  bool Sharded() const;
  // True when the model is one stage of a pipeline (RunnerOptions::pipeline, size > 1).
  bool Staged() const;
  // True when the model keeps only its EP rank's experts (RunnerOptions::expert_parallel, size > 1).
  bool ExpertSharded() const;
  // The CP group size (RunnerOptions::context_parallel), 1 without one.
  int ContextParallelSize() const;
  // A KD student's teacher edge (plan edge index), -1 when none.
  virtual int kd_edge() const { return -1; }
  // The decoder whose stage activation crosses between pipeline stages as
  // Output::rows: this runner, or a fused section's training decoder
  // component (docs/fused_pipeline.md); null for a fused section without one.
  virtual SectionRunner* PipelinedDecoder() { return this; }
  // A pipelined fused KD section's forward-only decoder component (its
  // activation travels as Output::teacher_stage_rows), else null.
  virtual SectionRunner* PipelinedTeacher() { return nullptr; }
  // The tied embedding (V, C) of a staged decoder's first or last stage
  // (both hold it: PipelineGroup::SumTiedGradient), else undefined.
  virtual torch::Tensor TiedEmbedding() { return {}; }

 protected:
  // Section `section` of `plan` (which must outlive the runner) with
  // `options`; its in and out edges are read from the plan.
  SectionRunner(const plan::Plan& plan, int section, const RunnerOptions& options);

  const plan::Plan& plan() const { return *plan_; }

 private:
  const plan::Plan* plan_;
  int section_;
  plan::SectionPlan section_plan_;
  RunnerOptions options_;
  std::vector<int> in_edges_, out_edges_;
};

}  // namespace maestro::runtime
