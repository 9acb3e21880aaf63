// SPDX-License-Identifier: Apache-2.0
#include "scheduler/problem.h"

#include <algorithm>
#include <utility>

namespace maestro::scheduler {

LinearCostModel::LinearCostModel(std::vector<SectionSpec> sections, std::vector<SectionCost> section_costs,
                                 std::vector<EdgeSpec> edges, std::vector<EdgeCost> edge_costs)
    : sections_(std::move(sections)),
      costs_(std::move(section_costs)),
      edges_(std::move(edges)),
      edge_costs_(std::move(edge_costs)) {
  costs_.resize(sections_.size());
  edge_costs_.resize(edges_.size());
}

double LinearCostModel::TokensSeen(int section, const Sample& sample) const {
  const SectionSpec& spec = sections_[static_cast<size_t>(section)];
  const SectionCost& c = costs_[static_cast<size_t>(section)];
  if (!c.token_weights.empty()) {
    double t = c.token_weights[0] * static_cast<double>(sample.text_tokens);
    for (int m = 0; m < kMaxModalities && static_cast<size_t>(m + 1) < c.token_weights.size(); ++m) {
      t += c.token_weights[static_cast<size_t>(m + 1)] *
           static_cast<double>(sample.modality_tokens[static_cast<size_t>(m)]);
    }
    return t;
  }
  if (spec.modality >= 0) {
    return static_cast<double>(sample.modality_tokens[static_cast<size_t>(spec.modality)]);
  }
  double t = static_cast<double>(sample.text_tokens);
  for (int m = 0; m < kMaxModalities; ++m) {
    t += static_cast<double>(sample.modality_tokens[static_cast<size_t>(m)]);
  }
  return t;
}

double LinearCostModel::ForwardSeconds(int section, const std::vector<const Sample*>& samples) const {
  const SectionCost& c = costs_[static_cast<size_t>(section)];
  double s = c.fixed_seconds;
  for (const Sample* sample : samples) {
    const double t = TokensSeen(section, *sample);
    s += c.seconds_per_token * t + c.seconds_per_token_sq * t * t;
  }
  return s;
}

double LinearCostModel::BackwardSeconds(int section, const std::vector<const Sample*>& samples) const {
  return costs_[static_cast<size_t>(section)].backward_factor * ForwardSeconds(section, samples);
}

double LinearCostModel::TransferSeconds(int edge, const Sample& sample) const {
  const EdgeCost& c = edge_costs_[static_cast<size_t>(edge)];
  const int from = edges_[static_cast<size_t>(edge)].from;
  return c.seconds_per_sample + c.seconds_per_token * TokensSeen(from, sample);
}

double LinearCostModel::OptimizerSeconds(int section) const {
  return costs_[static_cast<size_t>(section)].optimizer_seconds;
}

DirectedEdges Problem::SectionGraph() const {
  DirectedEdges out;
  out.reserve(edges.size());
  for (const EdgeSpec& e : edges) out.emplace_back(e.from, e.to);
  return out;
}

Status ValidateProblem(const Problem& p) {
  if (!p.costs) return Status::InvalidArgument("scheduler problem: no cost model set (Problem::costs)");
  if (p.sections.empty()) return Status::InvalidArgument("scheduler problem: no sections");
  if (p.sections.size() > static_cast<size_t>(kMaxSections)) {
    return Status::InvalidArgument("scheduler problem: " + std::to_string(p.sections.size()) + " sections; at most " +
                                   std::to_string(kMaxSections) + " are supported");
  }
  if (p.modality_names.size() > static_cast<size_t>(kMaxModalities)) {
    return Status::InvalidArgument("scheduler problem: " + std::to_string(p.modality_names.size()) +
                                   " modalities; at most " + std::to_string(kMaxModalities));
  }
  if (p.shared_cores < 0) {
    return Status::InvalidArgument("scheduler problem: shared_cores (" + std::to_string(p.shared_cores) +
                                   ") must be >= 0 (0: nothing shared)");
  }
  const int n_sections = static_cast<int>(p.sections.size());
  const int n_modalities = static_cast<int>(p.modality_names.size());
  for (const SectionSpec& s : p.sections) {
    if (s.dp < 1 || s.micro_batch < 1) {
      return Status::InvalidArgument("section '" + s.name + "': dp (" + std::to_string(s.dp) + ") and micro_batch (" +
                                     std::to_string(s.micro_batch) + ") must be >= 1");
    }
    if (s.processes < 1) {
      return Status::InvalidArgument("section '" + s.name + "': processes (" + std::to_string(s.processes) +
                                     ") must be >= 1");
    }
    if (s.run_ahead < 0 || (s.run_ahead > 0 && s.trains)) {
      return Status::InvalidArgument("section '" + s.name + "': run_ahead " + std::to_string(s.run_ahead) +
                                     " (only a forward-only section may run ahead, by >= 0 batches)");
    }
    if (s.modality >= n_modalities || s.modality < -1) {
      return Status::InvalidArgument("section '" + s.name + "': modality index " + std::to_string(s.modality) +
                                     " is not one of the " + std::to_string(n_modalities) + " modalities");
    }
  }
  for (size_t e = 0; e < p.edges.size(); ++e) {
    const EdgeSpec& edge = p.edges[e];
    if (edge.from < 0 || edge.from >= n_sections || edge.to < 0 || edge.to >= n_sections || edge.from == edge.to) {
      return Status::InvalidArgument("edge " + std::to_string(e) + ": sections " + std::to_string(edge.from) + " -> " +
                                     std::to_string(edge.to) + " are not two distinct sections");
    }
    const int a = p.sections[static_cast<size_t>(edge.from)].dp;
    const int b = p.sections[static_cast<size_t>(edge.to)].dp;
    if (!plan::EdgeDpRuleHolds(a, b)) {
      return Status::InvalidArgument("edge '" + p.sections[static_cast<size_t>(edge.from)].name + "' -> '" +
                                     p.sections[static_cast<size_t>(edge.to)].name + "': dp " + std::to_string(a) +
                                     " and " + std::to_string(b) + " must be at least 1");
    }
  }
  // Acyclic: a topological order reaches every section.
  if (TopologicalOrder(n_sections, p.SectionGraph()).size() != static_cast<size_t>(n_sections)) {
    return Status::InvalidArgument("scheduler problem: the section graph has a cycle");
  }
  // Unique sample ids.
  std::vector<uint64_t> ids;
  ids.reserve(p.samples.size());
  for (const Sample& s : p.samples) ids.push_back(s.id);
  std::sort(ids.begin(), ids.end());
  const auto dup = std::adjacent_find(ids.begin(), ids.end());
  if (dup != ids.end()) {
    return Status::InvalidArgument("scheduler problem: sample id " + std::to_string(*dup) +
                                   " appears twice in the global batch");
  }
  const uint32_t known = n_modalities >= 32 ? ~0u : ((1u << n_modalities) - 1u);
  for (const Sample& s : p.samples) {
    if ((s.modalities & ~known) != 0) {
      return Status::InvalidArgument("sample " + std::to_string(s.id) + " carries a modality bit beyond the " +
                                     std::to_string(n_modalities) + " known modalities");
    }
  }
  return Status::Ok();
}

std::vector<std::string> ModalityNamesOf(const plan::Plan& plan) {
  std::vector<std::string> names;
  for (const plan::ModalityDesc& m : plan.data.modalities) {
    if (std::find(names.begin(), names.end(), m.name) == names.end()) names.push_back(m.name);
  }
  for (const plan::SectionPlan& s : plan.sections) {
    if (s.activation != "always" && std::find(names.begin(), names.end(), s.activation) == names.end()) {
      names.push_back(s.activation);
    }
  }
  return names;
}

StatusOr<Sample> SampleFromTokens(uint64_t id, const std::map<std::string, int64_t>& tokens,
                                  const std::vector<std::string>& modality_names) {
  Sample s;
  s.id = id;
  for (const auto& [name, count] : tokens) {
    if (count < 0) {
      return Status::InvalidArgument("sample " + std::to_string(id) + ": negative token count for '" + name + "'");
    }
    if (name == "text") {
      s.text_tokens = count;
      continue;
    }
    const auto it = std::find(modality_names.begin(), modality_names.end(), name);
    if (it == modality_names.end() || it - modality_names.begin() >= kMaxModalities) {
      return Status::InvalidArgument("sample " + std::to_string(id) + ": modality '" + name +
                                     "' is not one the plan knows (add it to the spec's data modalities)");
    }
    const int m = static_cast<int>(it - modality_names.begin());
    s.modality_tokens[static_cast<size_t>(m)] = count;
    if (count > 0) s.modalities |= 1u << m;
  }
  return s;
}

StatusOr<Problem> FromPlan(const plan::Plan& plan, std::shared_ptr<const SectionCostModel> costs,
                           std::vector<Sample> samples) {
  Problem p;
  p.modality_names = ModalityNamesOf(plan);
  for (const plan::SectionPlan& s : plan.sections) {
    SectionSpec spec;
    spec.name = s.name;
    spec.trains = s.mode == plan::SectionMode::kTrain;
    spec.dp = s.config.dp;
    spec.micro_batch = s.config.micro_batch;
    spec.processes = std::max(1, s.config.tp * s.config.pp * s.config.cp);
    spec.run_ahead = spec.trains ? 0 : s.run_ahead;
    if (s.activation != "always") {
      spec.modality = static_cast<int>(std::find(p.modality_names.begin(), p.modality_names.end(), s.activation) -
                                       p.modality_names.begin());
    }
    p.sections.push_back(std::move(spec));
  }
  for (const plan::EdgePlan& e : plan.edges) {
    const int from = plan.section_index(e.from);
    const int to = plan.section_index(e.to);
    if (from < 0 || to < 0) {
      return Status::InvalidArgument("plan edge '" + e.from + "' -> '" + e.to +
                                     "' names a section the plan does not have");
    }
    p.edges.push_back(EdgeSpec{from, to});
  }
  p.samples = std::move(samples);
  p.costs = std::move(costs);
  p.shared_cores = std::max(0, plan.shared_cores);
  Status st = ValidateProblem(p);
  if (!st.ok()) return st.WithContext("plan '" + plan.job_name + "'");
  return p;
}

}  // namespace maestro::scheduler
