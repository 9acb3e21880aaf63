// SPDX-License-Identifier: Apache-2.0
#include "runtime/cost_model.h"

#include <algorithm>

#include "plan/model_desc.h"
#include "plan/model_flops.h"
#include "plan/native_vision.h"
#include "runtime/models/parameter_count.h"
#include "runtime/plan_data.h"

namespace maestro::runtime {

namespace {

// The rows of an encoder's planned sample, against which a sample's own
// tokens of its modality are weighed: at native resolution the plan priced
// tokens_per_sample patches, m^2 a row (compiler/workload_builder.cc);
// otherwise tokens_per_sample of input (K items' worth, or a
// [[data.modality.mix]]'s mean sample: compiler/sample_mix.h) at the
// encoder's rows per item; a plan without tokens_per_sample, K items' rows.
double PlannedSampleRows(const plan::Plan& plan, const plan::SectionPlan& s) {
  const bool vit = s.model.kind == plan::ModelKind::kVit;
  if (vit && plan::NativeResolution(plan)) {
    const int64_t m = std::max<int64_t>(1, plan::SpatialMerge(s.model));
    return static_cast<double>(s.tokens_per_sample) / static_cast<double>(m * m);
  }
  const int64_t per_item = vit ? plan::VitSequenceTokens(s.model) : plan::AudioSequenceTokens(s.model);
  const int64_t rows_per_item = vit ? VitOutputTokens(s.model) : plan::AudioSequenceTokens(s.model);
  if (s.tokens_per_sample > 0 && per_item > 0) {
    return static_cast<double>(s.tokens_per_sample) / static_cast<double>(per_item) *
           static_cast<double>(rows_per_item);
  }
  return static_cast<double>((vit ? MaxImagesPerSample(plan) : MaxAudiosPerSample(plan)) * rows_per_item);
}

}  // namespace

PlannedCostModel::PlannedCostModel(const plan::Plan& plan) {
  const auto names = scheduler::ModalityNamesOf(plan);
  for (const auto& s : plan.sections) {
    costs_.push_back(s.cost);
    trains_.push_back(s.mode == plan::SectionMode::kTrain);
    int modality = -1;
    double full = 0.0;
    if (s.model.kind == plan::ModelKind::kVit || s.model.kind == plan::ModelKind::kAudioEncoder) {
      for (size_t m = 0; m < names.size() && m < static_cast<size_t>(scheduler::kMaxModalities); ++m) {
        if (names[m] == s.activation) modality = static_cast<int>(m);
      }
      full = PlannedSampleRows(plan, s);
      if (!(full > 0)) modality = -1;
    }
    scale_modality_.push_back(modality);
    full_tokens_.push_back(full);
  }
  for (const auto& e : plan.edges) edges_.push_back(e.seconds_per_sample);
}

double PlannedCostModel::ForwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const {
  const auto& c = costs_[static_cast<size_t>(section)];
  return trains_[static_cast<size_t>(section)] ? Total(section, samples) * c.forward_share : Total(section, samples);
}

double PlannedCostModel::BackwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const {
  const auto& c = costs_[static_cast<size_t>(section)];
  return trains_[static_cast<size_t>(section)] ? Total(section, samples) * (1.0 - c.forward_share) : 0.0;
}

double PlannedCostModel::TransferSeconds(int edge, const scheduler::Sample& sample) const {
  (void)sample;
  return edges_[static_cast<size_t>(edge)];
}

double PlannedCostModel::OptimizerSeconds(int section) const {
  return costs_[static_cast<size_t>(section)].optimizer_seconds;
}

double PlannedCostModel::Total(int section, const std::vector<const scheduler::Sample*>& samples) const {
  if (samples.empty()) return 0.0;
  const auto& c = costs_[static_cast<size_t>(section)];
  const int modality = scale_modality_[static_cast<size_t>(section)];
  double weight = static_cast<double>(samples.size());
  if (modality >= 0) {
    weight = 0.0;
    for (const scheduler::Sample* sample : samples) {
      weight += static_cast<double>(sample->modality_tokens[static_cast<size_t>(modality)]) /
                full_tokens_[static_cast<size_t>(section)];
    }
  }
  return c.fixed_seconds + weight * c.seconds_per_sample;
}

std::shared_ptr<const scheduler::SectionCostModel> RuntimeCostModel(const plan::Plan& plan) {
  const bool planned = std::all_of(plan.sections.begin(), plan.sections.end(),
                                   [](const plan::SectionPlan& s) { return s.cost.seconds_per_sample > 0; });
  if (planned) return std::make_shared<PlannedCostModel>(plan);
  std::vector<scheduler::SectionSpec> specs;
  std::vector<scheduler::LinearCostModel::SectionCost> costs;
  const auto names = scheduler::ModalityNamesOf(plan);
  for (const auto& s : plan.sections) {
    scheduler::SectionSpec spec;
    spec.name = s.name;
    spec.trains = s.mode == plan::SectionMode::kTrain;
    spec.dp = s.config.dp;
    spec.micro_batch = s.config.micro_batch;
    for (size_t m = 0; m < names.size(); ++m) {
      if (names[m] == s.activation) spec.modality = static_cast<int>(m);
    }
    specs.push_back(spec);
    auto params = ParameterCount(s.model);
    scheduler::LinearCostModel::SectionCost c;
    c.seconds_per_token = 2.0 * static_cast<double>(params.ok() ? *params : 1) * 1e-12;
    c.fixed_seconds = 1e-4;
    c.backward_factor = 2.0;
    costs.push_back(c);
  }
  std::vector<scheduler::EdgeSpec> edges;
  std::vector<scheduler::LinearCostModel::EdgeCost> edge_costs;
  for (const auto& e : plan.edges) {
    edges.push_back({plan.section_index(e.from), plan.section_index(e.to)});
    edge_costs.push_back({1e-5, 0.0});
  }
  return std::make_shared<scheduler::LinearCostModel>(specs, costs, edges, edge_costs);
}

}  // namespace maestro::runtime
