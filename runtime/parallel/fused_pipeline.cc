// SPDX-License-Identifier: Apache-2.0
#include "runtime/parallel/fused_pipeline.h"

namespace maestro::runtime {

namespace {

bool IsDecoder(const plan::SectionPlan& s) {
  return s.model.kind == plan::ModelKind::kDecoder;
}

}  // namespace

bool FusedComponentOnStage(const plan::SectionPlan& component, int stage) {
  return IsDecoder(component) || stage == 0;
}

}  // namespace maestro::runtime
