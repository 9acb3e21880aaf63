// SPDX-License-Identifier: Apache-2.0
#include "runtime/graph_forward.h"

#include <algorithm>

#include "base/checks.h"
#include "plan/plan_graph.h"

namespace maestro::runtime {

std::map<int, torch::Tensor> UpstreamRows(const plan::Plan& plan, const std::vector<int>& in_edges,
                                          const std::vector<RowsBySample>& rows,
                                          const std::vector<int64_t>& sample_ids) {
  std::map<int, torch::Tensor> inputs;
  for (int e : in_edges) {
    const auto& up_rows = rows[static_cast<size_t>(plan.section_index(plan.edges[static_cast<size_t>(e)].from))];
    std::vector<torch::Tensor> in_rows;
    for (int64_t id : sample_ids) {
      auto it = up_rows.find(id);
      if (it != up_rows.end()) in_rows.push_back(it->second);
    }
    if (!in_rows.empty()) inputs[e] = torch::stack(in_rows);
  }
  return inputs;
}

StatusOr<SectionRunner::Output> GraphForward(const plan::Plan& plan,
                                             std::vector<std::unique_ptr<SectionRunner>>& runners,
                                             const datasets::SampleSource& samples, const std::vector<int64_t>& ids,
                                             datasets::Split split, int64_t chunk) {
  std::unordered_map<int64_t, plan::SampleMedia> media;
  for (int64_t id : ids) {
    auto sample = samples.Load(split, id);
    if (!sample.ok()) return sample.status();
    media[id] = {static_cast<int64_t>(sample->images.size()), static_cast<int64_t>(sample->audios.size())};
  }
  // rows[section][sample id] = that sample's output row (with its graph).
  std::vector<RowsBySample> rows(plan.sections.size());
  SectionRunner::Output result;
  for (int s : plan::TopologicalSections(plan)) {
    auto& runner = *runners[static_cast<size_t>(s)];
    const auto& sp = plan.sections[static_cast<size_t>(s)];
    std::vector<int64_t> active;
    for (int64_t id : ids) {
      if (plan::SectionActivates(sp, media[id])) active.push_back(id);
    }
    const int64_t step = chunk > 0 ? chunk : std::max(1, sp.config.micro_batch);
    for (size_t begin = 0; begin < active.size(); begin += static_cast<size_t>(step)) {
      const size_t end = std::min(active.size(), begin + static_cast<size_t>(step));
      std::vector<int64_t> mb(active.begin() + static_cast<std::ptrdiff_t>(begin),
                              active.begin() + static_cast<std::ptrdiff_t>(end));
      MAESTRO_ASSIGN_OR_RETURN(auto data, LoadMicroBatch(samples, mb, split));
      MAESTRO_ASSIGN_OR_RETURN(auto out, runner.Forward(data, UpstreamRows(plan, runner.in_edges(), rows, mb)));
      if (out.rows.defined()) {
        for (size_t b = 0; b < mb.size(); ++b) rows[static_cast<size_t>(s)][mb[b]] = out.rows[static_cast<int64_t>(b)];
      }
      result.AddLossAndCounts(out);
    }
  }
  return result;
}

}  // namespace maestro::runtime
