// SPDX-License-Identifier: Apache-2.0
#include "runtime/fused_section.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/checks.h"
#include "plan/plan_graph.h"
#include "plan/runtime_support.h"
#include "runtime/graph_forward.h"
#include "runtime/models/encoders.h"
#include "runtime/output_spool.h"
#include "runtime/parallel/fused_pipeline.h"
#include "runtime/parallel/pipeline_parallel.h"
#include "runtime/parallel/tensor_parallel.h"

namespace maestro::runtime {

namespace {

bool IsDecoder(const plan::SectionPlan& s) {
  return s.model.kind == plan::ModelKind::kDecoder;
}

// A component's options: every component (decoders, encoders, projectors)
// is split over the section's TP group: rows between components are complete
// on every TP rank (each model's last row-parallel layer all-reduces them),
// and so are their gradients (each model's first column-parallel layer
// does). An encoder or projector the TP size does not divide runs whole on
// every TP rank instead (the planner's monolithic baseline does the same).
// Only decoders are pipelined; context parallelism
// (docs/fused_context_parallel.md): decoders split the sequence over the
// section's CP group, encoders and projectors run whole on every CP rank
// (docs/monolithic.md).
RunnerOptions ComponentOptions(const RunnerOptions& options, const plan::ModelDesc& model) {
  RunnerOptions component = options;
  if (options.tensor_parallel != nullptr && model.kind != plan::ModelKind::kDecoder &&
      !CheckEncoderSplitsOverTp(model, options.tensor_parallel->size()).ok()) {
    component.tensor_parallel = nullptr;
  }
  if (model.kind != plan::ModelKind::kDecoder) {
    component.pipeline = nullptr;
    component.context_parallel = nullptr;
  }
  return component;
}

// The positions in `data` of the samples that activate `section`.
std::vector<int64_t> ActivatingPositions(const plan::SectionPlan& section, const MicroBatchData& data) {
  std::vector<int64_t> positions;
  for (size_t b = 0; b < data.sample_ids.size(); ++b) {
    if (plan::SectionActivates(section, MediaOf(data, b))) positions.push_back(static_cast<int64_t>(b));
  }
  return positions;
}

// `part_rows` (B, row...), one row per sample of `sample_ids`, kept by sample id.
void KeepRows(RowsBySample& rows, const std::vector<int64_t>& sample_ids, const torch::Tensor& part_rows) {
  for (size_t b = 0; b < sample_ids.size(); ++b) rows[sample_ids[b]] = part_rows[static_cast<int64_t>(b)];
}

}  // namespace

StatusOr<std::unique_ptr<FusedSectionRunner>> FusedSectionRunner::Create(const plan::Plan& plan, int section,
                                                                         const RunnerOptions& options) {
  std::unique_ptr<FusedSectionRunner> runner(new FusedSectionRunner(plan, section, options));
  const auto& fused = runner->section_plan();
  runner->expanded_ = std::make_shared<const plan::Plan>(plan::ExpandFusedSections(plan));
  const plan::Plan& expanded = *runner->expanded_;
  // Pipelined (docs/fused_pipeline.md): this stage builds only the
  // components it holds; decoders keep their stage's layers, encoders and
  // projectors run whole on the first stage.
  const bool staged = runner->Staged();
  if (staged) {
    if (const std::string why = plan::FusedPipelineRefusal(fused); !why.empty()) return Status::FailedPrecondition(why);
  }
  for (int k : plan::FusedComponentOrder(fused)) {
    const auto& component_plan = fused.components[static_cast<size_t>(k)];
    if (staged && !FusedComponentOnStage(component_plan, options.pipeline->stage())) continue;
    const int s = expanded.section_index(component_plan.name);
    auto component =
        SectionRunner::Create(expanded, s, ComponentOptions(options, expanded.sections[static_cast<size_t>(s)].model));
    if (!component.ok()) return component.status().WithContext(fmt::format("fused section '{}'", fused.name));
    runner->components_.push_back(std::move(*component));
  }
  return runner;
}

bool FusedSectionRunner::trains() const {
  return std::any_of(components_.begin(), components_.end(), [](const auto& c) { return c->trains(); });
}

std::vector<SectionRunner*> FusedSectionRunner::CheckpointedRunners() {
  std::vector<SectionRunner*> out;
  for (auto& c : components_) {
    if (c->trains()) out.push_back(c.get());
  }
  return out;
}

StatusOr<SectionRunner::Output> FusedSectionRunner::Forward(const MicroBatchData& data,
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
  std::vector<RowsBySample> rows(expanded.sections.size());
  for (auto& component : components_) {
    const auto& sp = component->section_plan();
    const std::vector<int64_t> positions = ActivatingPositions(sp, data);
    if (positions.empty()) continue;
    MicroBatchData mine = positions.size() == data.sample_ids.size() ? data : SelectSamples(data, positions);
    std::map<int, torch::Tensor> inputs = UpstreamRows(expanded, component->in_edges(), rows, mine.sample_ids);
    const bool staged_decoder = component->Staged() && (component.get() == student || component.get() == teacher);
    const PipelineGroup* const pipeline = component->options().pipeline;
    if (staged_decoder && !pipeline->first()) {
      const auto x = stage_input(component.get() == student ? kPipelineInput : kPipelineTeacherInput);
      if (!x.defined()) {
        return Status::Internal(fmt::format("fused section '{}' stage {}: no activation of '{}' from the stage above",
                                            section_plan().name, pipeline->stage(), sp.name));
      }
      inputs[kPipelineInput] = x;
    }
    if (auto spool = spools_.find(component->section()); spool != spools_.end()) {
      MAESTRO_ASSIGN_OR_RETURN(auto part, SpooledForward(*component, *spool->second, mine, rows));
      KeepRows(rows[static_cast<size_t>(component->section())], mine.sample_ids, part.rows);
      continue;
    }
    MAESTRO_ASSIGN_OR_RETURN(auto part, component->Forward(mine, inputs));
    if (staged_decoder && !pipeline->last()) {
      if (positions.size() != data.sample_ids.size()) {
        return Status::Internal(
            fmt::format("fused section '{}': pipelined decoder '{}' skipped samples", section_plan().name, sp.name));
      }
      (component.get() == student ? out.rows : out.teacher_stage_rows) = part.rows;
    }
    if (part.rows.defined()) KeepRows(rows[static_cast<size_t>(component->section())], mine.sample_ids, part.rows);
    out.AddLossAndCounts(part);
  }
  return out;
}

// The positions (ascending, of `count`) that `missing` (this rank's,
// ascending) or any TP peer's lists: a sum of 0/1 masks over the TP group.
std::vector<int64_t> FusedSectionRunner::MissingOnAnyTpPeer(SectionRunner& component,
                                                            const std::vector<int64_t>& missing, size_t count) {
  TensorParallelReducer* tp = component.options().tensor_parallel;
  if (tp == nullptr || tp->size() <= 1) return missing;
  auto mask = torch::zeros({static_cast<int64_t>(count)}, torch::kFloat32);
  for (int64_t b : missing) mask[b] = 1.0F;
  mask = mask.to(component.options().device).contiguous();
  tp->AllReduceSum(mask);
  mask = mask.to(torch::kCPU);
  std::vector<int64_t> any;
  const float* m = mask.data_ptr<float>();
  for (size_t b = 0; b < count; ++b) {
    if (m[b] > 0) any.push_back(static_cast<int64_t>(b));
  }
  return any;
}

// A frozen component with a spool: the rows of `mine`'s samples from the
// spool where it has them; the component runs on the others only (their
// inputs from `rows`), and they are spooled. Output::rows (B, row...) fp32
// on the host, as the spool's codec hands them on.
StatusOr<SectionRunner::Output> FusedSectionRunner::SpooledForward(SectionRunner& component, OutputSpool& spool,
                                                                   const MicroBatchData& mine,
                                                                   const std::vector<RowsBySample>& rows) {
  MAESTRO_ASSIGN_OR_RETURN(auto looked, spool.Lookup(mine.sample_ids, epoch_, component.OutputRowShape()));
  // TP peers run each forward together: all compute the rows any of them
  // lacks (the writer's and its readers' views of the spool agree but for
  // rows of the writer's unsealed file).
  const std::vector<int64_t> to_compute = MissingOnAnyTpPeer(component, looked.missing, mine.sample_ids.size());
  torch::Tensor computed;
  if (!to_compute.empty()) {
    const MicroBatchData sub = to_compute.size() == mine.sample_ids.size() ? mine : SelectSamples(mine, to_compute);
    const auto inputs = UpstreamRows(*expanded_, component.in_edges(), rows, sub.sample_ids);
    MAESTRO_ASSIGN_OR_RETURN(auto part, component.Forward(sub, inputs));
    computed = part.rows;
    if (to_compute.size() != looked.missing.size()) {
      // This rank's missing rows among those computed.
      std::vector<int64_t> at;
      for (int64_t b : looked.missing) {
        at.push_back(std::lower_bound(to_compute.begin(), to_compute.end(), b) - to_compute.begin());
      }
      computed = computed.index_select(0, torch::tensor(at, torch::kLong).to(computed.device()));
    }
  }
  MAESTRO_RETURN_IF_ERROR(spool.Fill(looked, mine.sample_ids, epoch_, computed));
  Output out;
  out.rows = looked.rows;
  return out;
}

StatusOr<int64_t> FusedSectionRunner::FillSpools(const MicroBatchData& data) {
  const plan::Plan& expanded = *expanded_;
  std::vector<RowsBySample> rows(expanded.sections.size());
  int64_t computed = 0;
  for (auto& component : components_) {
    if (component->trains()) continue;
    if (component->Staged()) {
      return Status::FailedPrecondition(
          fmt::format("fused section '{}': the offline spool pass does not run pipelined components (PP {})",
                      section_plan().name, section_plan().config.pp));
    }
    const std::vector<int64_t> positions = ActivatingPositions(component->section_plan(), data);
    if (positions.empty()) continue;
    const MicroBatchData mine = positions.size() == data.sample_ids.size() ? data : SelectSamples(data, positions);
    Output part;
    if (auto spool = spools_.find(component->section()); spool != spools_.end()) {
      const int64_t before = spool->second->computed();
      MAESTRO_ASSIGN_OR_RETURN(part, SpooledForward(*component, *spool->second, mine, rows));
      computed += spool->second->computed() - before;
    } else {
      MAESTRO_ASSIGN_OR_RETURN(
          part, component->Forward(mine, UpstreamRows(expanded, component->in_edges(), rows, mine.sample_ids)));
    }
    if (part.rows.defined()) KeepRows(rows[static_cast<size_t>(component->section())], mine.sample_ids, part.rows);
  }
  return computed;
}

std::vector<torch::Tensor> FusedSectionRunner::Parameters() {
  std::vector<torch::Tensor> params;
  for (auto& c : components_) {
    auto mine = c->Parameters();
    params.insert(params.end(), mine.begin(), mine.end());
  }
  return params;
}

std::vector<bool> FusedSectionRunner::Concatenated(std::vector<bool> (SectionRunner::*flags)()) {
  std::vector<bool> all;
  for (auto& c : components_) {
    auto mine = ((*c).*flags)();
    all.insert(all.end(), mine.begin(), mine.end());
  }
  return all;
}

std::vector<bool> FusedSectionRunner::ParametersShardedOverTp() {
  return Concatenated(&SectionRunner::ParametersShardedOverTp);
}

std::vector<bool> FusedSectionRunner::ParametersCountedInNorm() {
  return Concatenated(&SectionRunner::ParametersCountedInNorm);
}

std::vector<bool> FusedSectionRunner::ParametersOfRoutedExperts() {
  return Concatenated(&SectionRunner::ParametersOfRoutedExperts);
}

double FusedSectionRunner::OptimizerStep(int64_t step) {
  double sq = 0.0;
  for (auto& c : components_) {
    if (!c->trains()) continue;
    const double norm = c->OptimizerStep(step);
    sq += norm * norm;
  }
  return std::sqrt(sq);
}

Status FusedSectionRunner::StateError() const {
  return Status::Internal(fmt::format(
      "section '{}' is fused: its state is saved and loaded per component (SectionRunner::CheckpointedRunners)",
      section_plan().name));
}

SectionRunner* FusedSectionRunner::PipelinedDecoder() {
  for (auto& c : components_) {
    if (IsDecoder(c->section_plan()) && c->trains()) return c.get();
  }
  return nullptr;
}

SectionRunner* FusedSectionRunner::PipelinedTeacher() {
  for (auto& c : components_) {
    if (IsDecoder(c->section_plan()) && !c->trains() && c->Staged()) return c.get();
  }
  return nullptr;
}

torch::Tensor FusedSectionRunner::TiedEmbedding() {
  SectionRunner* decoder = PipelinedDecoder();
  return decoder != nullptr ? decoder->TiedEmbedding() : torch::Tensor();
}

}  // namespace maestro::runtime
