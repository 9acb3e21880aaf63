// SPDX-License-Identifier: Apache-2.0
#include "runtime/cost_model.h"

#include <algorithm>

#include "runtime/models/model_desc.h"

namespace maestro::runtime {

PlannedCostModel::PlannedCostModel(const plan::Plan& plan) {
  for (const auto& s : plan.sections) {
    costs_.push_back(s.cost);
    trains_.push_back(s.mode == plan::SectionMode::kTrain);
  }
  for (const auto& e : plan.edges) edges_.push_back(e.seconds_per_sample);
}

double PlannedCostModel::ForwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const {
  const auto& c = costs_[static_cast<size_t>(section)];
  return trains_[static_cast<size_t>(section)] ? Total(c, samples.size()) * c.forward_share : Total(c, samples.size());
}

double PlannedCostModel::BackwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const {
  const auto& c = costs_[static_cast<size_t>(section)];
  return trains_[static_cast<size_t>(section)] ? Total(c, samples.size()) * (1.0 - c.forward_share) : 0.0;
}

double PlannedCostModel::TransferSeconds(int edge, const scheduler::Sample& sample) const {
  (void)sample;
  return edges_[static_cast<size_t>(edge)];
}

double PlannedCostModel::OptimizerSeconds(int section) const {
  return costs_[static_cast<size_t>(section)].optimizer_seconds;
}

double PlannedCostModel::Total(const plan::MicroBatchCost& c, size_t n) {
  return n == 0 ? 0.0 : c.fixed_seconds + static_cast<double>(n) * c.seconds_per_sample;
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
