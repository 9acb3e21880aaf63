// SPDX-License-Identifier: Apache-2.0
// `maestro profile` end to end under mpirun: the sweep (and the decoder at a
// second GPU count), the calibration run, and the final plan compiled with
// the measured, calibrated profile. Skips without the Fashion-MNIST demo
// images (tests/fixtures/demo_images.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/subprocess.h"
#include "plan/plan.h"
#include "plan/profile.h"
#include "tests/fixtures/demo_images.h"

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

TEST(MaestroProfile, RefusesAZeroGpuCount) {
  auto rc = RunProcess({std::string(MAESTRO_BIN_DIR) + "/maestro", "profile",
                        std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_vlm.toml", "--gpu-counts", "0"});
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  EXPECT_NE(*rc, 0);
}

}  // namespace
}  // namespace maestro::cli
