// SPDX-License-Identifier: Apache-2.0
// Every `maestro-bench NAME --quick --json` prints exactly one JSON document
// (an object naming the benchmark) on stdout and its logs on stderr
// (issue #18, "Benchmarks' output"). The benchmarks are the ones
// `maestro-bench list` names, so a new one is covered without an edit here.
//
// One source, two binaries: bench_json_output_test (label unit) runs every
// benchmark but the slow ones named in kSlowBenchmarks; with
// MAESTRO_BENCH_SLOW_SET=1 it is bench_json_output_slow_test (label slow),
// which runs those. Not a timing test: no speed is judged; a benchmark
// named in kRequiredKeys must report those keys, and maestro-bench
// parallel's pipeline bubble must match 1F1B's theory (a ratio of times on
// the same ranks, not a speed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/bench/bench_process.h"
#include "tests/fixtures/test_paths.h"

#ifndef MAESTRO_BENCH_SLOW_SET
#define MAESTRO_BENCH_SLOW_SET 0
#endif

namespace {

namespace fs = std::filesystem;
using maestro::bench_test::RunTool;
using maestro::bench_test::ToolRun;

// Quick runs that take minutes on 2 shared cores (measured: simulator ~1 min alone and ~3 min beside a build,
// it profiles and trains four plans; parallel ~2 min beside builds, seven 2-rank trainings; kd, thirteen
// 2-rank trainings of 24 steps); the others take seconds each.
const std::set<std::string> kSlowBenchmarks = {"simulator", "parallel", "kd"};

// Benchmarks whose children are known to log on their stdout, and a line of
// that log: it must reach our stderr (not be dropped, not be on stdout).
const std::map<std::string, std::string> kChildLogs = {
    {"runtime", "step 0 loss "},     // maestro-worker --reference's losses
    {"simulator", "maestro run: "},  // maestro run's report
};

// Keys a benchmark's JSON must carry (numbers unless said), and what its
// figures must satisfy where a theory gives the answer.
const std::map<std::string, std::vector<std::string>> kRequiredKeys = {
    {"parallel",
     {"pp2_vs_dp2", "tp2_vs_dp2", "zero1_vs_dp2", "recompute_full_vs_none", "recompute_selective_vs_none",
      "moe_vs_dense", "pp_bubble_fraction", "pp_bubble_theory", "pp_imbalance_fraction", "pp_stages",
      "pp_micro_batches"}},
    {"mix",
     {"simulated_wavefront_vs_fifo", "video_spec_simulated_wavefront_vs_fifo", "measured_wavefront_vs_fifo",
      "predicted_wavefront_vs_fifo", "wavefront_samples_per_s", "fifo_samples_per_s"}},
    {"runtime",
     {"sectioned_vs_monolithic", "sectioned_vs_monolithic_predicted", "best_vs_monolithic", "sectioned_vs_reference",
      "monolithic_vs_reference", "overhead_fraction"}},
};

// maestro-bench parallel: the measured PP bubble (the span of a step's
// pipeline ops less the busiest stage's compute, over the span, from the
// trace) within 0.05 of 1F1B's (p - 1) / (m + p - 1), computed here from the
// stages and micro-batches it reports.
void ExpectParallelFigures(const nlohmann::json& result) {
  const double p = result["pp_stages"].get<double>(), m = result["pp_micro_batches"].get<double>();
  ASSERT_GE(p, 2);
  ASSERT_GE(m, p);
  const double theory = (p - 1) / (m + p - 1);
  EXPECT_NEAR(result["pp_bubble_theory"].get<double>(), theory, 1e-12);
  EXPECT_NEAR(result["pp_bubble_fraction"].get<double>(), theory, 0.05) << result.dump();
  for (const auto& key : {"pp2_vs_dp2", "tp2_vs_dp2", "zero1_vs_dp2", "recompute_full_vs_none",
                          "recompute_selective_vs_none", "moe_vs_dense"}) {
    EXPECT_GT(result[key].get<double>(), 0.0) << key;
  }
}

// maestro-bench runtime: for each workload it measured, the planner's choice
// follows its own prediction (fused exactly when it predicts the sectioned
// plan slower than the baseline), and a choice of the baseline's plan is the
// baseline's run itself (ratio 1), not a second, different plan.
void ExpectRuntimeFigures(const nlohmann::json& result) {
  for (const std::string prefix : {"", "tiny_vlm_"}) {
    if (!result.contains(prefix + "best_grouping")) {
      EXPECT_FALSE(prefix.empty()) << "the KD figures always come";
      continue;
    }
    const bool fused = result[prefix + "best_grouping"] == "fused";
    EXPECT_EQ(fused, result[prefix + "sectioned_vs_monolithic_predicted"].get<double>() < 1.0) << result.dump();
    if (fused) {
      EXPECT_EQ(result[prefix + "best_vs_monolithic"].get<double>(), 1.0) << result.dump();
    }
    for (const auto& key : {"sectioned_vs_monolithic", "monolithic_vs_reference", "sectioned_vs_reference"}) {
      EXPECT_GT(result[prefix + key].get<double>(), 0.0) << prefix + key;
    }
  }
}

std::string BenchPath() {
  return std::string(MAESTRO_BIN_DIR) + "/maestro-bench";
}

fs::path RunDir(const std::string& what) {
  const fs::path dir = fs::path(MAESTRO_TEST_TMP) / ("bench-json-" + what + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// The names `maestro-bench list` prints, one per line, first word.
std::vector<std::string> ListedBenchmarks() {
  const fs::path dir = RunDir("list");
  const ToolRun run = RunTool({BenchPath(), "list"}, dir);
  fs::remove_all(dir);
  std::vector<std::string> names;
  if (run.exit_code != 0) return names;
  std::istringstream lines(run.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name;
    if (words >> name) names.push_back(name);
  }
  return names;
}

std::vector<std::string> BenchmarksOfThisBinary() {
  std::vector<std::string> names;
  for (const auto& name : ListedBenchmarks()) {
    if ((kSlowBenchmarks.count(name) != 0) == (MAESTRO_BENCH_SLOW_SET != 0)) names.push_back(name);
  }
  return names;
}

#if !MAESTRO_BENCH_SLOW_SET
TEST(BenchJsonOutputTest, ListNamesTheBenchmarksThisTestKnows) {
  const auto names = ListedBenchmarks();
  ASSERT_FALSE(names.empty()) << "`maestro-bench list` printed no benchmark";
  // The tables above name benchmarks that exist (a rename must update them).
  for (const auto& slow : kSlowBenchmarks) {
    EXPECT_NE(std::find(names.begin(), names.end(), slow), names.end()) << slow;
  }
  for (const auto& [name, log] : kChildLogs) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  for (const auto& [name, keys] : kRequiredKeys) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
}
#endif

class BenchJsonOutput : public ::testing::TestWithParam<std::string> {};

TEST_P(BenchJsonOutput, QuickJsonRunPrintsOneJsonObjectOnStdoutAndLogsOnStderr) {
  const std::string name = GetParam();
  const fs::path dir = RunDir(name);
  ::unsetenv("GLIBC_TUNABLES");  // the bench itself sets what its ranks get
  const ToolRun run = RunTool({BenchPath(), name, "--quick", "--json"}, dir);
  ASSERT_EQ(run.exit_code, 0) << "maestro-bench " << name << " --quick --json failed; stderr:\n" << run.err;

  // The whole of stdout is one JSON document: a log line before or after it
  // makes the parse fail.
  nlohmann::json result;
  try {
    result = nlohmann::json::parse(run.out);
  } catch (const nlohmann::json::parse_error& e) {
    FAIL() << "stdout of maestro-bench " << name << " --quick --json is not one JSON document (" << e.what()
           << "); stdout:\n"
           << run.out;
  }
  ASSERT_TRUE(result.is_object()) << run.out;
  ASSERT_TRUE(result.contains("benchmark")) << run.out;
  EXPECT_EQ(result["benchmark"], nlohmann::json(name)) << run.out;
  // The ranks a benchmark starts run as `maestro run` starts them (its
  // predictions come from profiles made so): huge-page malloc.
  ASSERT_TRUE(result.contains("ranks_glibc_tunables") && result["ranks_glibc_tunables"].is_string()) << run.out;
  EXPECT_NE(result["ranks_glibc_tunables"].get<std::string>().find("glibc.malloc.hugetlb=1"), std::string::npos)
      << run.out;
  // One line: the document and its newline, nothing else.
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 1) << run.out;

  const auto keys = kRequiredKeys.find(name);
  if (keys != kRequiredKeys.end()) {
    for (const auto& key : keys->second) {
      EXPECT_TRUE(result.contains(key) && result[key].is_number()) << name << ": no number '" << key << "'\n"
                                                                   << run.out;
    }
  }
  if (name == "parallel") ExpectParallelFigures(result);
  if (name == "runtime") ExpectRuntimeFigures(result);

  // The children's logs went to stderr.
  const auto log = kChildLogs.find(name);
  if (log != kChildLogs.end()) {
    EXPECT_NE(run.err.find(log->second), std::string::npos)
        << "the log line '" << log->second << "' is not on stderr; stderr:\n"
        << run.err;
  }
  // Scratch files were removed.
  EXPECT_TRUE(fs::is_empty(dir / "scratch"));
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(EveryBenchmark, BenchJsonOutput, ::testing::ValuesIn(BenchmarksOfThisBinary()),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(BenchJsonOutput);

}  // namespace
