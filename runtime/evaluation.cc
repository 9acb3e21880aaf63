// SPDX-License-Identifier: Apache-2.0
#include "runtime/evaluation.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/checks.h"
#include "base/files.h"
#include "datalayer/checkpoint_store.h"
#include "datalayer/sample_index.h"
#include "runtime/checkpointing.h"
#include "runtime/device_staging.h"
#include "runtime/graph_forward.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "runtime/plan_data.h"
#include "runtime/section_runner.h"
#include "runtime/torch_compat.h"

namespace maestro::runtime {

StatusOr<double> EvaluateCaptions(const plan::Plan& given, const std::map<std::string, std::string>& models,
                                  int64_t max_samples, const ComputePlacement& compute) {
  // Fused sections run here as their components (the reference is one process).
  const plan::Plan plan = plan::ExpandFusedSections(given);
  MAESTRO_ASSIGN_OR_RETURN(auto samples, OpenPlanDataset(plan));
  if (!samples->HasCaptionAnswers()) {
    return Status::FailedPrecondition("caption accuracy needs the fashion_mnist_captions dataset");
  }
  std::vector<std::unique_ptr<SectionRunner>> runners;
  UseDevice(compute);
  RunnerOptions runner_options;
  runner_options.build_optimizer = false;
  runner_options.device = TorchDevice(compute);
  runner_options.precision = compute.precision;
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    MAESTRO_ASSIGN_OR_RETURN(auto runner, SectionRunner::Create(plan, static_cast<int>(s), runner_options));
    auto it = models.find(plan.sections[s].name);
    if (it != models.end()) MAESTRO_RETURN_IF_ERROR(runner->LoadModel(it->second));
    runners.push_back(std::move(runner));
  }
  torch::NoGradGuard no_grad;
  const int64_t test = samples->NumSamples(datasets::Split::kTest);
  const int64_t n = max_samples > 0 ? std::min(max_samples, test) : test;
  int64_t answers = 0, right = 0;
  constexpr int64_t kChunk = 500;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    std::vector<int64_t> ids;
    for (int64_t i = begin; i < std::min(n, begin + kChunk); ++i) ids.push_back(i);
    MAESTRO_ASSIGN_OR_RETURN(auto result, GraphForward(plan, runners, *samples, ids, datasets::Split::kTest, kChunk));
    answers += result.answers;
    right += result.answers_right;
  }
  compat::ClearAutocastCache();  // bf16 casts of the evaluated weights
  if (answers == 0) return Status::FailedPrecondition("no caption answers in the test split");
  return static_cast<double>(right) / static_cast<double>(answers);
}

StatusOr<double> EvaluateRunCaptions(const plan::Plan& given, const std::string& run_dir, int64_t max_samples,
                                     const ComputePlacement& compute) {
  // Fused sections run here as their components (the reference is one process).
  const plan::Plan plan = plan::ExpandFusedSections(given);
  std::map<std::string, std::string> models;
  for (const auto& s : plan.sections) {
    if (s.mode != plan::SectionMode::kTrain) continue;
    MAESTRO_ASSIGN_OR_RETURN(models[s.name], ReadSectionModelBytes(run_dir, s.name, s.model));
  }
  return EvaluateCaptions(plan, models, max_samples, compute);
}

StatusOr<int> HeldOutSection(const plan::Plan& given) {
  // Fused sections run here as their components (the reference is one process).
  const plan::Plan plan = plan::ExpandFusedSections(given);
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    const auto& sp = plan.sections[s];
    if (sp.model.kind != plan::ModelKind::kDecoder || sp.mode != plan::SectionMode::kTrain) continue;
    const bool sink =
        std::none_of(plan.edges.begin(), plan.edges.end(), [&](const plan::EdgePlan& e) { return e.from == sp.name; });
    if (sink) return static_cast<int>(s);
  }
  return Status::FailedPrecondition(
      "[data] test_corpus: the plan has no training decoder section that ends the graph, whose held-out loss "
      "could be measured (remove test_corpus, or train a decoder)");
}

bool EvaluatesHeldOut(const plan::Plan& plan) {
  if (!plan.data.test_corpus.empty()) return true;
  return BuiltInDatasetOf(plan) == "text" && HeldOutSection(plan).ok();
}

std::string HeldOutSplitName(const plan::Plan& plan) {
  return plan.data.test_corpus.empty() ? "the demo text's held-out chunks" : plan.data.test_corpus;
}

