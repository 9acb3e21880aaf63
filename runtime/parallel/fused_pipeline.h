// SPDX-License-Identifier: Apache-2.0
// Pipeline parallelism of a fused section (pp > 1; docs/fused_pipeline.md):
// which stage holds which component. What the monolithic baseline assumes (docs/monolithic.md):
// encoders and projectors are a prefix module, run whole on the first stage
// (at the section's TP); every decoder's layers are split over the stages
// (runtime/parallel/pipeline_stages.h LayersOfStage). The section runner builds only the
// components its stage holds; the executor moves the trained decoder's
// activation between stages and, in a fused KD section, the frozen
// teacher's beside it. Which fused sections the runtime pipelines:
// plan/runtime_support.h FusedPipelineRefusal.
//
// Torch-free. May call: plan. Thread safety: pure functions.
#pragma once

#include "plan/plan.h"

namespace maestro::runtime {

// True when pipeline stage `stage` of a fused section holds `component`:
// a decoder on every stage (its share of the layers), an encoder or a
// projector on the first stage only.
bool FusedComponentOnStage(const plan::SectionPlan& component, int stage);

}  // namespace maestro::runtime
