// SPDX-License-Identifier: Apache-2.0
// The one table of the runtime's point-to-point message tags on the world
// communicator. Activations and gradients do not use these: on a
// cross-section link the k-th message of a step travels with tag k
// (launcher::LinkChannel; runtime/edge_exchange.h numbers them).
// May call: nothing. Torch-free.
#pragma once

namespace maestro::runtime {

enum MessageTag : int {
  // Resume (checkpointing.h): rank 0 sends every training rank its state.
  kTagResumeModel = 900001,
  kTagResumeOptimizer = 900002,
  // Checkpoint (checkpointing.h): DP-0 ranks of training sections send rank 0 theirs.
  kTagCheckpointModel = 900011,
  kTagCheckpointOptimizer = 900012,
  // Profiles (profiler.h): every rank sends rank 0 its measured points.
  kTagProfilePoints = 900101,
};

}  // namespace maestro::runtime
