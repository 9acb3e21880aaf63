// SPDX-License-Identifier: Apache-2.0
// What the runtime's end-to-end Slurm tests share: waiting for a job's end
// past Slurm 22.05's srun hang.
// May call: tests/slurm/slurm_test_util.h. Thread safety: none needed.
#pragma once

#include <chrono>
#include <string>

#include "tests/slurm/slurm_test_util.h"

namespace maestro::runtime_testing {

// Waits for the job's end; Slurm 22.05's srun may hang after a het step ended
// (docs/ARCHITECTURE.md): then the job is cancelled and the run's own record
// (metrics, checkpoints) is the verdict.
inline StatusOr<testing::SlurmJobInfo> WaitOrCancel(const testing::LocalSlurmCluster& cluster, const std::string& id,
                                                    std::chrono::seconds timeout) {
  auto job = cluster.WaitForJob(id, timeout);
  if (job.ok()) return job;
  (void)cluster.Cancel(id);
  return cluster.ShowJob(id);
}

}  // namespace maestro::runtime_testing
