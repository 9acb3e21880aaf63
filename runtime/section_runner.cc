// SPDX-License-Identifier: Apache-2.0
#include "runtime/section_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "base/checks.h"
#include "base/log.h"
#include "base/splitmix.h"
#include "datalayer/checkpoint_store.h"
#include "datalayer/sample_index.h"
#include "datasets/demo_data.h"
#include "datasets/sample_source.h"
#include "hf/checkpoint.h"
#include "hf/name_map.h"
#include "plan/loss_chunk.h"
#include "runtime/fused_pipeline.h"
#include "runtime/hf_weights.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "runtime/models/model_desc.h"
#include "runtime/parallel/context_parallel.h"
#include "runtime/parallel/expert_parallel.h"
#include "runtime/parallel/pipeline_parallel.h"
#include "runtime/pipeline.h"
#include "runtime/plan_data.h"
#include "runtime/reference.h"
#include "runtime/torch_call.h"
#include "runtime/torch_compat.h"
#include "runtime/vocab_loss.h"

namespace maestro::runtime {

namespace {

// A fused section's state lives in its components (CheckpointedRunners).
Status FusedStateError(const std::string& name) {
  return Status::Internal(fmt::format(
      "section '{}' is fused: its state is saved and loaded per component (SectionRunner::CheckpointedRunners)", name));
}

bool IsDecoder(const plan::SectionPlan& s) {
  return s.model.kind == plan::ModelKind::kDecoder;
}

}  // namespace

uint64_t SectionSeed(uint64_t run_seed, const std::string& section_name) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a of the name
  for (unsigned char c : section_name) h = (h ^ c) * 1099511628211ULL;
  return SplitMix64(run_seed ^ h);
}

double LearningRate(const plan::OptimizerDesc& opt, int64_t step, int64_t total_steps) {
  if (opt.warmup_steps > 0 && step < opt.warmup_steps) {
    return opt.lr * static_cast<double>(step + 1) / static_cast<double>(opt.warmup_steps);
  }
  if (opt.schedule != "cosine" || total_steps <= 0) return opt.lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - opt.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - opt.warmup_steps) / span);
  const double min_lr = opt.lr / 10.0;
  return min_lr + (opt.lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));
}

StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids,
                                        datasets::Split split) {
  MicroBatchData mb;
  mb.sample_ids = sample_ids;
  const int64_t b = static_cast<int64_t>(sample_ids.size());
  std::vector<int64_t> inputs, targets;
  std::vector<float> pixels;
  int64_t seq_len = -1, images = 0;
  std::vector<int64_t> image_shape;  // (channels, H, W) of the first image
  for (int64_t id : sample_ids) {
    auto sample = samples.Load(split, id);
    if (!sample.ok()) return sample.status();
    if (seq_len < 0) seq_len = static_cast<int64_t>(sample->input_ids.size());
    if (static_cast<int64_t>(sample->input_ids.size()) != seq_len ||
        static_cast<int64_t>(sample->target_ids.size()) != seq_len) {
      return Status::Internal(
          fmt::format("sample {}: {} tokens, the micro-batch has {}", id, sample->input_ids.size(), seq_len));
    }
    inputs.insert(inputs.end(), sample->input_ids.begin(), sample->input_ids.end());
    targets.insert(targets.end(), sample->target_ids.begin(), sample->target_ids.end());
    mb.image_counts.push_back(static_cast<int64_t>(sample->images.size()));
    mb.answer_positions.push_back(sample->answer_position);
    mb.labels.push_back(sample->label);
    for (const auto& image : sample->images) {
      const std::vector<int64_t> shape{image.channels, image.height, image.width};
      if (image_shape.empty()) image_shape = shape;
      if (shape != image_shape || static_cast<int64_t>(image.pixels.size()) != shape[0] * shape[1] * shape[2]) {
        return Status::Internal(fmt::format("sample {}: an image of {}x{}x{} ({} values) in a micro-batch of {}x{}x{}",
                                            id, shape[0], shape[1], shape[2], image.pixels.size(), image_shape[0],
                                            image_shape[1], image_shape[2]));
      }
      pixels.insert(pixels.end(), image.pixels.begin(), image.pixels.end());
      ++images;
    }
  }
  if (b == 0) return mb;
  mb.input_ids = torch::from_blob(inputs.data(), {b, seq_len}, torch::kInt64).clone();
  mb.target_ids = torch::from_blob(targets.data(), {b, seq_len}, torch::kInt64).clone();
  if (images > 0) {
    mb.images =
        torch::from_blob(pixels.data(), {images, image_shape[0], image_shape[1], image_shape[2]}, torch::kFloat32)
            .clone();
  }
  return mb;
}

StatusOr<MicroBatchData> LoadMicroBatch(const datasets::SampleSource& samples, const std::vector<int64_t>& sample_ids) {
  return LoadMicroBatch(samples, sample_ids, datasets::Split::kTrain);
}

StatusOr<std::string> ReadSectionModelBytes(const std::string& path, const std::string& section_name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string dir, file;
  if (fs::is_directory(path, ec)) {
    const std::string index_path = (fs::path(path) / "index.sqlite").string();
    if (!fs::exists(index_path, ec)) {
      return Status::NotFound(
          fmt::format("init '{}': no index.sqlite in this run directory (train that run first, "
                      "e.g. `maestro run` its spec)",
                      path));
    }
    MAESTRO_ASSIGN_OR_RETURN(auto index, datalayer::SampleIndex::Open(index_path));
    MAESTRO_ASSIGN_OR_RETURN(auto commit, index->LastCommit());
    if (commit.checkpoint_step < 0) {
      return Status::NotFound(fmt::format("init '{}': the run has no committed checkpoint yet", path));
    }
    dir = (fs::path(path) / "checkpoints").string();
    file = commit.checkpoint_file;
  } else if (fs::is_regular_file(path, ec)) {
    dir = fs::path(path).parent_path().string();
    file = fs::path(path).filename().string();
  } else {
    return Status::NotFound(
        fmt::format("init '{}': no such checkpoint file or run directory (fix [[section]] init in the spec)", path));
  }
  MAESTRO_ASSIGN_OR_RETURN(auto store, datalayer::CheckpointStore::Open(dir, 1000));
  MAESTRO_ASSIGN_OR_RETURN(auto data, store->Read(file));
  auto it = data.sections.find(section_name);
  if (it == data.sections.end()) {
    std::string names;
    for (const auto& [name, state] : data.sections) names += (names.empty() ? "" : ", ") + name;
    return Status::NotFound(fmt::format("init '{}': the checkpoint has no section '{}' (it has: {}); set init_section",
                                        path, section_name, names));
  }
  return it->second.model;
}

