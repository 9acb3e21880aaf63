// SPDX-License-Identifier: Apache-2.0
// The in-flight cap in the runtime (docs/scheduler.md "In-flight cap"): what
// the compiler's memory model assumes (a training section that feeds others
// holds at most cap + 1 micro-batches between forward and backward), the
// executed order keeps. specs/tiny_vlm.toml as two sections under `maestro
// run` (a ViT whose rows the LLM trains on), with job.max_in_flight = 1 and
// without a cap: each rank's forwards and backwards, read from the run's
// trace.json, never leave more than 2 micro-batches open under the cap (and
// do without it: the premise), and the losses equal the one-process reference
// within 1e-5 relative either way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

namespace fs = std::filesystem;
using launcher::testing::RunResult;

const std::string kSpec = std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_vlm.toml";

// specs/tiny_vlm.toml with `max_in_flight = cap` in its [job] table, at `path`.
void WriteSpecWithCap(int cap, const fs::path& path) {
  std::string text = runtime_testing::ReadText(kSpec);
  const size_t at = text.find("[job]\n");
  ASSERT_NE(at, std::string::npos);
  text.insert(at + 6, "max_in_flight = " + std::to_string(cap) + "\n");
  std::ofstream(path) << text;
}

// Per (section index, rank, step): the most micro-batches open at once (a
// forward "F<i>" begun whose backward "B<i>" has not), in trace order.
std::map<std::tuple<int, int, int64_t>, int> MostOpen(const std::string& run_dir) {
  const auto trace = nlohmann::json::parse(runtime_testing::ReadText(run_dir + "/trace.json"), nullptr, false);
  std::map<std::tuple<int, int, int64_t>, std::vector<std::pair<double, char>>> ops;
  if (!trace.is_object() || !trace.contains("traceEvents")) return {};
  for (const auto& e : trace["traceEvents"]) {
    if (!e.contains("name") || !e.contains("ts") || !e.contains("args") || !e["args"].contains("step")) continue;
    const std::string name = e["name"].get<std::string>();
    if (name.size() < 2 || (name[0] != 'F' && name[0] != 'B') ||
        !std::all_of(name.begin() + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    ops[{e["pid"].get<int>(), e["tid"].get<int>(), e["args"]["step"].get<int64_t>()}].push_back(
        {e["ts"].get<double>(), name[0]});
  }
  std::map<std::tuple<int, int, int64_t>, int> out;
  for (auto& [key, list] : ops) {
    std::stable_sort(list.begin(), list.end());
    int open = 0, most = 0;
    for (const auto& [ts, kind] : list) {
      open += kind == 'F' ? 1 : -1;
      most = std::max(most, open);
    }
    out[key] = most;
  }
  return out;
}

struct CappedRun {
  plan::Plan plan;
  int vit = -1;
  int most_open = 0;  // over the ViT's ranks and steps
  std::map<int64_t, double> losses;
};

// Trains the two-section tiny VLM at `cap` (micro-batches of 4 so the ViT's
// replica has several), 3 steps on 3 ranks.
void TrainAt(int cap, const fs::path& root, CappedRun* out) {
  const fs::path spec = root / ("tiny_vlm_cap" + std::to_string(cap) + ".toml");
  WriteSpecWithCap(cap, spec);
  const fs::path dir = root / ("cap" + std::to_string(cap));
  const RunResult run = runtime_testing::RunMaestro(
      {"run", spec.string(), "-o", dir.string(), "--ranks", "3", "--grouping", "sectioned", "--steps", "3", "--no-eval",
       "--fresh", "--pin", "vit.micro_batch=4", "--pin", "llm.micro_batch=4", "--pin", "llm.cp=1"},
      {}, 600);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  auto plan = plan::LoadPlan((dir / "plan.json").string());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  out->plan = *plan;
  out->vit = plan->section_index("vit");
  ASSERT_GE(out->vit, 0);
  for (const auto& [key, most] : MostOpen((dir / "run").string())) {
    if (std::get<0>(key) == out->vit) out->most_open = std::max(out->most_open, most);
  }
  out->losses = runtime_testing::Losses((dir / "run").string());
}

TEST(InFlightCapRun, TheViTKeepsTheCapAndTheLossesEqualTheReference) {
  const fs::path root = fs::path(MAESTRO_TEST_TMP) / "in_flight_cap_run";
  fs::remove_all(root);
  fs::create_directories(root);

  CappedRun capped, uncapped;
  TrainAt(1, root, &capped);
  if (HasFatalFailure()) return;
  TrainAt(0, root, &uncapped);
  if (HasFatalFailure()) return;
  EXPECT_EQ(capped.plan.schedule_max_in_flight, 1);
  EXPECT_EQ(uncapped.plan.schedule_max_in_flight, 0);
  EXPECT_GT(uncapped.most_open, 2) << "the premise: without a cap the ViT keeps more than cap + 1 open";
  EXPECT_GE(capped.most_open, 1) << "the ViT ran";
  EXPECT_LE(capped.most_open, 2) << "cap 1 (+ 1 of the scheduler's deadlock relief), as the memory model assumes";

  const fs::path spec = root / "tiny_vlm_cap1.toml";
  const RunResult reference = runtime_testing::RunMaestro({"run", spec.string(), "-o", (root / "reference").string(),
                                                           "--reference", "--steps", "3", "--no-eval", "--fresh"},
                                                          {}, 600);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  const auto want = runtime_testing::Losses((root / "reference" / "run").string());
  for (const CappedRun* run : {&capped, &uncapped}) {
    ASSERT_EQ(run->losses.size(), 3u);
    ASSERT_EQ(want.size(), run->losses.size());
    for (const auto& [step, loss] : run->losses) {
      EXPECT_TRUE(std::isfinite(loss));
      EXPECT_NEAR(loss, want.at(step), 1e-5 * std::abs(want.at(step)))
          << "cap " << run->plan.schedule_max_in_flight << " step " << step;
    }
  }
}

}  // namespace
}  // namespace maestro
