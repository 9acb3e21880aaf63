// SPDX-License-Identifier: Apache-2.0
#include "compiler/checkpoint_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "compiler/model.h"

namespace maestro::compiler {

namespace {

constexpr double kWeightBytes = 4, kMomentBytes = 8;  // fp32 weights; AdamW's exp_avg and exp_avg_sq

// The bytes the busiest node writes for training component `c` run on the
// ranks of section `s` (c == s unless s is fused).
double NodeBytesOf(const plan::SectionPlan& s, const plan::SectionPlan& c, int gpus_per_node, double* state) {
  const double params = static_cast<double>(ComputeModelFacts(c.model, 0).params);
  *state += params * (kWeightBytes + kMomentBytes);
  const plan::ParallelConfig& k = s.config;
  const int replica_writers = std::max(1, k.tp) * std::max(1, k.pp);
  const bool zero1 = k.zero_stage >= 1 && k.dp * k.cp > 1;
  const int moment_writers = zero1 ? replica_writers * k.dp * k.cp : replica_writers;
  const double weights = params * kWeightBytes / replica_writers * std::min(gpus_per_node, replica_writers);
  const double moments = params * kMomentBytes / moment_writers * std::min(gpus_per_node, moment_writers);
  return weights + moments;
}

}  // namespace

CheckpointCost PredictCheckpoint(const Spec& spec, const plan::Plan& plan) {
  CheckpointCost out;
  out.write_bytes_per_s = spec.cluster.checkpoint_write_gbps * 1e9;
  const int gpus_per_node = std::max(1, spec.cluster.gpus_per_node);
  double busiest = 0, shared = 0;
  for (const plan::SectionPlan& s : plan.sections) {
    double node = 0;
    if (s.fused()) {
      for (const plan::SectionPlan& c : s.components) {
        if (c.mode == plan::SectionMode::kTrain) node += NodeBytesOf(s, c, gpus_per_node, &out.state_bytes);
      }
    } else if (s.mode == plan::SectionMode::kTrain) {
      node = NodeBytesOf(s, s, gpus_per_node, &out.state_bytes);
    }
    busiest = std::max(busiest, node);
    shared += node;
  }
  out.busiest_node_bytes = spec.cluster.local ? shared : busiest;
  out.write_seconds = out.write_bytes_per_s > 0 ? out.busiest_node_bytes / out.write_bytes_per_s : 0;
  return out;
}

std::string SignalLeadWarning(const Spec& spec, const CheckpointCost& cost, double step_seconds) {
  if (spec.job.signal_seconds <= 0 || cost.state_bytes <= 0) return "";
  const double needed = step_seconds + cost.write_seconds;
  if (spec.job.signal_seconds >= needed) return "";
  // Twice what is needed, in whole seconds: the file system's speed varies.
  const int suggested = static_cast<int>(std::ceil(2 * needed));
  return fmt::format(
      "[job] signal_seconds = {} leaves less than a step ({:.3g} s) plus the checkpoint's predicted write ({:.3g} s): "
      "Slurm's kill could come mid-save and lose the work since the previous checkpoint. Set signal_seconds = {} "
      "(twice that), or a faster [cluster] checkpoint_write_gbps if the file system's is known",
      spec.job.signal_seconds, step_seconds, cost.write_seconds, suggested);
}

}  // namespace maestro::compiler