StatusOr<HeldOutLoss> EvaluateHeldOut(const plan::Plan& given, const std::string& model_bytes, int64_t max_samples,
                                      const ComputePlacement& compute) {
  // Fused sections run here as their components (the reference is one process).
  const plan::Plan plan = plan::ExpandFusedSections(given);
  constexpr int64_t kNoTarget = -100;  // datasets::SampleRecord::target_ids where a position has no loss
  MAESTRO_ASSIGN_OR_RETURN(const int section, HeldOutSection(plan));
  const auto& sp = plan.sections[static_cast<size_t>(section)];
  MAESTRO_ASSIGN_OR_RETURN(auto samples, OpenPlanDataset(plan));
  const int64_t test = samples->NumSamples(datasets::Split::kTest);
  if (test == 0) {
    return Status::FailedPrecondition(
        "held-out loss: the plan's data has no test split (set [data] test_corpus to a held-out corpus)");
  }
  HeldOutLoss result;
  result.section = sp.name;
  result.test_corpus = plan.data.test_corpus;
  result.samples = max_samples > 0 ? std::min(max_samples, test) : test;
  double loss_sum = 0.0;
  try {
    UseDevice(compute);
    const torch::Device device = TorchDevice(compute);
    ModelBuildOptions build;  // the weights are replaced by model_bytes
    build.device = device;
    MAESTRO_ASSIGN_OR_RETURN(auto module, BuildModel(sp.model, build));
    {
      torch::serialize::InputArchive archive;
      std::istringstream in(model_bytes);
      archive.load_from(in, device);
      module->load(archive);
    }
    module->eval();
    auto* lm = module->as<DecoderLMImpl>();
    torch::NoGradGuard no_grad;
    constexpr int64_t kChunk = 16;
    for (int64_t begin = 0; begin < result.samples; begin += kChunk) {
      std::vector<int64_t> ids;
      for (int64_t i = begin; i < std::min(result.samples, begin + kChunk); ++i) ids.push_back(i);
      MAESTRO_ASSIGN_OR_RETURN(auto data, LoadMicroBatch(*samples, ids, datasets::Split::kTest));
      torch::Tensor logits;  // (B, T, V)
      {
        compat::AutocastGuard autocast(device, compute.precision == Precision::kBf16);
        logits = lm->forward(data.input_ids.to(device)).to(torch::kFloat32);
      }
      const auto target_ids = data.target_ids.to(device);                                       // (B, T)
      auto mask = target_ids.ne(kNoTarget);                                                     // (B, T)
      auto targets = target_ids.masked_fill(~mask, 0);                                          // (B, T)
      auto ce = -torch::log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1);  // (B, T)
      auto maskf = mask.to(torch::kFloat32);
      auto per_sample = (ce * maskf).sum(-1) / maskf.sum(-1).clamp_min(1.0);  // (B)
      loss_sum += per_sample.to(torch::kFloat64).sum().item<double>();
    }
    compat::ClearAutocastCache();  // bf16 casts of this model's weights
  } catch (const c10::Error& e) {
    return Status::Internal(fmt::format("held-out loss of section '{}': {}", sp.name, e.what_without_backtrace()));
  }
  result.loss = loss_sum / static_cast<double>(result.samples);
  return result;
}

StatusOr<HeldOutLoss> EvaluateRunHeldOut(const plan::Plan& given, const std::string& run_dir, int64_t max_samples,
                                         const ComputePlacement& compute) {
  // Fused sections run here as their components (the reference is one process).
  const plan::Plan plan = plan::ExpandFusedSections(given);
  MAESTRO_ASSIGN_OR_RETURN(const int section, HeldOutSection(plan));
  const std::string& name = plan.sections[static_cast<size_t>(section)].name;
  MAESTRO_ASSIGN_OR_RETURN(auto index, datalayer::SampleIndex::Open(run_dir + "/index.sqlite"));
  MAESTRO_ASSIGN_OR_RETURN(auto commit, index->LastCommit());
  if (commit.checkpoint_step < 0) {
    return Status::NotFound(fmt::format("held-out loss: run '{}' has no committed checkpoint", run_dir));
  }
  // The last committed checkpoint's model of the section (either format).
  MAESTRO_ASSIGN_OR_RETURN(std::string model,
                           ReadSectionModelBytes(run_dir, name, plan.sections[static_cast<size_t>(section)].model));
  MAESTRO_ASSIGN_OR_RETURN(auto result, EvaluateHeldOut(plan, model, max_samples, compute));
  result.step = commit.checkpoint_step;
  const nlohmann::json eval{{"step", result.step},
                            {"section", result.section},
                            {"loss", result.loss},
                            {"samples", result.samples},
                            {"test_corpus", result.test_corpus}};
  MAESTRO_RETURN_IF_ERROR(WriteFileAtomically(run_dir + "/eval.json", eval.dump(2) + "\n"));
  return result;
}

std::string HeldOutLine(const HeldOutLoss& result) {
  return fmt::format("held-out loss {:.9g} over {} samples (step {})", result.loss, result.samples, result.step);
}

}  // namespace maestro::runtime
