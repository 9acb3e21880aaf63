// SPDX-License-Identifier: Apache-2.0
// The GoogleTest fixture of the tests that run on the local Slurm cluster
// (ctest fixture slurm_cluster, docs/local-cluster.md): SetUp finds the
// running cluster (LocalSlurmCluster::FromEnvironment) and fails the test
// when there is none; cluster() is it. Header-only. May call:
// tests/slurm/slurm_test_util.h, GoogleTest.
#pragma once

#include <gtest/gtest.h>

#include <optional>

#include "tests/slurm/slurm_test_util.h"

namespace maestro::testing {

class SlurmClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto found = LocalSlurmCluster::FromEnvironment();
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    cluster_.emplace(*found);
  }
  const LocalSlurmCluster& cluster() const { return *cluster_; }

 private:
  std::optional<LocalSlurmCluster> cluster_;
};

}  // namespace maestro::testing
