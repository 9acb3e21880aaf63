// SPDX-License-Identifier: Apache-2.0
#include "runtime/parallel/pipeline_stages.h"

#include <algorithm>

namespace maestro::runtime {

StageLayers LayersOfStage(int64_t layers, int stages, int stage) {
  plan::ParallelConfig even;
  even.pp = stages;
  return plan::StageLayerSpan(even, layers, stage);
}

StageLayers LayersOfStage(const plan::ParallelConfig& config, int64_t layers, int stage) {
  return plan::StageLayerSpan(config, layers, stage);
}

std::vector<scheduler::Op> StageOrder(const std::vector<scheduler::Op>& program, int stage, int stages,
                                      bool run_ahead) {
  using scheduler::OpKind;
  std::vector<scheduler::Op> forwards, backwards, rest;
  std::vector<int64_t> forwards_before;   // per backward: the program's forwards before it
  std::vector<int64_t> forward_position;  // per micro-batch: its index among the forwards
  for (const auto& op : program) {
    if (op.kind == OpKind::kForward) {
      if (op.micro_batch >= static_cast<int32_t>(forward_position.size())) {
        forward_position.resize(static_cast<size_t>(op.micro_batch) + 1, -1);
      }
      forward_position[static_cast<size_t>(op.micro_batch)] = static_cast<int64_t>(forwards.size());
      forwards.push_back(op);
    } else if (op.kind == OpKind::kBackward) {
      forwards_before.push_back(static_cast<int64_t>(forwards.size()));
      backwards.push_back(op);
    } else {
      rest.push_back(op);
    }
  }
  const int64_t n = static_cast<int64_t>(forwards.size());
  std::vector<scheduler::Op> out;
  out.reserve(program.size());
  int64_t done = 0;
  for (size_t j = 0; j < backwards.size(); ++j) {
    int64_t need = forwards_before[j];
    const auto mb = static_cast<size_t>(backwards[j].micro_batch);
    if (mb < forward_position.size() && forward_position[mb] >= 0) need = std::max(need, forward_position[mb] + 1);
    if (run_ahead) need = std::max(need, std::min<int64_t>(n, static_cast<int64_t>(j) + stages - stage));
    while (done < need) out.push_back(forwards[static_cast<size_t>(done++)]);
    out.push_back(backwards[j]);
  }
  while (done < n) out.push_back(forwards[static_cast<size_t>(done++)]);
  out.insert(out.end(), rest.begin(), rest.end());  // the optimizer, after every backward
  return out;
}

}  // namespace maestro::runtime
