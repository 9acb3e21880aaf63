// SPDX-License-Identifier: Apache-2.0
#include "plan/plan_graph.h"

namespace maestro::plan {

bool SectionActivates(const SectionPlan& s, const SampleMedia& media) {
  if (s.activation == "always" || s.activation.empty()) return true;
  if (s.activation == "image") return media.images > 0;
  return s.activation == "audio" && media.audios > 0;
}

std::vector<int> TopologicalSections(const Plan& plan) {
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

std::vector<int> FusedComponentOrder(const SectionPlan& fused) {
  Plan alone;
  alone.sections = fused.components;
  alone.edges = fused.component_edges;
  return TopologicalSections(alone);
}

}  // namespace maestro::plan
