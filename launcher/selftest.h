// SPDX-License-Identifier: Apache-2.0
// The worker's self-test (`maestro-worker --selftest plan.json`): every group
// of every section all-reduces a known pattern and checks the sum; every
// cross-section link sends a buffer down (activation direction) and one up
// (gradient direction) and the receiver checks its checksum against the
// pattern it expects; then each group and link measures its bandwidth. Rank 0
// prints a table of groups, links and bandwidths and the verdict.
//
// May call: communicators, pmix_store. Thread safety: one thread; collective
// over the job.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>

#include "base/status.h"
#include "launcher/communicators.h"
#include "launcher/launch_env.h"
#include "plan/plan.h"

namespace maestro::launcher {

struct SelfTestOptions {
  size_t check_bytes = 256 * 1024;           // pattern size of the correctness checks
  size_t bandwidth_bytes = 4 * 1024 * 1024;  // message size of the bandwidth runs
  int bandwidth_iterations = 5;
};

struct SelfTestSummary {
  int groups = 0, links = 0;  // distinct groups (size > 1) and links in the plan
  int failures = 0;           // checks that failed, job-wide
};

// Collective over the job. kOk when every check of every rank passed; a
// failed check is kCorruption naming the group or link; a peer that fails is
// whatever the communication returned (kTimeout...). Rank 0 writes the table
// to `out`.
StatusOr<SelfTestSummary> RunSelfTest(const plan::Plan& plan, const RankPlace& place, Communicators& comms,
                                      const SelfTestOptions& options, std::FILE* out);

// FNV-1a over `bytes` bytes at `data`.
uint64_t Checksum(const void* data, size_t bytes);
// Fills `bytes` bytes at `data` with the pattern of `seed` (a 64-bit LCG).
void FillPattern(void* data, size_t bytes, uint64_t seed);

}  // namespace maestro::launcher
