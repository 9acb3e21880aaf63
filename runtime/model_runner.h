// SPDX-License-Identifier: Apache-2.0
// ModelRunner: a SectionRunner (runtime/section_runner.h) of one model — a
// section, or one component of a fused section. Private to the runner's
// files; everyone else holds a SectionRunner.
//
// Its files, one job each:
//   section_build.cc      Create: the model, then TP, the PP stage, CP, EP,
//                         recompute, freezing or the optimizer, the initial
//                         weights (seed, `init_from`, HF `weights`) and a KD
//                         student's teacher head, each a step of its own
//   section_forward.cc    Forward: per model kind (ViT, projector, decoder),
//                         the decoder's stage, sequence split and loss
//   section_optimizer.cc  the parameters' flags, the gradient norm
//                         (runtime/parallel/gradient_norm.h), AdamW and the LR
//   section_state.cc      checkpoint bytes: SaveModel gathers TP, PP and EP
//                         shards into the whole model, LoadModel keeps this
//                         rank's part
// What the runtime runs at all is decided before a runner is built
// (plan/runtime_support.h CheckPlanRuns); what Create still refuses is what
// only building finds out (a checkpoint or HF folder that does not fit).
//
// May call: runtime/models, runtime/parallel, runtime/micro_batch,
// runtime/media_rows, runtime/vocab_loss, runtime/hf_weights, hf, datalayer
// (init_from), plan, base, libtorch. Thread safety: one thread.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "plan/teacher_rows.h"
#include "runtime/section_runner.h"

namespace maestro::runtime {

class ModelRunner final : public SectionRunner {
 public:
  // Section `section` of `plan` (not fused; `plan` must outlive the runner).
  static StatusOr<std::unique_ptr<ModelRunner>> Create(const plan::Plan& plan, int section,
                                                       const RunnerOptions& options);

  bool trains() const override;
  std::vector<SectionRunner*> CheckpointedRunners() override;
  std::vector<int64_t> OutputRowShape() const override;
  StatusOr<Output> Forward(const MicroBatchData& data, const std::map<int, torch::Tensor>& inputs) override;
  std::vector<torch::Tensor> Parameters() override;
  std::vector<bool> ParametersShardedOverTp() override;
  std::vector<bool> ParametersCountedInNorm() override;
  std::vector<bool> ParametersOfRoutedExperts() override;
  std::vector<torch::Tensor> ForwardNoTokens() override;
  double OptimizerStep(int64_t step) override;
  StatusOr<std::string> SaveModel() override;
  StatusOr<std::string> SaveOptimizer() override;
  Status LoadModel(const std::string& bytes) override;
  Status LoadOptimizer(const std::string& bytes) override;
  std::vector<ParameterPlacement> ParameterPlacements() override;
  torch::optim::AdamW* ReplicatedAdamW() override { return optimizer_.get(); }
  torch::nn::Module& module() override { return *module_; }
  int kd_edge() const override { return kd_edge_; }
  torch::Tensor TiedEmbedding() override;

 private:
  ModelRunner(const plan::Plan& plan, int section, const RunnerOptions& options)
      : SectionRunner(plan, section, options) {}

  // section_build.cc: Create's steps, in order.
  void FindTeacherEdge();
  Status BuildModule();
  Status ApplyTensorParallel();
  Status LoadHfWeights();
  Status ApplyPipelineStage();
  Status ApplyExpertParallel();
  Status ApplyContextParallel();
  void ApplyTrainingMode();
  Status LoadTeacherHead();
  bool SkipsInitialWeights() const;

  // section_forward.cc: one forward per model kind. Output::rows of a
  // decoder: its hidden states (B, T, C), or a non-last stage's activation.
  Output ForwardVit(const MicroBatchData& data);
  Output ForwardAudio(const MicroBatchData& data);
  Output ForwardProjector(const std::map<int, torch::Tensor>& inputs);
  Output ForwardDecoder(const MicroBatchData& data, const std::map<int, torch::Tensor>& inputs);
  void AddSinkLoss(const MicroBatchData& data, const torch::Tensor& hidden, const std::map<int, torch::Tensor>& inputs,
                   Output* out);

  // The one rule for a tied embedding held by two pipeline stages: the
  // first stage's `embed_tokens.weight` is the parameter, a later stage's
  // (the last, whose head it is) a copy the norm and the checkpoint skip.
  bool IsTiedCopy(const std::string& parameter_name) const;

  std::shared_ptr<torch::nn::Module> module_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  // KD student: the teacher's output head (V, C_teacher), frozen (hidden
  // rows only), and the form of the rows on kd_edge_.
  torch::Tensor teacher_head_;
  int kd_edge_ = -1;
  plan::TeacherRowsForm kd_form_ = plan::TeacherRowsForm::kHidden;
  // KD teacher: what it sends its student (top-K or sampled rows: its head
  // runs here; plan/teacher_rows.h); nullopt when it sends no KD rows.
  std::optional<plan::TeacherRowsSent> teacher_rows_;
};

// Loads an archive (saved from any device) onto the module's device, in the
// module's dtype (section_state.cc); `what` names it in errors.
Status LoadModuleBytes(torch::nn::Module& module, const std::string& bytes, const std::string& what);
// The module as such an archive (its tensors as they are: CPU ones for a
// checkpoint).
StatusOr<std::string> SaveModuleBytes(torch::nn::Module& module);

}  // namespace maestro::runtime
