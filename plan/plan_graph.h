// SPDX-License-Identifier: Apache-2.0
// The section graph of a plan as every executor walks it: which sections a
// sample activates, an order of the sections where every edge goes forward,
// and the order of a fused section's components. The one home of these
// rules for the distributed executor, the one-process reference, the
// checkpoints (which list a fused section's components in this order) and
// the profiler.
// May call: base, plan. Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "plan/plan.h"

namespace maestro::plan {

// What a sample carries that a section may activate on.
struct SampleMedia {
  int64_t images = 0;
  int64_t audios = 0;  // audio clips
};

// True when a sample carrying `media` activates section `s`: its activation
// is "always" (or empty), or "image" / "audio" and the sample has one.
bool SectionActivates(const SectionPlan& s, const SampleMedia& media);

// Sections in an order where every edge goes forward (plan.edges are acyclic:
// Validate refuses cycles), the lowest index first among the ready ones.
std::vector<int> TopologicalSections(const Plan& plan);

// A fused section's components in the order its runner runs them (every
// component edge forward): indices into fused.components. The one order the
// runner, its checkpoints and its resume share.
std::vector<int> FusedComponentOrder(const SectionPlan& fused);

}  // namespace maestro::plan
