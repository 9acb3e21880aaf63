// SPDX-License-Identifier: Apache-2.0
// SectionRunner: one section's model, loss and optimizer on one rank — the
// compute both executors share (the distributed one in executor.h and the
// one-process monolithic reference in reference.h), so that they differ only
// in where activations come from and where gradients go.
//
// Owns: building the section's model from the plan (weights from the run's
// seed, `init_from` or its Hugging Face `weights`), the forward of one micro-batch (a ViT's rows for
// 0..K images per sample, image embeddings spliced into a decoder's sequence
// at the plan's placeholder id, a KD student's teacher head, the loss of a
// sink), AdamW with per-section gradient clipping and the LR schedule, and
// the section's checkpoint state (model + optimizer bytes).
// May call: runtime/models, runtime/parallel, runtime/pipeline (stage split), runtime/fused_pipeline
// (a fused section's stages), runtime/hf_weights, hf
// (checkpoint folders), runtime/plan_data (placeholder id, images per
// sample), runtime/reference (SectionActivates), datasets (SampleSource,
// token ids), datalayer (init_from),
// plan, base, libtorch. Torch-internal: include only from runtime/*.cc and
// tests/runtime.
//
// Loss scaling. A sink's micro-batch loss is sum_b loss_b / global_batch,
// where loss_b is sample b's mean over its target tokens (a MoE decoder adds
// router_aux_loss_coef * sample b's load-balancing term, docs/moe.md; only a
// sink may have one). The step's gradient
// is then the sum of the micro-batches' gradients, whatever the placement
// and order of the samples (DP gradients are summed, not averaged).
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
#include "datasets/sample_source.h"
#include "plan/plan.h"
#include "runtime/device_choice.h"

namespace maestro::launcher {
class Backend;  // launcher/comm.h
}  // namespace maestro::launcher

namespace maestro::runtime {

// The payloads of one micro-batch, stacked. B samples; a section reads the
// fields it needs.
struct MicroBatchData {
  std::vector<int64_t> sample_ids;        // (B)
  torch::Tensor input_ids;                // (B, T) int64 (decoder sections)
  torch::Tensor target_ids;               // (B, T) int64, -100 where no loss
  torch::Tensor images;                   // (N_img, channels, H, W) fp32: every sample's images, in sample order
  std::vector<int64_t> image_counts;      // (B) images of each sample
  std::vector<int64_t> answer_positions;  // (B), -1 when the sample has no caption answer
  std::vector<int> labels;                // (B), -1 when none
};

// Loads the payloads of `sample_ids` (in that order) of `split` (train ids
// or test indices) from `samples` and stacks them. Every sample has the same
// token count, every image the same (channels, H, W).
StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids,
                                        datasets::Split split);
StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids);

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
  // the runner). The runner holds only the stage's layers (runtime/pipeline.h
  // LayersOfStage; the first stage the embeddings, the last the final norm,
  // head and loss); Forward reads the previous stage's activation from
  // inputs[kPipelineInput] and a non-last stage returns its activation as
  // Output::rows. SaveModel() gathers the whole model (collective over the
  // PP and TP groups), LoadModel() takes the whole model and keeps the
  // stage's part; the optimizer state is per stage. OptimizerStep's norm is
  // over every stage (a tied embedding counted once). A fused section with
  // pp > 1: docs/fused_pipeline.md (decoders staged, encoders on stage 0).
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

// LR of `step` (0-based): linear warmup over warmup_steps to lr, then
// constant or a cosine to lr / 10 at `total_steps` (0 = constant).
double LearningRate(const plan::OptimizerDesc& opt, int64_t step, int64_t total_steps);

class SectionRunner {
 public:
  // Builds section `section` of `plan`. Initial weights: loaded from
  // section.init_from (a .mckpt or a run directory) when set, else from the
  // model's Hugging Face `weights` folder when set (this TP rank's slice
  // only, converted to the model's dtype), else from SectionSeed.
  static StatusOr<std::unique_ptr<SectionRunner>> Create(const plan::Plan& plan, int section,
                                                         const RunnerOptions& options = {});
  ~SectionRunner();

