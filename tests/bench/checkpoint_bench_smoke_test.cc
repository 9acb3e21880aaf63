// SPDX-License-Identifier: Apache-2.0
// `maestro-bench checkpoint --quick --json` (issue #39's measured goals at
// small sizes): every figure the issue asks for is in the output and a
// finite positive number, each with its goal and whether this run met it,
// and the scratch files are removed. Not a timing test: no figure is
// compared with its goal here (timings on a shared CI machine are noise;
// docs/datalayer.md "Measured" records full runs).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/bench/bench_process.h"
#include "tests/fixtures/test_paths.h"

namespace {

namespace fs = std::filesystem;
using maestro::bench_test::RunTool;
using maestro::bench_test::ToolRun;

void ExpectFinitePositive(const nlohmann::json& out, const std::string& key) {
  SCOPED_TRACE(key);
  ASSERT_TRUE(out.contains(key)) << out.dump();
  ASSERT_TRUE(out[key].is_number()) << out[key];
  const double v = out[key].get<double>();
  EXPECT_TRUE(std::isfinite(v)) << v;
  EXPECT_GT(v, 0.0);
}

TEST(CheckpointBenchSmokeTest, QuickRunReportsEveryGoalFiniteWithItsTarget) {
  const std::string bench = std::string(MAESTRO_BIN_DIR) + "/maestro-bench";
  const fs::path dir = fs::path(MAESTRO_TEST_TMP) / ("bench-checkpoint-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const ToolRun run = RunTool({bench, "checkpoint", "--quick", "--json"}, dir);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const nlohmann::json out = nlohmann::json::parse(run.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(out.is_object()) << run.out;

  const std::map<std::string, double> goals = {{"write_vs_raw", 0.8},
                                               {"rank0_peak_over_own_state", 1.25},
                                               {"async_stall_fraction", 0.15},
                                               {"reshard_load_vs_same_layout", 1.5}};
  for (const auto& [key, goal] : goals) {
    ExpectFinitePositive(out, key);
    SCOPED_TRACE(key);
    ASSERT_TRUE(out["goals"].contains(key)) << out.dump();
    const nlohmann::json& g = out["goals"][key];
    EXPECT_EQ(g["value"], out[key]);
    EXPECT_EQ(g["goal"].get<double>(), goal);
    ASSERT_TRUE(g["met"].is_boolean());
  }
  for (const char* key : {"write_shard_gb_per_s", "write_raw_gb_per_s", "write_bytes", "rank0_own_state_bytes",
                          "rank0_load_peak_over_own_state", "rank0_async_save_peak_over_own_state", "async_stall_s",
                          "sync_stall_s", "async_write_s", "async_checkpoints"}) {
    ExpectFinitePositive(out, key);
  }
  // The layouts are as the header says: rank 0's whole state is >= 4x its own,
  // and the reshard figures compare layouts other than the writer's.
  EXPECT_GE(out["rank0_global_over_own_state"].get<double>(), 4.0) << out.dump();
  ASSERT_TRUE(out["reshard_layouts"].is_object());
  EXPECT_GE(out["reshard_layouts"].size(), 2u);
  ASSERT_TRUE(out["reshard_layouts"].contains(out["reshard_written_layout"].get<std::string>()));
  // How each side was measured is part of the output.
  for (const char* key : {"write_method", "rank0_method", "reshard_method", "async_method"}) {
    ASSERT_TRUE(out[key].is_string()) << key;
  }
  EXPECT_TRUE(fs::is_empty(dir / "scratch"));
  fs::remove_all(dir);
}

}  // namespace
