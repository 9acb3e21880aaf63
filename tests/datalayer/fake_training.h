// SPDX-License-Identifier: Apache-2.0
// A fake trainer over the real datalayer, for the crash and preemption
// tests: it ingests a manifest, runs the steps fixed by the seed, "computes"
// fake teacher outputs (spooled and reused), updates a fake weight (an
// order-sensitive hash of the samples, their teacher outputs and an RNG
// stream that is checkpointed), and checkpoints every few steps. The final
// weight equals an uninterrupted run's only if every step ran exactly once,
// in order, from correct inputs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "datalayer/env.h"
#include "datalayer/preemption.h"

namespace maestro::datalayer::testing {

struct FakeTrainerOptions {
  std::string run_dir;
  std::string manifest;
  uint64_t seed = 7;
  int64_t batch = 8;
  int64_t epochs = 2;
  int checkpoint_every = 2;  // steps per checkpoint
  int64_t row_values = 256;  // f32 values per teacher row
  bool reuse_across_epochs = true;
  int progress_fd = -1;  // if >= 0: "committed <step>\n" written after each checkpoint
  int compute_log_fd = -1;
  int gate_fd = -1;  // if >= 0: after the first checkpoint, block until a byte arrives on it      // if >= 0: "compute
                     // <epoch> <sample>\n" per teacher forward
  const PreemptionSignal* preempt = nullptr;
  // With `preempt`: after the first checkpoint, block (sigsuspend, no
  // polling) until a preemption signal arrives, so a test can signal a run
  // that is certainly in the middle.
  bool wait_for_signal = false;
};

struct FakeTrainerResult {
  uint64_t weights = 0;
  int64_t steps_run = 0;         // steps run by this call
  int64_t teacher_computes = 0;  // teacher forwards by this call
  int64_t spool_hits = 0;
  int64_t wrong_rows_used = 0;  // spool rows whose values were wrong (must stay 0)
  bool preempted = false;
};

// fake_trainer's last line: "done weights=<hex> steps=<n> computes=<n> hits=<n> wrong=<n>".
struct DoneLine {
  uint64_t weights = 0;
  int64_t steps = 0, computes = 0, hits = 0, wrong = 0;
};
// The first such line in `text`, or nullopt.
std::optional<DoneLine> ParseDoneLine(const std::string& text);

// Writes n samples: ids 1000..1000+n-1, two modalities.
Status WriteFakeManifest(const std::string& path, int64_t n);
StatusOr<FakeTrainerResult> RunFakeTrainer(const FakeTrainerOptions& options, Env* env = Env::Default());

}  // namespace maestro::datalayer::testing
