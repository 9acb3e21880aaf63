// SPDX-License-Identifier: Apache-2.0
// `maestro profile` end to end under mpirun: the sweep (and the decoder at a
// second GPU count), the calibration run, and the final plan compiled with
// the measured, calibrated profile (the VLM: skips without the Fashion-MNIST
// demo images, tests/fixtures/demo_images.h); a run-ahead KD teacher's
// calibration.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
// GCC 12 reports a false -Wnull-dereference inside nlohmann::json's inlined code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <nlohmann/json.hpp>
#pragma GCC diagnostic pop
#include <sstream>
#include <string>
#include <vector>

#include "cli/subprocess.h"
#include "plan/plan.h"
#include "plan/profile.h"
#include "tests/fixtures/demo_images.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::cli {
namespace {

namespace fs = std::filesystem;

std::vector<plan::ProfilePoint> ReadPoints(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  auto points = plan::ProfilePointsFromJson(text.str());
  EXPECT_TRUE(points.ok()) << path << ": " << points.status().ToString();
  return points.ok() ? *points : std::vector<plan::ProfilePoint>{};
}

const plan::ProfilePoint* Find(const std::vector<plan::ProfilePoint>& points, const std::string& section, int gpus,
                               int micro_batch) {
  for (const auto& p : points) {
    if (p.section == section && p.gpus == gpus && p.micro_batch == micro_batch) return &p;
  }
  return nullptr;
}

TEST(MaestroProfile, MeasuresEveryGpuCountCalibratesThePlannedOneAndRecompiles) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();  // the sweep and calibration train the tiny VLM on Fashion-MNIST
  const std::string dir = std::string(MAESTRO_TEST_TMP) + "/maestro-profile-cli";
  fs::remove_all(dir);
  const std::string maestro = std::string(MAESTRO_BIN_DIR) + "/maestro";
  auto rc = RunProcess({maestro, "profile", std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_vlm.toml", "-o", dir,
                        "--ranks", "2", "--pin", "vit.micro_batch=8", "--pin", "llm.micro_batch=8", "--micro-batches",
                        "2,8", "--repeats", "1", "--calibration-steps", "5", "--gpu-counts", "2"});
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  ASSERT_EQ(*rc, 0);

  const auto points = ReadPoints(dir + "/profile.json");
  const auto sweep = ReadPoints(dir + "/profile-sweep.json");  // as measured, before the calibration
  // Both sections at the planned count (1 rank each); the decoder at TP 2
  // too; never the ViT at 2 (TP does not split it).
  for (int mb : {2, 8}) {
    EXPECT_NE(Find(sweep, "vit", 1, mb), nullptr) << mb;
    EXPECT_NE(Find(sweep, "llm", 1, mb), nullptr) << mb;
    EXPECT_NE(Find(sweep, "llm", 2, mb), nullptr) << mb;
    EXPECT_EQ(Find(sweep, "vit", 2, mb), nullptr) << mb;
  }
  for (const auto& p : sweep) EXPECT_GT(p.seconds, 0.0) << p.section << " " << p.gpus << " " << p.micro_batch;
  // The calibration ran the planned plan: it changed the planned count's
  // points (and the optimizer step everywhere), not the TP-2 sweep's times.
  ASSERT_TRUE(fs::exists(dir + "/calibration/trace.json"));
  bool planned_changed = false;
  for (const auto& p : points) {
    if (p.section != "llm") continue;
    const plan::ProfilePoint* before = Find(sweep, "llm", p.gpus, p.micro_batch);
    if (p.gpus == 2) {
      ASSERT_NE(before, nullptr) << p.micro_batch;
      EXPECT_DOUBLE_EQ(p.seconds, before->seconds) << p.micro_batch;
    } else if (before == nullptr || p.seconds != before->seconds) {
      planned_changed = true;
    }
  }
  EXPECT_TRUE(planned_changed);
  // The final plan is compiled from the profile, for this machine's cores.
  auto plan = plan::LoadPlan(dir + "/plan.json");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_GT(plan->shared_cores, 0);
  EXPECT_GT(plan->predicted_step_seconds, 0.0);
  for (const auto& s : plan->sections) EXPECT_TRUE(s.cost.measured) << s.name;
}