  int section() const { return section_; }
  const plan::SectionPlan& section_plan() const;
  // True when the section (a fused one: any of its components) trains.
  bool trains() const;
  // A fused section (plan::SectionPlan::components): its components'
  // runners, built on plan::ExpandFusedSections(plan), in the order Forward
  // runs them (topological); empty for a section of one component.
  const std::vector<std::unique_ptr<SectionRunner>>& components() const { return components_; }
  // The training runners whose state a checkpoint holds under their own
  // names: a fused section's training components, else this runner when it
  // trains.
  std::vector<SectionRunner*> CheckpointedRunners();
  // True when no edge leaves the section: it computes a loss (train) or
  // nothing useful (forward).
  bool is_sink() const { return out_edges_.empty(); }
  const std::vector<int>& in_edges() const { return in_edges_; }
  const std::vector<int>& out_edges() const { return out_edges_; }

  // The shape of one sample's row on the edges that leave this section:
  // ViT (tokens, width), decoder (T, C), projector (rows, out_dim); the row
  // count of a projector is that of its input.
  std::vector<int64_t> OutputRowShape() const;

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
  };
  // One micro-batch. `data`: its B samples, every one activating this
  // section (a fused section: every sample; each component runs on the
  // samples that activate it, rows pass between components in memory and
  // autograd spans them; the loss is the sum of its sinks' losses). `inputs`: per input edge (plan edge index), the
  // rows of the samples the upstream section processed, in micro-batch order: (n_e, upstream OutputRowShape...). For a
  // training section the caller makes them leaves with requires_grad to read their gradients.
  StatusOr<Output> Forward(const MicroBatchData& data, const std::map<int, torch::Tensor>& inputs);

  // Trainable parameters, in a fixed order (DP all-reduce, clipping).
  std::vector<torch::Tensor> Parameters();
  // Per entry of Parameters(): true when it is this rank's TP slice (its
  // gradient's squares are summed over the TP group for the norm), false
  // when whole on every TP rank.
  std::vector<bool> ParametersShardedOverTp();
  // Per entry of Parameters(): false for the one a gradient norm leaves out
  // (a tied embedding on a pipeline's last stage: the first stage counts it).
  std::vector<bool> ParametersCountedInNorm();
  // Per entry of Parameters(): true for a routed expert's parameter (EP:
  // reduced over the expert-DP group, not DP; IsRoutedExpertParameter).
  std::vector<bool> ParametersOfRoutedExperts();
  // EP, an empty micro-batch (lockstep, runtime/parallel/expert_parallel.h):
  // this rank's part in its MoE layers' exchanges without tokens, forward
  // (returns what BackwardNoTokens takes) and backward.
  std::vector<torch::Tensor> ForwardNoTokens();
  void BackwardNoTokens(const std::vector<torch::Tensor>& outputs);
  // Gives every parameter without a gradient a zero one (a section that saw
  // no sample in a step, an MoE expert no token picked): the optimizer then
  // steps every parameter the same way on every rank and in the reference.
  void EnsureGradients();
  // Clips the (already DP-summed) gradients to optimizer.grad_clip, sets the
  // LR of `step`, steps AdamW and zeroes the gradients. Returns the norm
  // before clipping.
  double OptimizerStep(int64_t step);

  // The weights changed outside OptimizerStep (a ZeRO-1 step gathered new
  // parameters): drops the bf16 casts that mixed precision caches from a
  // step's first forward to its optimizer step.
  void WeightsChanged();

  // Checkpoint state: model and optimizer as torch archives (bytes). With TP,
  // SaveModel() is collective over the TP group and returns the full model.
  StatusOr<std::string> SaveModel();
  StatusOr<std::string> SaveOptimizer();
  Status LoadModel(const std::string& bytes);
  Status LoadOptimizer(const std::string& bytes);

  // REQUIRES: !components().empty() is false (a fused section has one
  // module per component).
  torch::nn::Module& module();
  // True when the model is a TP shard (RunnerOptions::tensor_parallel, size > 1).
  bool Sharded() const;
  // True when the model is one stage of a pipeline (RunnerOptions::pipeline, size > 1).
  bool Staged() const;
  // True when the model keeps only its EP rank's experts (RunnerOptions::expert_parallel, size > 1).
  bool ExpertSharded() const;
  // The CP group size (RunnerOptions::context_parallel), 1 without one.
  int ContextParallelSize() const;
  // A KD student's teacher edge (plan edge index), -1 when none.
  int kd_edge() const;
  // The decoder whose stage activation crosses between pipeline stages as
  // Output::rows: this runner, or a fused section's training decoder
  // component (docs/fused_pipeline.md); null for a fused section without one.
  SectionRunner* PipelinedDecoder();
  // A pipelined fused KD section's forward-only decoder component (its
  // activation travels as Output::teacher_stage_rows), else null.
  SectionRunner* PipelinedTeacher();
  // The tied embedding (V, C) of a staged decoder's first or last stage
  // (both hold it: PipelineGroup::SumTiedGradient), else undefined.
  torch::Tensor TiedEmbedding();

 private:
  SectionRunner() = default;
  static StatusOr<std::unique_ptr<SectionRunner>> CreateFused(const plan::Plan& plan, int section,
                                                              const RunnerOptions& options);
  StatusOr<Output> ForwardFused(const MicroBatchData& data, const std::map<int, torch::Tensor>& inputs);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int section_ = -1;
  std::vector<int> in_edges_, out_edges_;
  // A fused section: the component-level plan its components' runners point
  // into (owned here), and those runners.
  std::shared_ptr<const plan::Plan> expanded_;
  std::vector<std::unique_ptr<SectionRunner>> components_;
};

