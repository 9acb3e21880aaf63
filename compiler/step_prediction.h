// SPDX-License-Identifier: Apache-2.0
// The seam between the planner and what predicts the step of a chosen plan:
// StepPredictor. The compiler fills it with the scheduler's discrete-event
// simulator (SimulatorStepPredictor, compiler/step_simulation.h);
// AnalyticStepPredictor, here, is the steady-state formula it falls back to
// when a simulation fails.
// May call: base, plan, compiler/assignment.h, compiler/cost_model.h.
// Thread safety: predictors are immutable; Predict is const.
#pragma once

#include <string>

#include "compiler/assignment.h"
#include "compiler/cost_model.h"

namespace maestro::compiler {

struct StepPrediction {
  double step_seconds = 0;  // one global batch, fill and drain included
  double steady_state_seconds = 0;
  double samples_per_second = 0;
  std::string predictor;  // which model produced it
};

class StepPredictor {
 public:
  virtual ~StepPredictor() = default;
  virtual StepPrediction Predict(const CostModel& model, const Workload& work, const Assignment& a) const = 0;
};

// Steady state = the slowest section or edge; plus the pipeline fill: one
// micro-batch of every upstream section on the longest path.
class AnalyticStepPredictor : public StepPredictor {
 public:
  StepPrediction Predict(const CostModel& model, const Workload& work, const Assignment& a) const override;
};

}  // namespace maestro::compiler