// The tiny KD's frozen teacher runs ahead: its F ops read back the rows its
// A ops computed a step earlier. The trace says how many rows each op
// computed, and the calibration times the teacher by those (before, the
// read-backs calibrated it to 1/75 of its sweep). Needs no demo images.
TEST(MaestroProfile, ARunAheadTeacherIsCalibratedByTheRowsItComputed) {
  const std::string dir = std::string(MAESTRO_TEST_TMP) + "/maestro-profile-kd";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The spec without its teacher checkpoint (the speed does not depend on the weights).
  std::ifstream in(std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_kd.toml");
  std::ofstream spec(dir + "/tiny_kd.toml");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("init = ", 0) != 0) spec << line << "\n";
  }
  spec.close();
  auto rc = RunProcess({std::string(MAESTRO_BIN_DIR) + "/maestro", "profile", dir + "/tiny_kd.toml", "-o", dir + "/out",
                        "--ranks", "2", "--micro-batches", "4,16", "--repeats", "1", "--calibration-steps", "6"});
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  ASSERT_EQ(*rc, 0);

  std::ifstream trace_file(dir + "/out/calibration/trace.json");
  const auto trace = nlohmann::json::parse(trace_file, nullptr, false);
  ASSERT_TRUE(trace.is_object() && trace.contains("traceEvents"));
  int teacher_section = -1;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") == "M" && e["args"].value("name", "") == "section teacher") teacher_section = e["pid"];
  }
  ASSERT_GE(teacher_section, 0) << "the premise: the calibration ran the teacher as a section of its own";
  int ahead_rows = 0, read_back_ops = 0;
  std::map<int64_t, int> ahead_rows_of_step;  // for the timeline below
  int64_t last_step = -1;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("ph", "") != "X" || e.value("pid", -1) != teacher_section) continue;
    const std::string name = e.value("name", "");
    const auto& args = e["args"];
    const int64_t step = args.value("step", int64_t{-1});
    last_step = std::max(last_step, step);
    if (name[0] == 'A') {  // A<m>; the "ahead" op after them is lowercase
      ASSERT_TRUE(args.contains("computed")) << e.dump();
      ahead_rows += args["computed"].get<int>();
      ahead_rows_of_step[step] += args["computed"].get<int>();
    }
    if (name[0] == 'F' && step >= 1) {
      ASSERT_TRUE(args.contains("computed")) << e.dump();
      if (args["computed"].get<int>() == 0) ++read_back_ops;
    }
  }
  EXPECT_GT(ahead_rows, 0) << "the premise: the teacher ran ahead";
  EXPECT_GT(read_back_ops, 0);

  // The timeline draws the steady state: the step before the last, which
  // computes the last one's rows ahead (the last computes none).
  ASSERT_GE(last_step, 2);
  std::ifstream timeline_file(dir + "/out/calibration/timeline.json");
  const auto timeline = nlohmann::json::parse(timeline_file, nullptr, false);
  ASSERT_TRUE(timeline.is_object() && timeline.contains("step")) << "no calibration/timeline.json";
  const int64_t drawn = timeline["step"].get<int64_t>();
  EXPECT_EQ(drawn, last_step - 1) << "the step before the last";
  EXPECT_GT(ahead_rows_of_step[drawn], 0) << "the drawn step computes rows ahead";
  EXPECT_EQ(ahead_rows_of_step[last_step], 0) << "the premise: the last step computes nothing ahead";

  // The calibrated teacher at the sizes the run used stays within 3x of
  // its sweep (a shared machine's runs differ by tens of percent; the
  // read-backs made it 75x).
  const auto sweep = ReadPoints(dir + "/out/profile-sweep.json");
  const auto points = ReadPoints(dir + "/out/profile.json");
  const plan::ProfilePoint* swept = Find(sweep, "teacher", 1, 16);
  ASSERT_NE(swept, nullptr);
  double nearest = 0;
  for (const auto& p : points) {
    if (p.section == "teacher" && p.gpus == 1 && p.micro_batch >= 8) {
      nearest = p.seconds / p.micro_batch * 16;  // per 16 rows
      break;
    }
  }
  ASSERT_GT(nearest, 0.0);
  EXPECT_GT(nearest / swept->seconds, 1.0 / 3)
      << "calibrated " << nearest << " s per 16 rows, swept " << swept->seconds;
  EXPECT_LT(nearest / swept->seconds, 3.0) << "calibrated " << nearest << " s per 16 rows, swept " << swept->seconds;
}

TEST(MaestroProfile, RefusesAZeroGpuCount) {
  auto rc = RunProcess({std::string(MAESTRO_BIN_DIR) + "/maestro", "profile",
                        std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_vlm.toml", "--gpu-counts", "0"});
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  EXPECT_NE(*rc, 0);
}

}  // namespace
}  // namespace maestro::cli
