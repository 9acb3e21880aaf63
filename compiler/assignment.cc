// SPDX-License-Identifier: Apache-2.0
#include "compiler/assignment.h"

#include <algorithm>

namespace maestro::compiler {

namespace {

// Does the order `order` of sections on one node group of `gpn` GPUs per node
// keep every TP*CP group of at most gpn ranks, and every section of at most
// gpn GPUs, inside one node?
bool KeepsGroupsInNodes(const std::vector<SectionChoice>& sections, const std::vector<int>& order, int gpn) {
  const auto one_node = [gpn](int first, int count) { return first / gpn == (first + count - 1) / gpn; };
  int offset = 0;
  for (int s : order) {
    const plan::ParallelConfig& c = sections[static_cast<size_t>(s)].cost.config;
    const int gpus = sections[static_cast<size_t>(s)].cost.gpus;
    if (gpus <= gpn && !one_node(offset, gpus)) return false;
    const int mp = c.tp * c.cp;
    if (mp > 1 && mp <= gpn) {
      for (int g = offset; g < offset + gpus; g += mp) {
        if (!one_node(g, mp)) return false;
      }
    }
    offset += gpus;
  }
  return true;
}

}  // namespace

std::vector<NodeGroupChoice> PackNodeGroups(const CostModel& model, const Workload& w,
                                            const std::vector<SectionChoice>& sections) {
  std::vector<NodeGroupChoice> groups;
  std::vector<bool> placed(sections.size(), false);
  const auto own = [&](int s) {
    const int dev = w.sections[static_cast<size_t>(s)].device;
    const DeviceType& d = model.devices()[static_cast<size_t>(dev)];
    const SectionCost& c = sections[static_cast<size_t>(s)].cost;
    NodeGroupChoice g;
    g.device = dev;
    if (d.shared_node) {
      g.nodes = 1;
    } else if (d.packs_nodes) {
      g.nodes = std::max(1, (c.gpus + d.gpus_per_node - 1) / d.gpus_per_node);
    } else {
      g.nodes = std::max(1, c.nodes);
    }
    g.tasks_per_node = (c.gpus + g.nodes - 1) / g.nodes;
    g.sections = {s};
    groups.push_back(std::move(g));
  };
  for (size_t i = 0; i < sections.size(); ++i) {
    if (placed[i]) continue;
    const int dev = w.sections[i].device;
    const DeviceType& d = model.devices()[static_cast<size_t>(dev)];
    placed[i] = true;
    if (!d.packs_nodes) {
      own(static_cast<int>(i));
      continue;
    }
    std::vector<int> order = {static_cast<int>(i)};
    int total = sections[i].cost.gpus;
    for (size_t j = i + 1; j < sections.size(); ++j) {
      if (w.sections[j].device != dev) continue;
      order.push_back(static_cast<int>(j));
      placed[j] = true;
      total += sections[j].cost.gpus;
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      const SectionCost& x = sections[static_cast<size_t>(a)].cost;
      const SectionCost& y = sections[static_cast<size_t>(b)].cost;
      const int mx = x.config.tp * x.config.cp, my = y.config.tp * y.config.cp;
      return mx != my ? mx > my : x.gpus > y.gpus;
    });
    const int gpn = std::max(1, d.gpus_per_node);
    if (!KeepsGroupsInNodes(sections, order, gpn)) {
      for (int s : order) own(s);
      continue;
    }
    NodeGroupChoice g;
    g.device = dev;
    g.nodes = std::max(1, (total + gpn - 1) / gpn);
    g.tasks_per_node = g.nodes > 1 ? gpn : total;
    g.sections = std::move(order);
    groups.push_back(std::move(g));
  }
  return groups;
}

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
    if (!model.devices()[static_cast<size_t>(dev)].packs_nodes) {
      a.nodes_per_device[static_cast<size_t>(dev)] += a.sections[i].cost.nodes;
    }
    a.gpus += a.sections[i].cost.gpus;
  }
  // Where sections share nodes they hold the whole nodes their components fill.
  bool packs = false;
  for (const auto& d : model.devices()) packs = packs || d.packs_nodes;
  if (!packs) return;
  for (const NodeGroupChoice& g : PackNodeGroups(model, w, a.sections)) {
    if (model.devices()[static_cast<size_t>(g.device)].packs_nodes) {
      a.nodes_per_device[static_cast<size_t>(g.device)] += g.nodes;
    }
  }
}

}  // namespace maestro::compiler
