// SPDX-License-Identifier: Apache-2.0
// fake_trainer: RunFakeTrainer as a process, for the kill -9 and preemption
// tests. Prints "committed <step>" after each checkpoint on stdout,
// "compute <epoch> <sample>" per teacher forward to --compute-log, and at the
// end "done weights=<hex> steps=<n> computes=<n> hits=<n> wrong=<n>".
// Also prints "start restart_count=<SLURM_RESTART_COUNT>" first.
// --kill-at spool-write:N | superblock:N: SIGKILL itself right before its
// N-th pwrite to the spool file, or before its N-th superblock write (the
// last write of an H5Fflush); tests/datalayer/kill_points.h.
// Exit: 0 done, 85 preempted (checkpointed; requeue me), 1 error.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/exit_codes.h"
#include "datalayer/preemption.h"
#include "tests/datalayer/fake_training.h"
#include "tests/datalayer/kill_points.h"

int main(int argc, char** argv) {
  using namespace maestro::datalayer;
  testing::FakeTrainerOptions o;
  std::string compute_log;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--run-dir")
      o.run_dir = v;
    else if (k == "--manifest")
      o.manifest = v;
    else if (k == "--batch")
      o.batch = std::stoll(v);
    else if (k == "--epochs")
      o.epochs = std::stoll(v);
    else if (k == "--checkpoint-every")
      o.checkpoint_every = std::stoi(v);
    else if (k == "--row-values")
      o.row_values = std::stoll(v);
    else if (k == "--compute-log")
      compute_log = v;
    else if (k == "--gate-stdin")
      o.gate_fd = v == "1" ? STDIN_FILENO : -1;
    else if (k == "--wait-for-signal")
      o.wait_for_signal = v == "1";
    else if (k == "--kill-at") {
      const auto at = testing::ParseKillAt(v);
      if (!at) {
        std::fprintf(stderr, "fake_trainer: --kill-at %s: expected spool-write:N or superblock:N (N >= 1)\n",
                     v.c_str());
        return maestro::kExitUsage;
      }
      testing::ArmKillPoint(*at);
    } else {
      std::fprintf(stderr, "fake_trainer: unknown flag %s\n", k.c_str());
      return maestro::kExitUsage;
    }
  }
  if (!compute_log.empty()) {
    o.compute_log_fd = ::open(compute_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  o.progress_fd = STDOUT_FILENO;
  const std::string start = "start restart_count=" + std::to_string(SlurmRestartCount()) + "\n";
  if (::write(STDOUT_FILENO, start.data(), start.size()) < 0) return maestro::kExitFailure;
  auto preempt = PreemptionSignal::Install();
  if (!preempt.ok()) {
    std::fprintf(stderr, "%s\n", preempt.status().ToString().c_str());
    return maestro::kExitFailure;
  }
  o.preempt = preempt->get();
  auto result = testing::RunFakeTrainer(o);
  if (!result.ok()) {
    std::fprintf(stderr, "fake_trainer: %s\n", result.status().ToString().c_str());
    return maestro::kExitFailure;
  }
  if (result->preempted) {
    std::printf("preempted\n");
    std::fflush(stdout);
    return maestro::kExitRequeue;
  }
  std::printf("done weights=%016llx steps=%lld computes=%lld hits=%lld wrong=%lld\n",
              static_cast<unsigned long long>(result->weights), static_cast<long long>(result->steps_run),
              static_cast<long long>(result->teacher_computes), static_cast<long long>(result->spool_hits),
              static_cast<long long>(result->wrong_rows_used));
  std::fflush(stdout);
  return maestro::kExitOk;
}
