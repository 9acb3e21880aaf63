// SPDX-License-Identifier: Apache-2.0
// A test body run on every rank of an mpirun job of the test's own binary,
// with MPI's world group: the in-process collective tests of the runtime
// (GatherSequence, the bucketed gradient sync) that check each rank's part
// against what one process computes. Header-only (a template over the body).
// May call: launcher/mpi_backend.h (MpiSession), multi_rank_harness.h
// (IsMpirunRank, RunThisTestUnderMpirun), GoogleTest. A test that includes
// it links maestro_launcher and maestro_runtime_testutil.
#pragma once

#include <gtest/gtest.h>

#include "launcher/mpi_backend.h"
#include "tests/runtime/multi_rank_harness.h"

namespace maestro::runtime_testing {

// Outside mpirun: runs the current test as `ranks` processes under mpirun
// (RunThisTestUnderMpirun). On each of those ranks: opens the MPI session
// and its world group (a 60 s timeout), fatal where either fails, and runs
// `body(world)` (a launcher::Backend&); a fatal failure in `body` ends it.
template <typename Body>
void OnEveryRank(int ranks, Body body) {
  if (!IsMpirunRank()) return RunThisTestUnderMpirun(ranks);
  auto session = launcher::MpiSession::Init();
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  auto world = (*session)->World(launcher::Millis(60000));
  ASSERT_TRUE(world.ok()) << world.status().ToString();
  body(**world);
}

}  // namespace maestro::runtime_testing
