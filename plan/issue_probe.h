// SPDX-License-Identifier: Apache-2.0
// The issue probe: the section `maestro profile --kernels` times to measure
// what one autograd-tracked kernel of a training step costs the CPU to
// issue (a device profile's "training_issue_us", docs/step_model.md "The
// CPU's issue cost"). A ViT with ViT-B/16's depth and layout (12 layers of
// LayerNorm, attention with biases, GELU MLP, learned positions) but 64
// wide, on one 32 x 32 image (4 patches): on a GPU every kernel of its step
// is far shorter than issuing it, so its forward + backward time over the
// step model's count of its tracked kernels is that cost. The runtime
// measures it (runtime/kernel_profile.cc); `maestro profile` divides
// (cli/issue_calibration.h). One home for its shape, so both count the same
// model. May call: plan/plan.h.
#pragma once

#include "plan/plan.h"

namespace maestro::plan {

inline constexpr int kIssueProbeImages = 1;

inline ModelDesc IssueProbeVit() {
  ModelDesc d;
  d.kind = ModelKind::kVit;
  d.hidden = 64;
  d.layers = 12;
  d.heads = 4;
  d.ffn_hidden = 256;
  d.image_size = 32;
  d.patch_size = 16;
  d.channels = 3;
  return d;
}

// A decoder of the same depth and width (12 layers, 64 wide, GQA 4 / 2,
// SwiGLU 256, vocabulary 256) on one sequence of 8 tokens: `maestro-bench
// gpu` times it beside the ViT probe to see whether one issue cost per
// tracked kernel holds for both kinds of section.
inline constexpr int kIssueProbeTokens = 8;

inline ModelDesc IssueProbeDecoder() {
  ModelDesc d;
  d.kind = ModelKind::kDecoder;
  d.hidden = 64;
  d.layers = 12;
  d.heads = 4;
  d.kv_heads = 2;
  d.ffn_hidden = 256;
  d.vocab = 256;
  d.tie_embeddings = true;
  return d;
}

}  // namespace maestro::plan
