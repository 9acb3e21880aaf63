// SPDX-License-Identifier: Apache-2.0
#include "compiler/assignment.h"

#include <algorithm>

namespace maestro::compiler {

void Summarize(const CostModel& model, const Workload& w, Assignment& a) {
  a.edge_seconds.clear();
  a.bottleneck_seconds = 0;
  for (const auto& sc : a.sections) a.bottleneck_seconds = std::max(a.bottleneck_seconds, sc.cost.step_seconds);
  for (const auto& e : w.edges) {
    const double t = model.EdgeSeconds(e, a.sections[static_cast<size_t>(e.from)].cost.config.dp,
                                       a.sections[static_cast<size_t>(e.to)].cost.config.dp);
    a.edge_seconds.push_back(t);
    a.bottleneck_seconds = std::max(a.bottleneck_seconds, t);
  }
  a.throughput = a.bottleneck_seconds > 0 ? static_cast<double>(model.global_batch()) / a.bottleneck_seconds : 0;
  a.nodes_per_device.assign(model.devices().size(), 0);
  a.gpus = 0;
  for (size_t i = 0; i < a.sections.size(); ++i) {
    const int dev = w.sections[i].device;
    a.nodes_per_device[static_cast<size_t>(dev)] += a.sections[i].cost.nodes;
    a.gpus += a.sections[i].cost.gpus;
  }
}

}  // namespace maestro::compiler
