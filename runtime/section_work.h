// SPDX-License-Identifier: Apache-2.0
// What a section's compute amounts to, in the units of its model, from the
// real, unpadded counts of the samples it ran: the "sections" object of a
// metrics.jsonl step line (runtime/step_metrics.h).
//
// Owns: the work slots (one per section, a fused section's one per
// component: the workload's sections as the spec names them), the work
// items of each model kind — a decoder's non-padding tokens of a sample, a
// ViT's patches (+ class token) of each image present, an audio encoder's
// ceil(frames / 2) output frames of each clip present, a projector's rows of
// the items its upstream encoder hands it — and their model FLOPs by
// plan/model_flops.h (per sequence: a sample, an image, a clip; x3 when the
// component trains, x1 when forward-only). A component counts only the
// samples that activate it (plan::SectionActivates).
// May call: plan, datasets (SampleSource). Torch-free. Thread safety: pure
// functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/sample_source.h"
#include "plan/native_vision.h"
#include "plan/plan.h"
#include "plan/plan_graph.h"

namespace maestro::runtime {

// One sample as work sees it.
struct SampleWorkItems {
  int64_t real_tokens = 0;  // its sequence's non-padding tokens (RealTokensOf)
  plan::SampleMedia media;  // its images and audio clips
  // Native resolution: its images' (and videos') grids, in order; empty on a
  // fixed grid (each image then has the ViT's image_size).
  std::vector<plan::PatchGrid> grids;
};

// A component's work over some samples.
struct SectionWork {
  double tokens = 0;       // work items: tokens, patches, frames or rows
  double model_flops = 0;  // model FLOPs (forward x3 when trained)
  SectionWork& operator+=(const SectionWork& o) {
    tokens += o.tokens;
    model_flops += o.model_flops;
    return *this;
  }
};

// The plan's work slots in order: each section's name, a fused section's
// components' names (in SectionPlan::components order) in its place.
std::vector<std::string> WorkSlotNames(const plan::Plan& plan);
// The first work slot of section `section` and how many it has (1, or its
// components).
size_t FirstWorkSlot(const plan::Plan& plan, int section);
size_t WorkSlotsOf(const plan::Plan& plan, int section);

// The work section `section` of `plan` does on `samples` (a micro-batch, in
// any order), one entry per work slot of the section: each component on the
// samples that activate it.
std::vector<SectionWork> WorkOfSamples(const plan::Plan& plan, int section,
                                       const std::vector<SampleWorkItems>& samples);

// Train sample `id`'s non-padding tokens: the sum of its tokens per modality
// (SampleSource::TokensOf: text, image and audio placeholders), at most
// `seq_len`.
int64_t RealTokensOf(const datasets::SampleSource& samples, int64_t id, int64_t seq_len);

}  // namespace maestro::runtime
