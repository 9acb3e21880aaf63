// SPDX-License-Identifier: Apache-2.0
// Pipeline parallelism of a fused section (pp > 1; docs/fused_pipeline.md):
// which stage holds which component, and which fused sections the runtime
// can pipeline. What the monolithic baseline assumes (docs/monolithic.md):
// encoders and projectors are a prefix module, run whole on the first stage
// (at the section's TP); every decoder's layers are split over the stages
// (runtime/pipeline.h LayersOfStage). The section runner builds only the
// components its stage holds; the executor moves the trained decoder's
// activation between stages and, in a fused KD section, the frozen
// teacher's beside it.
//
// Torch-free. May call: plan. Thread safety: pure functions.
#pragma once

#include <string>

#include "plan/plan.h"

namespace maestro::runtime {

// True when pipeline stage `stage` of a fused section holds `component`:
// a decoder on every stage (its share of the layers), an encoder or a
// projector on the first stage only.
bool FusedComponentOnStage(const plan::SectionPlan& component, int stage);

// "" when the runtime runs fused section `fused` with its config's pp (any
// pp for pp = 1); otherwise why not, in words that name the section and
// the fix. It pipelines a fused section with exactly one training decoder,
// the section's only sink, run on every sample (activation "always"), fed
// by any encoders and projectors and by at most one forward-only decoder
// (a KD teacher, also run on every sample); every decoder has at least pp
// layers.
std::string FusedPipelineRefusal(const plan::SectionPlan& fused);

}  // namespace maestro::runtime