namespace {

// Loads an archive (saved from any device) onto the module's device, in
// the module's dtype.
Status LoadModuleBytes(torch::nn::Module& module, const std::string& bytes, const std::string& what) {
  const auto params = module.parameters();
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  const torch::Dtype dtype = params.empty() ? torch::kFloat32 : params.front().scalar_type();
  return TorchCall(what, [&] {
    torch::serialize::InputArchive archive;
    std::istringstream in(bytes);
    archive.load_from(in, device);
    module.load(archive);
    module.to(device, dtype);      // an archive of another dtype replaced the tensors: back to the module's
    compat::ClearAutocastCache();  // casts of the old weights
  });
}

// The dtype a section's parameters are held in: fp32 (the master weights of
// mixed precision), bf16 for a forward-only section under bf16.
torch::Dtype ParameterDtype(const plan::SectionPlan& s, const RunnerOptions& options) {
  return s.mode == plan::SectionMode::kForward && options.precision == Precision::kBf16 ? torch::kBFloat16
                                                                                        : torch::kFloat32;
}

// AdamW's step: one fused kernel over all parameters where this libtorch has
// one for the device (compat::FusedAdamWStep: CUDA on 2.1+, CPU on 2.4+),
// else torch::optim::AdamW's per-parameter loop; the same state either way.
void StepAdamW(torch::optim::AdamW& optimizer, const torch::Device& device) {
  if (compat::FusedAdamWAvailable(device)) {
    compat::FusedAdamWStep(optimizer);
  } else {
    optimizer.step();
  }
  compat::ClearAutocastCache();  // the weights changed: drop their cached bf16 casts
}

// Builds the model of section `s` of `plan` with its initial weights from
// the seed, or from `init_from` unless `skip_init`. HF `weights` are loaded
// by the caller, after tensor-parallel sharding (LoadSectionHfWeights).
StatusOr<std::shared_ptr<torch::nn::Module>> BuildSectionModel(const plan::Plan& plan, const plan::SectionPlan& s,
                                                               const RunnerOptions& options, bool skip_init) {
  ModelBuildOptions build;
  build.seed = SectionSeed(plan.data.seed, s.name);
  build.device = options.device;
  build.dtype = ParameterDtype(s, options);
  MAESTRO_ASSIGN_OR_RETURN(auto module, BuildModel(s.model, build));
  if (!s.init_from.empty() && !skip_init) {
    const std::string from = s.init_section.empty() ? s.name : s.init_section;
    MAESTRO_ASSIGN_OR_RETURN(auto bytes, ReadSectionModelBytes(s.init_from, from));
    MAESTRO_RETURN_IF_ERROR(
        LoadModuleBytes(*module, bytes,
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

// The unsharded twin of a TP-sharded decoder: same desc, for moving full
// weights in and out.
StatusOr<std::shared_ptr<torch::nn::Module>> UnshardedTwin(const plan::SectionPlan& s) {
  ModelBuildOptions build;
  build.seed = 0;
  return BuildModel(s.model, build);
}

struct SectionRunner::Impl {
  const plan::Plan* plan = nullptr;
  plan::SectionPlan section;
  RunnerOptions options;
  std::shared_ptr<torch::nn::Module> module;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  // KD student: the teacher's output head (V, C_teacher), frozen.
  torch::Tensor teacher_head;
  int kd_edge = -1;
};

SectionRunner::~SectionRunner() = default;

const plan::SectionPlan& SectionRunner::section_plan() const {
  return impl_->section;
}
bool SectionRunner::trains() const {
  if (!components_.empty()) {
    return std::any_of(components_.begin(), components_.end(), [](const auto& c) { return c->trains(); });
  }
  return impl_->section.mode == plan::SectionMode::kTrain;
}

std::vector<SectionRunner*> SectionRunner::CheckpointedRunners() {
  std::vector<SectionRunner*> out;
  if (components_.empty()) {
    if (trains()) out.push_back(this);
    return out;
  }
  for (auto& c : components_) {
    if (c->trains()) out.push_back(c.get());
  }
  return out;
}

StatusOr<std::unique_ptr<SectionRunner>> SectionRunner::CreateFused(const plan::Plan& plan, int section,
                                                                    const RunnerOptions& options) {
  std::unique_ptr<SectionRunner> runner(new SectionRunner());
  runner->section_ = section;
  runner->impl_ = std::make_unique<Impl>();
  runner->impl_->plan = &plan;
  runner->impl_->section = plan.sections[static_cast<size_t>(section)];
  runner->impl_->options = options;
  const auto& fused = runner->impl_->section;
  runner->expanded_ = std::make_shared<const plan::Plan>(plan::ExpandFusedSections(plan));
  const plan::Plan& expanded = *runner->expanded_;
  // Pipelined (docs/fused_pipeline.md): this stage builds only the
  // components it holds; decoders keep their stage's layers, encoders and
  // projectors run whole on the first stage.
  const bool staged = options.pipeline != nullptr && options.pipeline->stages() > 1;
  if (staged) {
    if (const std::string why = FusedPipelineRefusal(fused); !why.empty()) return Status::FailedPrecondition(why);
  }
  for (int k : FusedComponentOrder(fused)) {
    const auto& component_plan = fused.components[static_cast<size_t>(k)];
    if (staged && !FusedComponentOnStage(component_plan, options.pipeline->stage())) continue;
    const int s = expanded.section_index(component_plan.name);
    // Every component (decoders, encoders, projectors) is split over the
    // section's TP group: rows between components are complete on every TP
    // rank (each model's last row-parallel layer all-reduces them), and so
    // are their gradients (each model's first column-parallel layer does).
    // An encoder or projector the TP size does not divide runs whole on
    // every TP rank instead (the planner's monolithic baseline does the same).
    RunnerOptions component_options = options;
    const auto& model = expanded.sections[static_cast<size_t>(s)].model;
    if (options.tensor_parallel != nullptr && model.kind != plan::ModelKind::kDecoder &&
        !CheckEncoderSplitsOverTp(model, options.tensor_parallel->size()).ok()) {
      component_options.tensor_parallel = nullptr;
    }
    if (model.kind != plan::ModelKind::kDecoder) {
      component_options.pipeline = nullptr;
      // Context parallelism (docs/fused_context_parallel.md): decoders split
      // the sequence over the section's CP group; encoders and projectors
      // run whole on every CP rank (docs/monolithic.md).
      component_options.context_parallel = nullptr;
    }
    auto component = Create(expanded, s, component_options);
    if (!component.ok()) return component.status().WithContext(fmt::format("fused section '{}'", fused.name));
    runner->components_.push_back(std::move(*component));
  }
  return runner;
}

StatusOr<SectionRunner::Output> SectionRunner::ForwardFused(const MicroBatchData& data,
                                                            const std::map<int, torch::Tensor>& stage_inputs) {
  const plan::Plan& expanded = *expanded_;
  Output out;
  // Pipelined: the previous stage's activations enter the decoders (the
  // student's, and a KD teacher's); a non-last stage hands theirs on.
  SectionRunner* const student = PipelinedDecoder();
  SectionRunner* const teacher = PipelinedTeacher();
  const auto stage_input = [&](int key) {
    auto it = stage_inputs.find(key);
    return it == stage_inputs.end() ? torch::Tensor() : it->second;
  };
  // rows[component index in the expanded plan][sample id] = its output row.
  std::map<int, std::map<int64_t, torch::Tensor>> rows;
  for (auto& component : components_) {
    const auto& sp = component->section_plan();
    std::vector<int64_t> positions;
    for (size_t b = 0; b < data.sample_ids.size(); ++b) {
      if (SectionActivates(sp, data.image_counts[b] > 0)) positions.push_back(static_cast<int64_t>(b));
    }
    if (positions.empty()) continue;
    MicroBatchData mine = positions.size() == data.sample_ids.size() ? data : SelectSamples(data, positions);
    std::map<int, torch::Tensor> inputs;
    for (int e : component->in_edges()) {
      const int up = expanded.section_index(expanded.edges[static_cast<size_t>(e)].from);
      std::vector<torch::Tensor> in_rows;
      for (int64_t id : mine.sample_ids) {
        auto it = rows[up].find(id);
        if (it != rows[up].end()) in_rows.push_back(it->second);
      }
      if (!in_rows.empty()) inputs[e] = torch::stack(in_rows);
    }
    const bool staged_decoder = component->Staged() && (component.get() == student || component.get() == teacher);
    if (staged_decoder && !component->impl_->options.pipeline->first()) {
      const auto x = stage_input(component.get() == student ? kPipelineInput : kPipelineTeacherInput);
      if (!x.defined()) {
        return Status::Internal(fmt::format("fused section '{}' stage {}: no activation of '{}' from the stage above",
                                            impl_->section.name, component->impl_->options.pipeline->stage(), sp.name));
      }
      inputs[kPipelineInput] = x;
    }
    MAESTRO_ASSIGN_OR_RETURN(auto part, component->Forward(mine, inputs));
    if (staged_decoder && !component->impl_->options.pipeline->last()) {
      if (positions.size() != data.sample_ids.size()) {
        return Status::Internal(
            fmt::format("fused section '{}': pipelined decoder '{}' skipped samples", impl_->section.name, sp.name));
      }
      (component.get() == student ? out.rows : out.teacher_stage_rows) = part.rows;
    }
    if (part.rows.defined()) {
      auto& mine_rows = rows[component->section()];
      for (size_t b = 0; b < mine.sample_ids.size(); ++b) {
        mine_rows[mine.sample_ids[b]] = part.rows[static_cast<int64_t>(b)];
      }
    }
    if (part.loss.defined()) out.loss = out.loss.defined() ? out.loss + part.loss : part.loss;
    out.loss_sum += part.loss_sum;
    out.loss_samples += part.loss_samples;
    out.answers += part.answers;
    out.answers_right += part.answers_right;
  }
  return out;
}
torch::nn::Module& SectionRunner::module() {
  TORCH_CHECK(components_.empty(), "section '", impl_->section.name, "' is fused: each component has its module");
  return *impl_->module;
}

StatusOr<std::unique_ptr<SectionRunner>> SectionRunner::Create(const plan::Plan& plan, int section,
                                                               const RunnerOptions& options) {
  if (section < 0 || section >= static_cast<int>(plan.sections.size())) {
    return Status::InvalidArgument(fmt::format("no section {} in the plan", section));
  }
  // Without a CP group the section runs whole whatever its plan's cp (the
  // reference, evaluation, a fused section's encoders).
  if (options.context_parallel != nullptr) {
    MAESTRO_RETURN_IF_ERROR(CheckContextParallelRuns(plan.sections[static_cast<size_t>(section)]));
  }
  if (plan.sections[static_cast<size_t>(section)].fused()) return CreateFused(plan, section, options);
  std::unique_ptr<SectionRunner> runner(new SectionRunner());
  runner->section_ = section;
  runner->impl_ = std::make_unique<Impl>();
  auto& impl = *runner->impl_;
  impl.plan = &plan;
  impl.section = plan.sections[static_cast<size_t>(section)];
  impl.options = options;
  const auto& s = impl.section;
  MAESTRO_RETURN_IF_ERROR(ValidateModelDesc(s.model, fmt::format("section '{}'", s.name)));
  for (size_t e = 0; e < plan.edges.size(); ++e) {
    if (plan.edges[e].to == s.name) runner->in_edges_.push_back(static_cast<int>(e));
    if (plan.edges[e].from == s.name) runner->out_edges_.push_back(static_cast<int>(e));
  }
  // What the runtime can wire: say it in words rather than fail later.
  for (int e : runner->in_edges_) {
    const auto& up = plan.sections[static_cast<size_t>(plan.section_index(plan.edges[static_cast<size_t>(e)].from))];
    if (s.mode == plan::SectionMode::kTrain || up.mode == plan::SectionMode::kForward) continue;
    return Status::InvalidArgument(fmt::format(
        "edge '{}' -> '{}': a training section feeds a forward-only one, so its gradient has nowhere to come from "
        "(make '{}' train, or '{}' forward-only)",
        up.name, s.name, s.name, up.name));
  }
  for (int e : runner->in_edges_) {
    const auto& up = plan.sections[static_cast<size_t>(plan.section_index(plan.edges[static_cast<size_t>(e)].from))];
    if (IsDecoder(up)) {
      if (!IsDecoder(s)) {
        return Status::InvalidArgument(
            fmt::format("edge '{}' -> '{}': decoder hidden states can only feed a decoder (KD)", up.name, s.name));
      }
      if (impl.kd_edge >= 0) {
        return Status::InvalidArgument(fmt::format("section '{}': more than one teacher edge", s.name));
      }
      impl.kd_edge = e;
    } else if (s.model.kind == plan::ModelKind::kVit || s.model.kind == plan::ModelKind::kAudioEncoder) {
      return Status::InvalidArgument(
          fmt::format("section '{}' ({}) reads its inputs from the data, not from edge '{}' -> '{}'", s.name,
                      plan::ModelKindName(s.model.kind), up.name, s.name));
    }
  }
  if (s.model.kind == plan::ModelKind::kAudioEncoder) {
    return Status::FailedPrecondition(fmt::format(
        "section '{}': the built-in datasets carry no audio yet, so the runtime cannot feed an audio encoder", s.name));
  }
  if (s.loss.kind == "kd" && impl.kd_edge < 0) {
    return Status::InvalidArgument(fmt::format(
        "section '{}': loss kind 'kd' needs an input edge from a forward-only decoder (the teacher)", s.name));
  }
  // The load-balancing loss joins a sink's loss (docs/moe.md); a training MoE
  // section whose hidden states go on has no loss of its own to add it to.
  if (s.mode == plan::SectionMode::kTrain && RouterAuxLossCoef(s.model) > 0 && !runner->out_edges_.empty()) {
    return Status::InvalidArgument(
        fmt::format("section '{}': the MoE load-balancing loss (router_aux_loss_coef = {}) is added to a sink's "
                    "loss, and this section sends its output on; set router_aux_loss_coef = 0 in its model or make "
                    "it the last section",
                    s.name, RouterAuxLossCoef(s.model)));
  }

  if (IsDecoder(s)) {
    MAESTRO_RETURN_IF_ERROR(CheckSequenceLength(s.model, plan.data.seq_len, fmt::format("section '{}'", s.name)));
  }
  // A resumed training section gets its state from the checkpoint next.
  const bool skip_init = options.resuming && s.mode == plan::SectionMode::kTrain;
  MAESTRO_ASSIGN_OR_RETURN(impl.module, BuildSectionModel(plan, s, options, skip_init));
  int tp_rank = 0, tp_size = 1;
  if (options.tensor_parallel != nullptr && options.tensor_parallel->size() > 1) {
    Status sharded = ShardModelForTensorParallel(*impl.module, s.model, options.tensor_parallel);
    if (!sharded.ok()) {
      return Status(sharded.code(), fmt::format("section '{}': {} (set the section's tp in the spec or --pin {}.tp=1)",
                                                s.name, sharded.message(), s.name));
    }
    tp_rank = options.tensor_parallel->rank();
    tp_size = options.tensor_parallel->size();
  }
  if (!s.model.weights.empty() && s.init_from.empty() && !skip_init) {
    MAESTRO_RETURN_IF_ERROR(LoadSectionHfWeights(s, *impl.module, tp_rank, tp_size));
  }
  if (options.pipeline != nullptr && options.pipeline->stages() > 1) {
    if (!IsDecoder(s)) {
      return Status::InvalidArgument(
          fmt::format("section '{}': pipeline parallelism is for decoder sections (set pp = 1)", s.name));
    }
    auto& pp = *options.pipeline;
    if (pp.stages() > s.model.layers) {
      return Status::InvalidArgument(fmt::format("section '{}': pp {} is more than its {} layers (set pp <= {})",
                                                 s.name, pp.stages(), s.model.layers, s.model.layers));
    }
    const StageLayers layers = LayersOfStage(s.config, s.model.layers, pp.stage());
    Log(LogLevel::kInfo, "section '{}' pipeline stage {} of {}: layers [{}, {}){}", s.name, pp.stage(), pp.stages(),
        layers.first, layers.end, s.config.pp_layers.empty() ? " (the even split)" : " (the plan's pp_layers)");
    MAESTRO_RETURN_IF_ERROR(TorchCall(fmt::format("section '{}': pipeline stage {}", s.name, pp.stage()), [&] {
      impl.module->as<DecoderLMImpl>()->KeepStage(layers.first, layers.end, pp.first(), pp.last());
    }));
  }
  if (runner->ContextParallelSize() > 1 && s.model.kind == plan::ModelKind::kVit) {
    impl.module->as<VitEncoderImpl>()->context_parallel = options.context_parallel;  // docs/context_parallel_vit.md
  }
  if (runner->ExpertSharded()) {
    if (!IsDecoder(s)) {
      return Status::InvalidArgument(
          fmt::format("section '{}': expert parallelism is for MoE decoder sections (set ep = 1)", s.name));
    }
    Status sharded = ShardDecoderForExpertParallel(*impl.module->as<DecoderLMImpl>(), options.expert_parallel);
    if (!sharded.ok()) {
      return Status(sharded.code(),
                    fmt::format("section '{}': {} (set its ep to 1 in plan.json, or recompile the spec)", s.name,
                                sharded.message()));
    }
  }
  if (runner->ContextParallelSize() > 1 && s.model.kind != plan::ModelKind::kVit) {
    const int cp = runner->ContextParallelSize();
    if (!IsDecoder(s)) {
      return Status::InvalidArgument(fmt::format(
          "section '{}': the runtime's context parallelism is for decoder sections (plan has cp {}); recompile "
          "with --pin {}.cp=1",
          s.name, cp, s.name));
    }
    if (runner->Staged()) {
      return Status::FailedPrecondition(fmt::format(
          "section '{}': the runtime does not combine context and pipeline parallelism (plan has cp {} x pp {}; "
          "docs/context_parallel.md); recompile with --pin {}.pp=1 or --pin {}.cp=1",
          s.name, cp, options.pipeline->stages(), s.name, s.name));
    }
    if (const std::string error = ContextParallelSplitError(plan.data.seq_len, cp); !error.empty()) {
      return Status::InvalidArgument(
          fmt::format("section '{}': {} (data.seq_len {}); choose a cp with 2*cp dividing "
                      "the sequence, or --pin {}.cp=1",
                      s.name, error, plan.data.seq_len, s.name));
    }
    if (s.mode == plan::SectionMode::kTrain && RouterAuxLossCoef(s.model) > 0) {
      return Status::FailedPrecondition(fmt::format(
          "section '{}': the MoE load-balancing term is a per-sample statistic over all of a sample's tokens, and "
          "context parallelism (cp {}) gives each rank a part of them; set router_aux_loss_coef = 0 or --pin {}.cp=1",
          s.name, cp, s.name));
    }
    if (runner->ExpertSharded()) {
      return Status::FailedPrecondition(fmt::format(
          "section '{}': the runtime does not combine context and expert parallelism (plan has cp {} x ep {}); "
          "recompile with --pin {}.cp=1",
          s.name, cp, s.config.ep, s.name));
    }
    impl.module->as<DecoderLMImpl>()->SetContextParallel(options.context_parallel);
  }
  if (s.mode == plan::SectionMode::kTrain) SetActivationRecompute(*impl.module, s);
  if (s.mode == plan::SectionMode::kForward) {
    impl.module->eval();
    for (auto& p : impl.module->parameters()) p.set_requires_grad(false);
  } else if (options.build_optimizer) {
    // Frozen parameters (Whisper's position table) are not optimized.
    const auto& o = s.optimizer;
    impl.optimizer = std::make_unique<torch::optim::AdamW>(
        runner->Parameters(),
        torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).weight_decay(o.weight_decay).eps(1e-8));
  }
  if (impl.kd_edge >= 0) {
    const auto& teacher =
        plan.sections[static_cast<size_t>(plan.section_index(plan.edges[static_cast<size_t>(impl.kd_edge)].from))];
    if (teacher.model.vocab != s.model.vocab) {
      return Status::InvalidArgument(fmt::format("KD edge '{}' -> '{}': teacher vocab {} != student vocab {}",
                                                 teacher.name, s.name, teacher.model.vocab, s.model.vocab));
    }
    // Only the last pipeline stage computes the loss: the head lives there.
    if (!runner->Staged() || impl.options.pipeline->last()) {
      MAESTRO_ASSIGN_OR_RETURN(auto head, TeacherHead(plan, teacher, options));
      impl.teacher_head = head.to(options.device, torch::kFloat32);
    }
  }
  return runner;
}

Status CheckContextParallelRuns(const plan::SectionPlan& s) {
  if (s.config.cp == 1) return Status::Ok();
  if (s.fused()) {
    // docs/fused_context_parallel.md: decoder CP inside, encoders whole on
    // every CP rank; not with PP (compiler/compile.cc FusedPlanBlocker states
    // the same rule for the planner). Each component is checked as it is
    // built (SectionRunner::Create: the sequence split, MoE, EP).
    if (s.config.pp > 1) {
      return Status::FailedPrecondition(fmt::format(
          "fused section '{}': the runtime does not combine context and pipeline parallelism (plan has cp {} x pp "
          "{}; docs/fused_context_parallel.md); recompile with --grouping sectioned",
          s.name, s.config.cp, s.config.pp));
    }
    return Status::Ok();
  }
  if (s.model.kind != plan::ModelKind::kVit && s.model.kind != plan::ModelKind::kDecoder) {
    return Status::FailedPrecondition(fmt::format(
        "section '{}': the runtime runs context parallelism for decoder and ViT sections (the {} has cp {}); "
        "recompile with --pin {}.cp=1 or let the planner choose",
        s.name, plan::ModelKindName(s.model.kind), s.config.cp, s.name));
  }
  if (s.config.pp > 1) {
    return Status::FailedPrecondition(fmt::format(
        "section '{}': the runtime does not combine context and pipeline parallelism (plan has cp {} x pp {}; "
        "docs/context_parallel.md); recompile with --pin {}.pp=1 or --pin {}.cp=1",
        s.name, s.config.cp, s.config.pp, s.name, s.name));
  }
  return Status::Ok();
}

std::vector<int64_t> RowShapeOf(const plan::Plan& plan, int section) {
  const auto& s = plan.sections[static_cast<size_t>(section)];
  switch (s.model.kind) {
    case plan::ModelKind::kDecoder: return {plan.data.seq_len, s.model.hidden};
    case plan::ModelKind::kVit:
      // K images' rows per sample, zero past the sample's own (Forward).
      return {MaxImagesPerSample(plan) * VitOutputTokens(s.model), VitOutputDim(s.model)};
    case plan::ModelKind::kProjector: {
      // As many rows as its input carries.
      for (size_t e = 0; e < plan.edges.size(); ++e) {
        if (plan.edges[e].to != s.name) continue;
        auto up = RowShapeOf(plan, plan.section_index(plan.edges[e].from));
        return {up.empty() ? 1 : up[0], s.model.out_dim};
      }
      return {1, s.model.out_dim};
    }
    case plan::ModelKind::kAudioEncoder: return {(s.model.audio_frames + 1) / 2, s.model.hidden};
  }
  return {};
}

std::vector<int64_t> SectionRunner::OutputRowShape() const {
  if (!components_.empty()) return {};  // a fused section sends no rows
  return RowShapeOf(*impl_->plan, section_);
}

MicroBatchData SelectSamples(const MicroBatchData& data, const std::vector<int64_t>& positions) {
  MicroBatchData out;
  std::vector<int64_t> image_starts(data.image_counts.size() + 1, 0);
  for (size_t b = 0; b < data.image_counts.size(); ++b) image_starts[b + 1] = image_starts[b] + data.image_counts[b];
  std::vector<torch::Tensor> images;
  for (int64_t p : positions) {
    const auto b = static_cast<size_t>(p);
    out.sample_ids.push_back(data.sample_ids[b]);
    out.image_counts.push_back(data.image_counts[b]);
    out.answer_positions.push_back(data.answer_positions[b]);
    out.labels.push_back(data.labels[b]);
    if (data.image_counts[b] > 0) images.push_back(data.images.narrow(0, image_starts[b], data.image_counts[b]));
  }
  if (positions.empty()) return out;
  auto index = torch::tensor(positions, torch::kInt64);
  if (data.input_ids.defined()) out.input_ids = data.input_ids.index_select(0, index);
  if (data.target_ids.defined()) out.target_ids = data.target_ids.index_select(0, index);
  if (!images.empty()) out.images = images.size() == 1 ? images[0] : torch::cat(images, 0);
  return out;
}

namespace {

// The argmax token at position `pos` of sample `b`: from `logits` (B, T, V)
// when the loss kept them, else the head on that one row of `hidden`
// (B, T, C), without grad (a chunked loss keeps no logits).
int64_t AnswerToken(DecoderLMImpl* lm, const torch::Tensor& hidden, const torch::Tensor& logits, int64_t b,
                    int64_t pos) {
  if (logits.defined()) return logits[b][pos].argmax().item<int64_t>();
  torch::NoGradGuard no_grad;
  return lm->Logits(hidden[b][pos]).argmax().item<int64_t>();
}

}  // namespace

torch::Tensor VitRows(VitEncoderImpl& vit, const MicroBatchData& data, int64_t max_images, torch::Device device) {
  const int64_t b = static_cast<int64_t>(data.sample_ids.size());
  TORCH_CHECK(static_cast<int64_t>(data.image_counts.size()) == b, "the micro-batch has ", data.image_counts.size(),
              " image counts for ", b, " samples");
  int64_t total = 0;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t count = data.image_counts[static_cast<size_t>(i)];
    TORCH_CHECK(count >= 0 && count <= max_images, "sample ", data.sample_ids[static_cast<size_t>(i)], " carries ",
                count, " images, more than data.max_images_per_sample = ", max_images);
    total += count;
  }
  const int64_t per_image = vit.output_tokens();
  const int64_t width = vit.output_dim();
  torch::Tensor encoded;  // (total, per_image, width)
  if (total > 0) {
    TORCH_CHECK(data.images.defined() && data.images.size(0) == total, "the micro-batch's samples list ", total,
                " images but ", data.images.defined() ? data.images.size(0) : 0, " were loaded");
    encoded = vit.forward(data.images.to(device));
  }
  // Every sample one image and room for one: the rows as the ViT made them.
  if (max_images == 1 && total == b) return encoded;
  auto zeros_options =
      torch::TensorOptions().dtype(encoded.defined() ? encoded.scalar_type() : torch::kFloat32).device(device);
  std::vector<torch::Tensor> rows;  // per sample (max_images * per_image, width)
  int64_t next = 0;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t count = data.image_counts[static_cast<size_t>(i)];
    std::vector<torch::Tensor> parts;
    if (count > 0) parts.push_back(encoded.narrow(0, next, count).reshape({count * per_image, width}));
    if (count < max_images) parts.push_back(torch::zeros({(max_images - count) * per_image, width}, zeros_options));
    next += count;
    rows.push_back(parts.size() == 1 ? parts[0] : torch::cat(parts, 0));
  }
  return torch::stack(rows);
}

torch::Tensor SpliceImageRows(const torch::Tensor& embeds, const torch::Tensor& ids, int64_t image_token_id,
                              const torch::Tensor& rows, const MicroBatchData& data, const plan::SectionPlan& upstream,
                              int64_t max_images) {
  const int64_t b = ids.size(0);
  TORCH_CHECK(image_token_id >= 0, "section '", upstream.name,
              "' sends image rows, but the plan has no image placeholder id (data.image_token_id)");
  TORCH_CHECK(max_images >= 1 && rows.dim() == 3 && rows.size(1) % max_images == 0, "rows of shape ", rows.sizes(),
              " do not hold ", max_images, " images' rows per sample");
  const int64_t per_image = rows.size(1) / max_images;
  auto mask = ids.eq(image_token_id);                           // (B, T)
  const auto slots = mask.sum(1).to(torch::kCPU).contiguous();  // (B)
  const int64_t* slot = slots.data_ptr<int64_t>();
  std::vector<torch::Tensor> pieces;
  int64_t sender = 0;  // index into rows: the samples that activate `upstream`, in micro-batch order
  for (int64_t i = 0; i < b; ++i) {
    const int64_t count = data.image_counts[static_cast<size_t>(i)];
    const int64_t id = data.sample_ids[static_cast<size_t>(i)];
    if (!SectionActivates(upstream, count > 0)) {
      TORCH_CHECK(slot[i] == 0, "sample ", id, " has ", slot[i], " image-token positions but no rows from section '",
                  upstream.name, "'");
      continue;
    }
    TORCH_CHECK(sender < rows.size(0), "section '", upstream.name, "' sent rows of ", rows.size(0),
                " samples; the micro-batch has more that activate it");
    TORCH_CHECK(slot[i] == count * per_image, "sample ", id, " has ", slot[i], " image-token positions (id ",
                image_token_id, ") but ", count, " image(s) x ", per_image, " rows");
    if (count > 0) pieces.push_back(rows[sender].narrow(0, 0, count * per_image));
    ++sender;
  }
  TORCH_CHECK(sender == rows.size(0), "section '", upstream.name, "' sent rows of ", rows.size(0), " samples; ", sender,
              " samples of the micro-batch activate it");
  if (pieces.empty()) return embeds;
  auto spliced = pieces.size() == 1 ? pieces[0] : torch::cat(pieces, 0);  // (slots, C), in the mask's row-major order
  return embeds.masked_scatter(mask.unsqueeze(-1), spliced.to(embeds.scalar_type()));
}

StatusOr<SectionRunner::Output> SectionRunner::Forward(const MicroBatchData& data,
                                                       const std::map<int, torch::Tensor>& inputs) {
  if (!components_.empty()) return ForwardFused(data, inputs);
  auto& impl = *impl_;
  const auto& s = impl.section;
  Output out;
  Status status = TorchCall(fmt::format("section '{}': forward", s.name), [&] {
    std::unique_ptr<torch::NoGradGuard> no_grad;
    if (!trains()) no_grad = std::make_unique<torch::NoGradGuard>();
    const auto device = impl.options.device;
    compat::AutocastGuard autocast(device, impl.options.precision == Precision::kBf16);
    switch (s.model.kind) {
      case plan::ModelKind::kVit: {
        out.rows = VitRows(*impl.module->as<VitEncoderImpl>(), data, MaxImagesPerSample(*impl.plan), device);
        break;
      }
      case plan::ModelKind::kProjector: {
        TORCH_CHECK(inputs.size() == 1, "a projector reads exactly one input edge");
        out.rows = impl.module->as<MlpProjectorImpl>()->forward(inputs.begin()->second.to(device));
        break;
      }
      case plan::ModelKind::kAudioEncoder: TORCH_CHECK(false, "no audio data"); break;
      case plan::ModelKind::kDecoder: {
        auto* lm = impl.module->as<DecoderLMImpl>();
        auto ids = data.input_ids.to(device);
        const int cp = ContextParallelSize();
        const int cp_rank = cp > 1 ? impl.options.context_parallel->group().my_index : 0;
        torch::Tensor teacher_hidden;
        auto kd = impl.kd_edge >= 0 ? inputs.find(impl.kd_edge) : inputs.end();
        if (kd != inputs.end()) teacher_hidden = kd->second.to(device);  // (B, T, C_teacher)
        torch::Tensor hidden;                                            // (B, T, C)
        if (Staged()) {
          // One pipeline stage: the previous stage's activation, or the
          // embeddings on the first; its blocks; the final norm on the last.
          const auto& pp = *impl.options.pipeline;
          const StageLayers layers = LayersOfStage(s.config, s.model.layers, pp.stage());
          torch::Tensor x;
          if (pp.first()) {
            x = lm->Embed(ids);
            for (const auto& [edge, rows] : inputs) {
              if (edge == impl.kd_edge || edge == kPipelineInput) continue;
              const auto& up = impl.plan->sections[static_cast<size_t>(
                  impl.plan->section_index(impl.plan->edges[static_cast<size_t>(edge)].from))];
              x = SpliceImageRows(x, ids, ImageTokenIdOf(*impl.plan), rows.to(device), data, up,
                                  MaxImagesPerSample(*impl.plan));
            }
          } else {
            auto in = inputs.find(kPipelineInput);
            TORCH_CHECK(in != inputs.end(), "pipeline stage ", pp.stage(), " of section '", s.name,
                        "' got no activation from stage ", pp.stage() - 1);
            x = in->second.to(device);
          }
          x = lm->ForwardBlocks(x, layers.first, layers.end);
          if (!pp.last()) {
            out.rows = x;  // to the next stage
            // MoE: this stage's layers' part of the load-balancing term
            // (docs/moe.md), a loss of its own beside the activation.
            const double coef = RouterAuxLossCoef(s.model);
            if (trains() && coef > 0) {
              if (auto balance = lm->RouterBalanceLoss(); balance.defined()) {
                auto per_sample = coef * balance.to(torch::kFloat32);  // (B)
                out.loss = per_sample.sum() / static_cast<double>(impl.plan->data.global_batch);
                out.loss_sum = per_sample.sum().item<double>();
              }
            }
            break;
          }
          hidden = lm->FinalNorm(x);
        } else {
          auto embeds = lm->Embed(ids);  // (B, T, C)
          for (const auto& [edge, rows] : inputs) {
            if (edge == impl.kd_edge) continue;
            const auto& up = impl.plan->sections[static_cast<size_t>(
                impl.plan->section_index(impl.plan->edges[static_cast<size_t>(edge)].from))];
            embeds = SpliceImageRows(embeds, ids, ImageTokenIdOf(*impl.plan), rows.to(device), data, up,
                                     MaxImagesPerSample(*impl.plan));
          }
          // Context parallelism: this rank's part of the sequence (B, T/cp, C).
          if (cp > 1) embeds = SplitSequenceForContextParallel(embeds, 1, cp, cp_rank);
          hidden = lm->ForwardEmbeds(embeds);
        }
        if (!out_edges_.empty()) {
          out.rows = cp > 1 ? GatherWholeSequence(hidden, 1, *impl.options.context_parallel) : hidden;  // (B, T, C)
          break;
        }
        if (!trains()) break;
        if (teacher_hidden.defined()) {
          TORCH_CHECK(impl.teacher_head.defined(), "KD rows without a teacher head");
          if (cp > 1) teacher_hidden = SplitSequenceForContextParallel(teacher_hidden, 1, cp, cp_rank);
        }
        plan::LossDesc loss = s.loss;
        if (loss.kind != "kd") loss.kd_alpha = 0.0;
        auto targets = data.target_ids.to(device);  // (B, T)
        torch::Tensor target_counts;                // context parallelism: each sample's whole count (B)
        if (cp > 1) {
          target_counts = targets.ne(datasets::kIgnoreTarget).to(torch::kFloat32).sum(-1).clamp_min(1.0);
          targets = SplitSequenceForContextParallel(targets, 1, cp, cp_rank);
        }
        torch::Tensor logits;  // (B, T, V) when the loss ran whole; context parallelism: (B, T/cp, V)
        auto per_sample = PerSampleLoss(lm, hidden, targets, teacher_hidden, impl.teacher_head, loss, target_counts,
                                        plan::LossChunkPositions(hidden.size(0), hidden.size(1)), &logits);  // (B)
        // MoE: + router_aux_loss_coef * sample b's load-balancing term (docs/moe.md).
        if (const double coef = RouterAuxLossCoef(s.model); coef > 0) {
          per_sample = per_sample + coef * lm->RouterBalanceLoss().to(per_sample.scalar_type());
        }
        out.loss = per_sample.sum() / static_cast<double>(impl.plan->data.global_batch);
        out.loss_sum = per_sample.sum().item<double>();
        out.loss_samples = cp_rank == 0 ? per_sample.size(0) : 0;  // CP ranks' loss_sum are shares of one
        // Context parallelism: which of this rank's rows holds each position (-1: another rank's).
        std::vector<int64_t> row_of_position;
        if (cp > 1) {
          const auto mine = ContextParallelPositions(data.input_ids.size(1), cp, cp_rank);
          row_of_position.assign(static_cast<size_t>(data.input_ids.size(1)), -1);
          for (int64_t i = 0; i < mine.size(0); ++i) row_of_position[static_cast<size_t>(mine[i].item<int64_t>())] = i;
        }
        // Caption answers: argmax at the answer position vs the label's token
        // (under CP counted by the rank that holds the position).
        for (size_t b = 0; b < data.answer_positions.size(); ++b) {
          int64_t pos = data.answer_positions[b];
          if (pos < 0) continue;
          const int64_t want = data.input_ids[static_cast<int64_t>(b)][pos + 1].item<int64_t>();
          if (cp > 1) pos = row_of_position[static_cast<size_t>(pos)];
          if (pos < 0) continue;
          const int64_t got = AnswerToken(lm, hidden, logits, static_cast<int64_t>(b), pos);
          ++out.answers;
          if (got == want) ++out.answers_right;
        }
        break;
      }
    }
  });
  if (!status.ok()) return status;
  return out;
}

std::vector<torch::Tensor> SectionRunner::Parameters() {
  std::vector<torch::Tensor> params;
  if (!components_.empty()) {
    for (auto& c : components_) {
      auto mine = c->Parameters();
      params.insert(params.end(), mine.begin(), mine.end());
    }
    return params;
  }
  for (auto& p : impl_->module->parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  return params;
}

std::vector<bool> SectionRunner::ParametersShardedOverTp() {
  std::vector<bool> sharded;
  if (!components_.empty()) {
    for (auto& c : components_) {
      auto mine = c->ParametersShardedOverTp();
      sharded.insert(sharded.end(), mine.begin(), mine.end());
    }
    return sharded;
  }
  for (const auto& item : impl_->module->named_parameters()) {
    if (item.value().requires_grad()) sharded.push_back(Sharded() && TensorParallelSplitOf(item.key()).sharded());
  }
  return sharded;
}

std::vector<bool> SectionRunner::ParametersCountedInNorm() {
  std::vector<bool> counted;
  if (!components_.empty()) {
    for (auto& c : components_) {
      auto mine = c->ParametersCountedInNorm();
      counted.insert(counted.end(), mine.begin(), mine.end());
    }
    return counted;
  }
  const bool later_stage = Staged() && !impl_->options.pipeline->first();
  for (const auto& item : impl_->module->named_parameters()) {
    if (item.value().requires_grad()) counted.push_back(!(later_stage && item.key() == "embed_tokens.weight"));
  }
  return counted;
}

std::vector<bool> SectionRunner::ParametersOfRoutedExperts() {
  std::vector<bool> routed;
  if (!components_.empty()) {
    for (auto& c : components_) {
      auto mine = c->ParametersOfRoutedExperts();
      routed.insert(routed.end(), mine.begin(), mine.end());
    }
    return routed;
  }
  for (const auto& item : impl_->module->named_parameters()) {
    if (item.value().requires_grad()) routed.push_back(ExpertSharded() && IsRoutedExpertParameter(item.key()));
  }
  return routed;
}

std::vector<torch::Tensor> SectionRunner::ForwardNoTokens() {
  if (!ExpertSharded()) return {};
  return impl_->module->as<DecoderLMImpl>()->ForwardNoTokens();
}

void SectionRunner::BackwardNoTokens(const std::vector<torch::Tensor>& outputs) {
  DecoderLMImpl::BackwardNoTokens(outputs);
}

void SectionRunner::EnsureGradients() {
  for (auto& c : components_) c->EnsureGradients();
  for (auto& p : Parameters()) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
}

double SectionRunner::OptimizerStep(int64_t step) {
  if (!components_.empty()) {
    // Each component clips and steps on its own, as in the reference.
    double sq = 0.0;
    for (auto& c : components_) {
      if (!c->trains()) continue;
      const double norm = c->OptimizerStep(step);
      sq += norm * norm;
    }
    return std::sqrt(sq);
  }
  auto& impl = *impl_;
  if (!impl.optimizer) return 0.0;
  EnsureGradients();
  auto params = Parameters();
  const double clip = impl.section.optimizer.grad_clip;
  double norm = 0.0;
  {
    torch::NoGradGuard guard;
    // Sharded parameters' squares are summed over the TP group; replicated
    // ones (identical on every TP rank) count once.
    // EP: a routed expert's squares are summed over the EP group first (each
    // EP rank holds other experts).
    double sq_replicated = 0.0;
    auto sq_sharded = torch::zeros({1}, torch::kFloat32);
    double sq_experts[2] = {0.0, 0.0};  // [TP-sharded, replicated] squares of routed experts
    for (const auto& item : impl.module->named_parameters()) {
      if (!item.value().requires_grad()) continue;
      // A tied embedding held by the first and last stages counts once.
      if (Staged() && !impl.options.pipeline->first() && item.key() == "embed_tokens.weight") continue;
      const double sq = item.value().grad().to(torch::kFloat64).pow(2).sum().item<double>();
      if (ExpertSharded() && IsRoutedExpertParameter(item.key())) {
        sq_experts[Sharded() && TensorParallelSplitOf(item.key()).sharded() ? 0 : 1] += sq;
      } else if (Sharded() && TensorParallelSplitOf(item.key()).sharded()) {
        sq_sharded += sq;
      } else {
        sq_replicated += sq;
      }
    }
    if (ExpertSharded()) {
      auto summed = torch::tensor({sq_experts[0], sq_experts[1]}, torch::kFloat32);  // (2)
      impl.options.expert_parallel->AllReduceSum(summed);
      sq_sharded += summed[0].item<double>();
      sq_replicated += summed[1].item<double>();
    }
    if (Sharded()) impl.options.tensor_parallel->AllReduceSum(sq_sharded);
    if (Staged()) {
      std::vector<double> total{sq_replicated + sq_sharded.item<double>()};
      Status summed = impl.options.pipeline->SumOverStages(total);
      TORCH_CHECK(summed.ok(), "section '", impl.section.name,
                  "': gradient norm over the pipeline: ", summed.ToString());
      norm = std::sqrt(total[0]);
    } else {
      norm = std::sqrt(sq_replicated + sq_sharded.item<double>());
    }
    if (clip > 0 && norm > clip) {
      const double scale = clip / (norm + 1e-6);
      for (auto& p : params) p.mutable_grad().mul_(scale);
    }
  }
  const double lr = LearningRate(impl.section.optimizer, step, impl.plan->data.steps);
  for (auto& group : impl.optimizer->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  }
  StepAdamW(*impl.optimizer, impl.options.device);
  impl.optimizer->zero_grad();
  return norm;
}

void SectionRunner::WeightsChanged() {
  compat::ClearAutocastCache();
}

bool SectionRunner::Sharded() const {
  return impl_->options.tensor_parallel != nullptr && impl_->options.tensor_parallel->size() > 1;
}

bool SectionRunner::ExpertSharded() const {
  return impl_ != nullptr && impl_->options.expert_parallel != nullptr && impl_->options.expert_parallel->size() > 1;
}

int SectionRunner::ContextParallelSize() const {
  return impl_ != nullptr && impl_->options.context_parallel != nullptr
             ? impl_->options.context_parallel->group().size()
             : 1;
}

bool SectionRunner::Staged() const {
  return impl_ != nullptr && impl_->options.pipeline != nullptr && impl_->options.pipeline->stages() > 1;
}

int SectionRunner::kd_edge() const {
  return impl_->kd_edge;
}

SectionRunner* SectionRunner::PipelinedDecoder() {
  if (components_.empty()) return this;
  for (auto& c : components_) {
    if (IsDecoder(c->section_plan()) && c->trains()) return c.get();
  }
  return nullptr;
}

SectionRunner* SectionRunner::PipelinedTeacher() {
  for (auto& c : components_) {
    if (IsDecoder(c->section_plan()) && !c->trains() && c->Staged()) return c.get();
  }
  return nullptr;
}

torch::Tensor SectionRunner::TiedEmbedding() {
  if (!components_.empty()) {
    SectionRunner* decoder = PipelinedDecoder();
    return decoder != nullptr ? decoder->TiedEmbedding() : torch::Tensor();
  }
  if (!Staged() || !impl_->section.model.tie_embeddings) return {};
  const auto& pp = *impl_->options.pipeline;
  if (!pp.first() && !pp.last()) return {};
  return impl_->module->as<DecoderLMImpl>()->embed_tokens->weight;
}

StatusOr<std::string> SectionRunner::SaveModel() {
  if (!components_.empty()) return FusedStateError(impl_->section.name);
  std::shared_ptr<torch::nn::Module> full = impl_->module;
  if (Sharded() || Staged() || ExpertSharded()) {
    // Gather: each rank writes its shard into a zero full tensor; the TP sum
    // is its stage's whole, the sum over the stages (each parameter held by
    // one stage; a tied embedding counted on the first) the model's. A routed
    // expert is held by one EP rank: summed over the EP group too.
    auto* tp = Sharded() ? impl_->options.tensor_parallel : nullptr;
    auto* pp = Staged() ? impl_->options.pipeline : nullptr;
    auto* ep = ExpertSharded() ? impl_->options.expert_parallel : nullptr;
    MAESTRO_ASSIGN_OR_RETURN(full, UnshardedTwin(impl_->section));
    auto mine = impl_->module->named_parameters();
    MAESTRO_RETURN_IF_ERROR(TorchCall("gathering the model", [&] {
      torch::NoGradGuard guard;
      for (auto& item : full->named_parameters()) {
        const auto& shard = mine[item.key()];
        const bool held = shard.numel() > 0 && !(pp != nullptr && !pp->first() && item.key() == "embed_tokens.weight");
        const TensorParallelSplit split = tp != nullptr ? TensorParallelSplitOf(item.key()) : TensorParallelSplit{};
        auto whole = torch::zeros_like(item.value());
        if (held && !split.sharded()) {
          whole.copy_(shard.to(whole.device(), whole.scalar_type()));
        } else if (held) {
          PlaceTensorParallelShard(whole, shard, split, tp->rank());
          tp->AllReduceSum(whole);
        }
        if (ep != nullptr && IsRoutedExpertParameter(item.key())) ep->AllReduceSum(whole);
        if (pp != nullptr) pp->SumOverStages(whole);
        item.value().copy_(whole);
      }
    }));
  } else if (!impl_->options.device.is_cpu()) {
    // Checkpoints hold CPU tensors, whatever the device (and load anywhere).
    MAESTRO_ASSIGN_OR_RETURN(full, UnshardedTwin(impl_->section));
    auto mine = impl_->module->named_parameters();
    torch::NoGradGuard guard;
    for (auto& item : full->named_parameters()) item.value().copy_(mine[item.key()]);
  }
  std::string bytes;
  MAESTRO_RETURN_IF_ERROR(TorchCall("saving the model", [&] {
    torch::serialize::OutputArchive archive;
    full->save(archive);
    std::ostringstream os;
    archive.save_to(os);
    bytes = os.str();
  }));
  return bytes;
}

StatusOr<std::string> SectionRunner::SaveOptimizer() {
  if (!components_.empty()) return FusedStateError(impl_->section.name);
  if (!impl_->optimizer) return std::string();
  std::string bytes;
  MAESTRO_RETURN_IF_ERROR(TorchCall("saving the optimizer", [&] {
    torch::serialize::OutputArchive archive;
    impl_->optimizer->save(archive);
    std::ostringstream os;
    archive.save_to(os);
    bytes = os.str();
  }));
  return bytes;
}

Status SectionRunner::LoadModel(const std::string& bytes) {
  if (!components_.empty()) return FusedStateError(impl_->section.name);
  const std::string what = fmt::format("section '{}': loading the model", impl_->section.name);
  if (!Sharded() && !Staged() && !ExpertSharded()) return LoadModuleBytes(*impl_->module, bytes, what);
  // Full weights in, this rank's shard (of its stage's parameters) kept.
  auto* tp = impl_->options.tensor_parallel;
  MAESTRO_ASSIGN_OR_RETURN(auto full, UnshardedTwin(impl_->section));
  MAESTRO_RETURN_IF_ERROR(LoadModuleBytes(*full, bytes, what));
  auto mine = impl_->module->named_parameters();
  return TorchCall(what, [&] {
    torch::NoGradGuard guard;
    for (const auto& item : full->named_parameters()) {
      auto& shard = mine[item.key()];
      if (shard.numel() == 0) continue;  // another stage's, or another EP rank's expert
      const TensorParallelSplit split = Sharded() ? TensorParallelSplitOf(item.key()) : TensorParallelSplit{};
      shard.copy_(split.sharded() ? TensorParallelShardOf(item.value(), split, tp->rank(), tp->size()) : item.value());
    }
    compat::ClearAutocastCache();
  });
}

Status SectionRunner::LoadOptimizer(const std::string& bytes) {
  if (!components_.empty()) return FusedStateError(impl_->section.name);
  if (!impl_->optimizer || bytes.empty()) return Status::Ok();
  return TorchCall(fmt::format("section '{}': loading the optimizer", impl_->section.name), [&] {
    torch::serialize::InputArchive archive;
    std::istringstream in(bytes);
    archive.load_from(in, impl_->options.device);  // moments saved from any device, onto this one
    impl_->optimizer->load(archive);
  });
}

}  // namespace maestro::runtime
