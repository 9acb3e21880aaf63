// SPDX-License-Identifier: Apache-2.0
#include "runtime/reference.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "base/checks.h"
#include "base/files.h"
#include "datalayer/checkpoint_store.h"
#include "datalayer/sample_index.h"
#include "runtime/checkpointing.h"
#include "runtime/device_staging.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "runtime/plan_data.h"
#include "runtime/section_runner.h"
#include "runtime/torch_compat.h"

namespace maestro::runtime {

std::vector<int> TopologicalSections(const plan::Plan& plan) {
  const int n = static_cast<int>(plan.sections.size());
  std::vector<int> indegree(static_cast<size_t>(n), 0), order;
  for (const auto& e : plan.edges) ++indegree[static_cast<size_t>(plan.section_index(e.to))];
  std::vector<bool> done(static_cast<size_t>(n), false);
  while (static_cast<int>(order.size()) < n) {
    bool progressed = false;
    for (int s = 0; s < n; ++s) {
      if (done[static_cast<size_t>(s)] || indegree[static_cast<size_t>(s)] != 0) continue;
      done[static_cast<size_t>(s)] = true;
      order.push_back(s);
      progressed = true;
      for (const auto& e : plan.edges) {
        if (plan.section_index(e.from) == s) --indegree[static_cast<size_t>(plan.section_index(e.to))];
      }
    }
    if (!progressed) break;  // a cycle: Validate() refuses such plans
  }
  return order;
}

std::vector<int> FusedComponentOrder(const plan::SectionPlan& fused) {
  plan::Plan alone;
  alone.sections = fused.components;
  alone.edges = fused.component_edges;
  return TopologicalSections(alone);
}

bool SectionActivates(const plan::SectionPlan& s, bool has_image) {
  if (s.activation == "always" || s.activation.empty()) return true;
  return s.activation == "image" && has_image;
}

namespace {

struct GraphResult {
  torch::Tensor loss;  // undefined when no sink trains
  double loss_sum = 0.0;
  int64_t loss_samples = 0;
  int64_t answers = 0, answers_right = 0;
};

// Runs every section over `ids` in one process, micro-batch by micro-batch
// (chunk = the section's micro_batch, or `chunk` when > 0), connecting the
// sections' tensors directly so autograd spans the graph.
StatusOr<GraphResult> GraphForward(const plan::Plan& plan, std::vector<std::unique_ptr<SectionRunner>>& runners,
                                   const datasets::SampleSource& samples, const std::vector<int64_t>& ids,
                                   datasets::Split split, int64_t chunk) {
  std::unordered_map<int64_t, bool> has_image;
  for (int64_t id : ids) {
    auto sample = samples.Load(split, id);
    if (!sample.ok()) return sample.status();
    has_image[id] = !sample->images.empty();
  }
  // rows[section][sample id] = that sample's output row (with its graph).
  std::vector<std::unordered_map<int64_t, torch::Tensor>> rows(plan.sections.size());
  GraphResult result;
  for (int s : TopologicalSections(plan)) {
    auto& runner = *runners[static_cast<size_t>(s)];
    const auto& sp = plan.sections[static_cast<size_t>(s)];
    std::vector<int64_t> active;
    for (int64_t id : ids) {
      if (SectionActivates(sp, has_image[id])) active.push_back(id);
    }
    const int64_t step = chunk > 0 ? chunk : std::max(1, sp.config.micro_batch);
    for (size_t begin = 0; begin < active.size(); begin += static_cast<size_t>(step)) {
      const size_t end = std::min(active.size(), begin + static_cast<size_t>(step));
      std::vector<int64_t> mb(active.begin() + static_cast<std::ptrdiff_t>(begin),
                              active.begin() + static_cast<std::ptrdiff_t>(end));
      MAESTRO_ASSIGN_OR_RETURN(auto data, LoadMicroBatch(samples, mb, split));
      std::map<int, torch::Tensor> inputs;
      for (int e : runner.in_edges()) {
        const int up = plan.section_index(plan.edges[static_cast<size_t>(e)].from);
        std::vector<torch::Tensor> in_rows;
        for (int64_t id : mb) {
          auto it = rows[static_cast<size_t>(up)].find(id);
          if (it != rows[static_cast<size_t>(up)].end()) in_rows.push_back(it->second);
        }
        if (!in_rows.empty()) inputs[e] = torch::stack(in_rows);
      }
      MAESTRO_ASSIGN_OR_RETURN(auto out, runner.Forward(data, inputs));
      if (out.rows.defined()) {
        for (size_t b = 0; b < mb.size(); ++b) rows[static_cast<size_t>(s)][mb[b]] = out.rows[static_cast<int64_t>(b)];
      }
      if (out.loss.defined()) result.loss = result.loss.defined() ? result.loss + out.loss : out.loss;
      result.loss_sum += out.loss_sum;
      result.loss_samples += out.loss_samples;
      result.answers += out.answers;
      result.answers_right += out.answers_right;
    }
  }
  return result;
}

}  // namespace

StatusOr<std::vector<StepLoss>> RunReference(const plan::Plan& given, const ReferenceOptions& options) {
  // Fused sections run here as their components (the reference is one process).
  const plan::Plan plan = plan::ExpandFusedSections(given);
  MAESTRO_ASSIGN_OR_RETURN(auto samples, OpenPlanDataset(plan));
  MAESTRO_ASSIGN_OR_RETURN(auto run, OpenPlanRun(plan, *samples, options.run_dir));
  MAESTRO_ASSIGN_OR_RETURN(auto resumed, run->Resume());
  std::vector<std::unique_ptr<SectionRunner>> runners;
  UseDevice(options.compute);
  RunnerOptions runner_options;
  runner_options.resuming = resumed.has_value();
  runner_options.device = TorchDevice(options.compute);
  runner_options.precision = options.compute.precision;
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    MAESTRO_ASSIGN_OR_RETURN(auto runner, SectionRunner::Create(plan, static_cast<int>(s), runner_options));
    if (resumed) {
      const std::string& name = plan.sections[s].name;
      if (resumed->sections.count(name + "#dp1") > 0) {
        return Status::FailedPrecondition(fmt::format(
            "section '{}': the run's checkpoint of step {} holds ZeRO-1 optimizer shards (one per DP rank); the "
            "one-process reference cannot resume it: resume the run with maestro-worker under the plan that wrote it",
            name, resumed->step));
      }
      auto it = resumed->sections.find(name);
      if (it != resumed->sections.end()) {
        MAESTRO_RETURN_IF_ERROR(runner->LoadModel(it->second.model));
        MAESTRO_RETURN_IF_ERROR(runner->LoadOptimizer(it->second.optimizer));
      }
    }
    runners.push_back(std::move(runner));
  }
  std::unique_ptr<std::ofstream> metrics;
  if (!options.metrics_path.empty()) {
    metrics = std::make_unique<std::ofstream>(options.metrics_path, std::ios::app);
    if (!*metrics) return Status::Internal(fmt::format("cannot write {}", options.metrics_path));
  }
  const int64_t steps = options.steps >= 0 ? options.steps : plan.data.steps;
  std::vector<StepLoss> losses;
  while (run->next_step() < steps) {
    const auto step_start = std::chrono::steady_clock::now();
    MAESTRO_ASSIGN_OR_RETURN(auto batch, run->NextBatch());
    MAESTRO_ASSIGN_OR_RETURN(auto result,
                             GraphForward(plan, runners, *samples, batch.sample_ids, datasets::Split::kTrain, 0));
    if (result.loss.defined()) result.loss.backward();
    for (auto& runner : runners) {
      if (runner->trains()) runner->OptimizerStep(batch.step);
    }
    StepLoss loss{batch.step,
                  result.loss_samples > 0 ? result.loss_sum / static_cast<double>(result.loss_samples) : 0.0,
                  result.loss_samples};
    losses.push_back(loss);
    if (metrics) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
      nlohmann::json line{{"step", loss.step},
                          {"loss", loss.loss},
                          {"samples", batch.sample_ids.size()},
                          {"step_seconds", seconds},
                          {"samples_per_s", seconds > 0 ? static_cast<double>(batch.sample_ids.size()) / seconds : 0.0},
                          {"mode", "reference"}};
      if (plan.data.on_bad_sample == "skip") line["skipped_samples"] = samples->SkippedSamples();
      *metrics << line.dump() << "\n" << std::flush;
    }
    MAESTRO_RETURN_IF_ERROR(run->StepDone({batch.step, batch.sample_ids, ""}));
  }
  const bool initial_only = steps == 0 && !resumed;  // --steps 0: the initial weights, for `maestro export`
  if (run->pending_steps() > 0 || initial_only) {
    datalayer::CheckpointData state;
    state.step = run->next_step() - 1;
    for (auto& runner : runners) {
      if (!runner->trains()) continue;
      datalayer::SectionState section_state;
      MAESTRO_ASSIGN_OR_RETURN(section_state.model, runner->SaveModel());
      MAESTRO_ASSIGN_OR_RETURN(section_state.optimizer, runner->SaveOptimizer());
      state.sections[runner->section_plan().name] = std::move(section_state);
    }
    if (initial_only) {
      MAESTRO_RETURN_IF_ERROR(WriteInitialWeightsFile(options.run_dir, std::move(state)));
    } else {
      MAESTRO_RETURN_IF_ERROR(run->Checkpoint(std::move(state)));
    }
  }
  return losses;
}

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
    MAESTRO_ASSIGN_OR_RETURN(models[s.name], ReadSectionModelBytes(run_dir, s.name));
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
  MAESTRO_ASSIGN_OR_RETURN(auto store, datalayer::CheckpointStore::Open(run_dir + "/checkpoints", 1000));
  MAESTRO_ASSIGN_OR_RETURN(auto checkpoint, store->Read(commit.checkpoint_file));
  auto it = checkpoint.sections.find(name);
  if (it == checkpoint.sections.end()) {
    return Status::NotFound(fmt::format("held-out loss: checkpoint '{}/checkpoints/{}' has no section '{}'", run_dir,
                                        commit.checkpoint_file, name));
  }
  MAESTRO_ASSIGN_OR_RETURN(auto result, EvaluateHeldOut(plan, it->second.model, max_samples, compute));
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
