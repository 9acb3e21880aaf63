// SPDX-License-Identifier: Apache-2.0
// SectionRunner::Create: a FusedSectionRunner for a fused section
// (runtime/fused_section.h), else a ModelRunner.
// ModelRunner::Create (runtime/model_runner.h): a section's model built, then
// each parallelism applied to it from outside, one step each, in this order:
// the model (initial weights from the seed or `init_from`), its TP shard, the
// HF `weights` of that shard, its PP stage, context parallelism, expert
// parallelism, recomputation with freezing or the optimizer, and a KD
// student's teacher head. The plan was checked before (plan/runtime_support.h
// CheckPlanRuns): the steps only assert what that check guarantees.
#include <fmt/format.h>

#include "base/checks.h"
#include "base/log.h"
#include "hf/checkpoint.h"
#include "hf/name_map.h"
#include "plan/model_desc.h"
#include "runtime/checkpoint_slices.h"
#include "runtime/checkpointing.h"
#include "runtime/fused_section.h"
#include "runtime/hf_weights.h"
#include "runtime/model_runner.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "runtime/parallel/expert_parallel.h"
#include "runtime/parallel/pipeline_parallel.h"
#include "runtime/parallel/pipeline_stages.h"
#include "runtime/parallel/tensor_parallel.h"
#include "runtime/torch_call.h"

