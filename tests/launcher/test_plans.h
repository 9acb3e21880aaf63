// SPDX-License-Identifier: Apache-2.0
// Plans for the launcher's tests, built directly (no compiler needed).
#pragma once

#include <string>

#include "plan/plan.h"

namespace maestro::launcher::testing {

inline void AddSection(plan::Plan& p, const std::string& name, int tp, int cp, int dp, int pp) {
  plan::AppendSingleNodeSection(p, name, tp, cp, dp, pp);
}

// Fan-out 1: a (dp 2) -> b (dp 2). 4 ranks.
inline plan::Plan FanOut1Plan() {
  plan::Plan p;
  p.job_name = "fanout1";
  AddSection(p, "enc", 1, 1, 2, 1);
  AddSection(p, "llm", 1, 1, 2, 1);
  p.edges.push_back({"enc", "llm", "embeddings", 4096, true});
  return p;
}

// Fan-out 2: vit (tp 2, dp 1) -> llm (tp 2, dp 2). 6 ranks.
inline plan::Plan FanOut2Plan() {
  plan::Plan p;
  p.job_name = "fanout2";
  AddSection(p, "vit", 2, 1, 1, 1);
  AddSection(p, "llm", 2, 1, 2, 1);
  p.edges.push_back({"vit", "llm", "image_embeddings", 4096, true});
  return p;
}

// Fan-in 2: teacher (dp 2, pp 2) -> student (cp 1, dp 1). 5 ranks; the
// teacher's last PP stage sends.
inline plan::Plan FanInPlan() {
  plan::Plan p;
  p.job_name = "fanin";
  AddSection(p, "teacher", 1, 1, 2, 2);
  AddSection(p, "student", 1, 1, 1, 1);
  p.edges.push_back({"teacher", "student", "teacher_hidden", 4096, false});
  return p;
}

// Three sections, two edges into one: vit (dp 1) -> llm (cp 2, dp 2) <- audio
// (dp 1), fan-out 2 on both edges. 1 + 1 + 4 = 6 ranks.
inline plan::Plan ThreeSectionPlan() {
  plan::Plan p;
  p.job_name = "three";
  AddSection(p, "vit", 1, 1, 1, 1);
  AddSection(p, "audio", 1, 1, 1, 1);
  AddSection(p, "llm", 1, 2, 2, 1);
  p.edges.push_back({"vit", "llm", "image_embeddings", 4096, true});
  p.edges.push_back({"audio", "llm", "audio_embeddings", 4096, false});
  return p;
}

}  // namespace maestro::launcher::testing
