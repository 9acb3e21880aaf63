// SPDX-License-Identifier: Apache-2.0
#include "compiler/step_prediction.h"

#include <algorithm>
#include <vector>

namespace maestro::compiler {

StepPrediction AnalyticStepPredictor::Predict(const CostModel& model, const Workload& w, const Assignment& a) const {
  StepPrediction p;
  p.predictor = "analytic steady state + pipeline fill";
  p.steady_state_seconds = a.bottleneck_seconds;
  // Fill: the first micro-batch must cross every upstream section first.
  const size_t n = w.sections.size();
  std::vector<double> ready(n, 0.0);
  // Sections are few; relax edges n times (a DAG needs at most n - 1 rounds).
  for (size_t round = 0; round < n; ++round) {
    for (const auto& e : w.edges) {
      const auto& up = a.sections[static_cast<size_t>(e.from)].cost;
      const double latency = up.stage_seconds * up.config.pp;
      ready[static_cast<size_t>(e.to)] =
          std::max(ready[static_cast<size_t>(e.to)], ready[static_cast<size_t>(e.from)] + latency);
    }
  }
  double fill = 0;
  for (double r : ready) fill = std::max(fill, r);
  p.step_seconds = p.steady_state_seconds + fill;
  p.samples_per_second = p.step_seconds > 0 ? static_cast<double>(model.global_batch()) / p.step_seconds : 0;
  return p;
}

}  // namespace maestro::compiler
