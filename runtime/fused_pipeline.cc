// SPDX-License-Identifier: Apache-2.0
#include "runtime/fused_pipeline.h"

#include <fmt/format.h>

namespace maestro::runtime {

namespace {

bool IsDecoder(const plan::SectionPlan& s) {
  return s.model.kind == plan::ModelKind::kDecoder;
}

bool RunsOnEverySample(const plan::SectionPlan& s) {
  return s.activation.empty() || s.activation == "always";
}

}  // namespace

bool FusedComponentOnStage(const plan::SectionPlan& component, int stage) {
  return IsDecoder(component) || stage == 0;
}

std::string FusedPipelineRefusal(const plan::SectionPlan& fused) {
  const int pp = fused.config.pp;
  if (pp <= 1) return "";
  const std::string fix =
      "recompile with --grouping sectioned, or without --runtime-support: the planner emits only what this runtime "
      "runs";
  int trained = 0, frozen = 0;
  for (const auto& c : fused.components) {
    if (!IsDecoder(c)) continue;
    (c.mode == plan::SectionMode::kTrain ? trained : frozen) += 1;
    if (!RunsOnEverySample(c)) {
      return fmt::format(
          "fused section '{}': decoder '{}' runs on some samples only (activation '{}'); a pipelined fused section "
          "needs its decoders on every sample ({})",
          fused.name, c.name, c.activation, fix);
    }
    if (c.model.layers < pp) {
      return fmt::format("fused section '{}': pp {} is more than decoder '{}''s {} layers ({})", fused.name, pp, c.name,
                         c.model.layers, fix);
    }
    bool feeds_another = false;
    for (const auto& e : fused.component_edges) feeds_another = feeds_another || e.from == c.name;
    if (c.mode == plan::SectionMode::kTrain && feeds_another) {
      return fmt::format(
          "fused section '{}': training decoder '{}' feeds another component; with pp {} the runtime pipelines a "
          "fused section whose trained decoder is its last ({})",
          fused.name, c.name, pp, fix);
    }
  }
  if (trained != 1 || frozen > 1) {
    return fmt::format(
        "fused section '{}': {} training and {} forward-only decoder(s); with pp {} the runtime pipelines one "
        "training decoder, fed by encoders, projectors and at most one forward-only teacher ({})",
        fused.name, trained, frozen, pp, fix);
  }
  return "";
}

}  // namespace maestro::runtime