// Ok when section `s` can run with its plan's cp (1, or a decoder, ViT or
// fused section that is not pipelined); otherwise
// FailedPrecondition naming the section and the fix.
Status CheckContextParallelRuns(const plan::SectionPlan& s);

// The shape of one sample's row on the edges leaving section `section` of
// `plan` (what SectionRunner::OutputRowShape says, from the plan alone): a
// ViT's (K * VitOutputTokens, VitOutputDim) with K = MaxImagesPerSample
// (plan_data.h), a decoder's (seq_len, hidden), a projector's (rows of its
// input, out_dim).
std::vector<int64_t> RowShapeOf(const plan::Plan& plan, int section);

class VitEncoderImpl;  // runtime/models/encoders.h

// A ViT section's micro-batch with 0..max_images images per sample:
// data.images (sum of data.image_counts, C, H, W) are encoded (only the real
// images), and sample b's rows are its images' rows in order, then zeros:
// returns (B, max_images * vit.output_tokens(), vit.output_dim()). Padding
// rows are constants, so they carry no gradient into the ViT.
torch::Tensor VitRows(VitEncoderImpl& vit, const MicroBatchData& data, int64_t max_images, torch::Device device);

// A decoder's input embeddings with an upstream section's image rows spliced
// in. embeds: (B, T, C); ids: (B, T) int64; rows: (n, max_images * P, C) for
// the n samples of the micro-batch that activate `upstream` (in micro-batch
// order; SectionActivates with image_counts[b] > 0), P rows per image. Sample
// b's first image_counts[b] * P rows fill, in order, its positions holding
// image_token_id, which must number exactly that many; its other rows (the
// padding) are not read and get zero gradient. Returns (B, T, C).
torch::Tensor SpliceImageRows(const torch::Tensor& embeds, const torch::Tensor& ids, int64_t image_token_id,
                              const torch::Tensor& rows, const MicroBatchData& data, const plan::SectionPlan& upstream,
                              int64_t max_images);

// The samples at `positions` (indices into data.sample_ids, increasing) of a
// micro-batch, as LoadMicroBatch would have stacked them: input_ids and
// target_ids (n, T), their images (sum of their counts, C, H, W).
MicroBatchData SelectSamples(const MicroBatchData& data, const std::vector<int64_t>& positions);

// Reads the model bytes of `section_name` from `path`: a checkpoint file
// (.mckpt) or a run directory (its last committed checkpoint).
StatusOr<std::string> ReadSectionModelBytes(const std::string& path, const std::string& section_name);

}  // namespace maestro::runtime