namespace maestro::runtime {

namespace {

bool IsDecoder(const plan::SectionPlan& s) {
  return s.model.kind == plan::ModelKind::kDecoder;
}

// The dtype a section's parameters are held in: fp32 (the master weights of
// mixed precision), bf16 for a forward-only section under bf16.
torch::Dtype ParameterDtype(const plan::SectionPlan& s, const RunnerOptions& options) {
  return s.mode == plan::SectionMode::kForward && options.precision == Precision::kBf16 ? torch::kBFloat16
                                                                                        : torch::kFloat32;
}

// The model of section `s` of `plan` with its initial weights from the seed,
// or from `init_from` unless `skip_init`. HF `weights` are loaded by the
// caller, after tensor-parallel sharding (LoadSectionHfWeights).
StatusOr<std::shared_ptr<torch::nn::Module>> BuildSectionModel(const plan::Plan& plan, const plan::SectionPlan& s,
                                                               const RunnerOptions& options, bool skip_init) {
  ModelBuildOptions build;
  build.seed = SectionSeed(plan.data.seed, s.name);
  build.device = options.device;
  build.dtype = ParameterDtype(s, options);
  MAESTRO_ASSIGN_OR_RETURN(auto module, BuildModel(s.model, build));
  if (!s.init_from.empty() && !skip_init) {
    const std::string from = s.init_section.empty() ? s.name : s.init_section;
    MAESTRO_ASSIGN_OR_RETURN(auto checkpoint, ReadCheckpointAt(s.init_from));
    MAESTRO_RETURN_IF_ERROR(
        LoadWholeModel(checkpoint, from, *module,
                       fmt::format("section '{}': loading section '{}' of '{}' (is it the same model shape?)", s.name,
                                   from, s.init_from)));
  }
  return module;
}

// The section's activation recomputation (its config's granularity) on the
// blocks of its model; a projector has none.
void SetActivationRecompute(torch::nn::Module& module, const plan::SectionPlan& s) {
  const plan::RecomputeGranularity g = s.config.recompute_granularity();
  switch (s.model.kind) {
    case plan::ModelKind::kDecoder: module.as<DecoderLMImpl>()->SetRecompute(g); break;
    case plan::ModelKind::kVit: module.as<VitEncoderImpl>()->SetRecompute(g); break;
    case plan::ModelKind::kAudioEncoder: module.as<AudioEncoderImpl>()->SetRecompute(g); break;
    case plan::ModelKind::kProjector: break;
  }
}

// Section `s`'s model (this TP rank's shard when sharded) from its Hugging
// Face `weights` folder, converted to the dtype of its parameters.
Status LoadSectionHfWeights(const plan::SectionPlan& s, torch::nn::Module& module, int tp_rank, int tp_size) {
  MAESTRO_ASSIGN_OR_RETURN(auto ckpt, hf::HfCheckpoint::Open(s.model.weights));
  const auto params = module.parameters();
  const torch::Dtype dtype = params.empty() ? torch::kFloat32 : params.front().scalar_type();
  Status loaded;
  MAESTRO_RETURN_IF_ERROR(TorchCall(fmt::format("section '{}': loading weights '{}'", s.name, s.model.weights),
                                    [&] { loaded = LoadHfWeights(module, s.model, *ckpt, tp_rank, tp_size, dtype); }));
  if (!loaded.ok()) {
    return Status(loaded.code(), fmt::format("section '{}': weights: {}", s.name, loaded.message()));
  }
  return Status::Ok();
}

// A KD teacher's output head (V, C_teacher), fp32: read alone from its HF
// weights (the rest of the teacher stays in the file), or taken from the
// teacher built as its own section would be (seed or init_from).
StatusOr<torch::Tensor> TeacherHead(const plan::Plan& plan, const plan::SectionPlan& teacher,
                                    const RunnerOptions& options) {
  const bool tied = teacher.model.tie_embeddings;
  if (teacher.init_from.empty() && !teacher.model.weights.empty()) {
    MAESTRO_ASSIGN_OR_RETURN(auto names, hf::ExpandWeightNames(teacher.model));
    const hf::WeightName* head = names.ByMaestroName(tied ? "embed_tokens.weight" : "lm_head.weight");
    if (head == nullptr) {
      return Status::InvalidArgument(fmt::format("teacher '{}': its {} layout has no output head", teacher.name,
                                                 hf::WeightLayoutName(names.layout)));
    }
    MAESTRO_ASSIGN_OR_RETURN(auto ckpt, hf::HfCheckpoint::Open(teacher.model.weights));
    auto tensor = LoadHfTensor(*ckpt, head->hf_name, head->shape, torch::kFloat32);
    if (!tensor.ok()) {
      return Status(tensor.status().code(),
                    fmt::format("teacher '{}' output head: {}", teacher.name, tensor.status().message()));
    }
    return *tensor;
  }
  // Built in fp32 on the CPU (the head is all it keeps; the caller moves it).
  RunnerOptions head_options = options;
  head_options.build_optimizer = false;
  head_options.device = torch::kCPU;
  head_options.precision = Precision::kFp32;
  MAESTRO_ASSIGN_OR_RETURN(auto module, BuildSectionModel(plan, teacher, head_options, /*skip_init=*/false));
  auto* lm = module->as<DecoderLMImpl>();
  return (tied || !lm->lm_head ? lm->embed_tokens->weight : lm->lm_head->weight).detach().clone();
}

}  // namespace

StatusOr<std::unique_ptr<SectionRunner>> SectionRunner::Create(const plan::Plan& plan, int section,
                                                               const RunnerOptions& options) {
  if (section < 0 || section >= static_cast<int>(plan.sections.size())) {
    return Status::InvalidArgument(fmt::format("no section {} in the plan", section));
  }
  if (plan.sections[static_cast<size_t>(section)].fused()) {
    MAESTRO_ASSIGN_OR_RETURN(auto fused, FusedSectionRunner::Create(plan, section, options));
    return std::unique_ptr<SectionRunner>(std::move(fused));
  }
  MAESTRO_ASSIGN_OR_RETURN(auto runner, ModelRunner::Create(plan, section, options));
  return std::unique_ptr<SectionRunner>(std::move(runner));
}

StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(const plan::Plan& plan, int section,
                                                           const RunnerOptions& options) {
  std::unique_ptr<ModelRunner> runner(new ModelRunner(plan, section, options));
  MAESTRO_RETURN_IF_ERROR(
      ValidateModelDesc(runner->section_plan().model, fmt::format("section '{}'", runner->section_plan().name)));
  runner->FindTeacherEdge();
  MAESTRO_RETURN_IF_ERROR(runner->BuildModule());
  MAESTRO_RETURN_IF_ERROR(runner->ApplyTensorParallel());
  MAESTRO_RETURN_IF_ERROR(runner->LoadHfWeights());
  MAESTRO_RETURN_IF_ERROR(runner->ApplyPipelineStage());
  MAESTRO_RETURN_IF_ERROR(runner->ApplyExpertParallel());
  MAESTRO_RETURN_IF_ERROR(runner->ApplyContextParallel());
  runner->ApplyTrainingMode();
  MAESTRO_RETURN_IF_ERROR(runner->LoadTeacherHead());
  return runner;
}

// A KD student's teacher: the input edge from a decoder (plan/runtime_support.h
// CheckSectionWiring allows at most one, into a decoder).
void ModelRunner::FindTeacherEdge() {
  for (int e : in_edges()) {
    const auto& up =
        plan().sections[static_cast<size_t>(plan().section_index(plan().edges[static_cast<size_t>(e)].from))];
    if (IsDecoder(up)) {
      kd_edge_ = e;
      kd_form_ =
          plan::TeacherRowsFormOf(plan().edges[static_cast<size_t>(e)].tensor).value_or(plan::TeacherRowsForm::kHidden);
    }
  }
  teacher_rows_ = plan::TeacherRowsOf(plan(), section());
}

// A resumed training section gets its state from the checkpoint next: it
// skips its initial weights.
bool ModelRunner::SkipsInitialWeights() const {
  return options().resuming && section_plan().mode == plan::SectionMode::kTrain;
}

Status ModelRunner::BuildModule() {
  MAESTRO_ASSIGN_OR_RETURN(module_, BuildSectionModel(plan(), section_plan(), options(), SkipsInitialWeights()));
  return Status::Ok();
}

Status ModelRunner::ApplyTensorParallel() {
  if (!Sharded()) return Status::Ok();
  const auto& s = section_plan();
  Status sharded = ShardModelForTensorParallel(*module_, s.model, options().tensor_parallel);
  if (!sharded.ok()) {
    return Status(sharded.code(), fmt::format("section '{}': {} (set the section's tp in the spec or --pin {}.tp=1)",
                                              s.name, sharded.message(), s.name));
  }
  return Status::Ok();
}

// HF `weights` (unless `init_from` or a resume gives them): this TP rank's
// slice of each tensor, read after the model was sharded.
Status ModelRunner::LoadHfWeights() {
  const auto& s = section_plan();
  if (s.model.weights.empty() || !s.init_from.empty() || SkipsInitialWeights()) return Status::Ok();
  const int tp_rank = Sharded() ? options().tensor_parallel->rank() : 0;
  const int tp_size = Sharded() ? options().tensor_parallel->size() : 1;
  return LoadSectionHfWeights(s, *module_, tp_rank, tp_size);
}

// A decoder's pipeline stage keeps its layers only (the first the
// embeddings, the last the final norm and head).
Status ModelRunner::ApplyPipelineStage() {
  if (!Staged()) return Status::Ok();
  const auto& s = section_plan();
  if (!IsDecoder(s))
    return Status::Internal(
        fmt::format("section '{}': a pipeline stage of a {}", s.name, plan::ModelKindName(s.model.kind)));
  const auto& pp = *options().pipeline;
  const StageLayers layers = LayersOfStage(s.config, s.model.layers, pp.stage());
  Log(LogLevel::kInfo, "section '{}' pipeline stage {} of {}: layers [{}, {}){}", s.name, pp.stage(), pp.stages(),
      layers.first, layers.end, s.config.pp_layers.empty() ? " (the even split)" : " (the plan's pp_layers)");
  return TorchCall(fmt::format("section '{}': pipeline stage {}", s.name, pp.stage()),
                   [&] { module_->as<DecoderLMImpl>()->KeepStage(layers.first, layers.end, pp.first(), pp.last()); });
}

Status ModelRunner::ApplyExpertParallel() {
  if (!ExpertSharded()) return Status::Ok();
  const auto& s = section_plan();
  if (!IsDecoder(s))
    return Status::Internal(
        fmt::format("section '{}': expert parallelism of a {}", s.name, plan::ModelKindName(s.model.kind)));
  Status sharded = ShardDecoderForExpertParallel(*module_->as<DecoderLMImpl>(), options().expert_parallel);
  if (!sharded.ok()) {
    return Status(sharded.code(), fmt::format("section '{}': {} (set its ep to 1 in plan.json, or recompile the spec)",
                                              s.name, sharded.message()));
  }
  return Status::Ok();
}

// A decoder all-gathers K and V over the CP group (docs/context_parallel.md);
// a ViT encodes its chunk of the patches (docs/context_parallel_vit.md).
Status ModelRunner::ApplyContextParallel() {
  if (ContextParallelSize() == 1) return Status::Ok();
  const auto& s = section_plan();
  switch (s.model.kind) {
    case plan::ModelKind::kVit: module_->as<VitEncoderImpl>()->context_parallel = options().context_parallel; break;
    case plan::ModelKind::kDecoder: module_->as<DecoderLMImpl>()->SetContextParallel(options().context_parallel); break;
    default:
      return Status::Internal(
          fmt::format("section '{}': context parallelism of a {}", s.name, plan::ModelKindName(s.model.kind)));
  }
  return Status::Ok();
}

// A training section recomputes as its config says and gets its AdamW
// (unless the caller steps a ZeRO-1 shard); a forward-only one is frozen.
void ModelRunner::ApplyTrainingMode() {
  const auto& s = section_plan();
  if (s.mode == plan::SectionMode::kForward) {
    module_->eval();
    for (auto& p : module_->parameters()) p.set_requires_grad(false);
    return;
  }
  SetActivationRecompute(*module_, s);
  if (!options().build_optimizer) return;
  // Frozen parameters (Whisper's position table) are not optimized.
  const auto& o = s.optimizer;
  optimizer_ = std::make_unique<torch::optim::AdamW>(
      Parameters(), torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).weight_decay(o.weight_decay).eps(1e-8));
}

// Only the last pipeline stage computes the loss: the head lives there. A
// student of top-K or sampled rows holds none (the teacher ran it).
Status ModelRunner::LoadTeacherHead() {
  if (kd_edge_ < 0 || (Staged() && !options().pipeline->last())) return Status::Ok();
  if (!plan::StudentHoldsTeacherHead(kd_form_)) return Status::Ok();
  const auto& teacher =
      plan().sections[static_cast<size_t>(plan().section_index(plan().edges[static_cast<size_t>(kd_edge_)].from))];
  MAESTRO_ASSIGN_OR_RETURN(auto head, TeacherHead(plan(), teacher, options()));
  teacher_head_ = head.to(options().device, torch::kFloat32);
  return Status::Ok();
}

bool ModelRunner::trains() const {
  return section_plan().mode == plan::SectionMode::kTrain;
}

std::vector<SectionRunner*> ModelRunner::CheckpointedRunners() {
  if (trains()) return {this};
  return {};
}

std::vector<int64_t> ModelRunner::OutputRowShape() const {
  return RowShapeOf(plan(), section());
}

}  // namespace maestro::runtime
