// SPDX-License-Identifier: Apache-2.0
// The issue probe's time into a GPU profile's "training_issue_us"
// (cli/issue_calibration.h): the quotient over the step model's count of the
// probe's tracked kernels, on CUDA profiles only, malformed records refused
// by field, and the file rewritten only when the field was added.
#include "cli/issue_calibration.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "compiler/device_profile.h"
#include "compiler/step_model.h"
#include "plan/issue_probe.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::cli {
namespace {

using nlohmann::json;

json ProbedProfile(const std::string& device, double forward, double backward, const std::string& precision) {
  return json{
      {"device", device},
      {"issue_probe",
       {{"forward_seconds", forward}, {"backward_seconds", backward}, {"precision", precision}, {"source", "a test"}}}};
}

// The step model's count of the probe's tracked kernels (forward, backward
// and the autocast weight casts of one mixed-precision step).
double ProbeKernels() {
  auto device = compiler::BuiltinDeviceProfile("h200");
  EXPECT_TRUE(device.ok());
  const auto desc = plan::IssueProbeVit();
  auto pass = compiler::PredictSectionPass(desc, compiler::SectionSpeedShape(desc, plan::kIssueProbeImages, 1, "mixed"),
                                           *device);
  EXPECT_TRUE(pass.ok()) << pass.status().ToString();
  return pass->detail.tracked_kernels;
}

TEST(IssueCalibration, ACudaProfileGetsTheProbesTimeOverItsTrackedKernels) {
  json doc = ProbedProfile("cuda", 0.004, 0.006, "mixed");
  auto added = AddIssueCost(&doc);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_TRUE(*added);
  const double kernels = ProbeKernels();
  EXPECT_GT(kernels, 12 * 20);  // 12 layers of a few dozen kernels each, forward and backward
  EXPECT_NEAR(doc.at("training_issue_us").at("value").get<double>(), 0.010 / kernels * 1e6, 1e-9);
  const std::string source = doc.at("training_issue_us").at("source");
  EXPECT_NE(source.find(std::to_string(static_cast<long long>(kernels)) + " kernels"), std::string::npos) << source;
  EXPECT_NE(source.find("a test"), std::string::npos) << source;
  // The compiler reads the added field back (with the rest of a profile).
  auto h200 = json::parse(fixtures::ReadFile(std::string(MAESTRO_SOURCE_DIR) + "/compiler/devices/h200.json"));
  h200["training_issue_us"] = doc.at("training_issue_us");
  auto parsed = compiler::ParseDeviceProfile(h200.dump(), "h200 with the probe's cost");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_NEAR(parsed->training_issue_seconds, 0.010 / kernels, 1e-12);
}

TEST(IssueCalibration, ACpuProfileOrOneWithoutAProbeIsLeftAlone) {
  for (json doc : {ProbedProfile("cpu", 0.004, 0.006, "fp32"), json{{"device", "cuda"}}}) {
    const json before = doc;
    auto added = AddIssueCost(&doc);
    ASSERT_TRUE(added.ok()) << added.status().ToString();
    EXPECT_FALSE(*added);
    EXPECT_EQ(doc, before);
  }
}

TEST(IssueCalibration, AMalformedProbeIsRefusedByField) {
  for (const auto& [doc, field] :
       {std::pair{ProbedProfile("cuda", 0.004, -1, "mixed"), "/issue_probe/backward_seconds"},
        std::pair{ProbedProfile("cuda", 0, 0.006, "mixed"), "/issue_probe/forward_seconds"},
        std::pair{ProbedProfile("cuda", 0.004, 0.006, "bf16"), "/issue_probe/precision"},
        std::pair{json{{"device", "cuda"}, {"issue_probe", 3}}, "/issue_probe must be an object"}}) {
    json copy = doc;
    auto added = AddIssueCost(&copy);
    ASSERT_FALSE(added.ok()) << doc.dump();
    EXPECT_NE(added.status().message().find(field), std::string::npos) << added.status().ToString();
  }
}

TEST(IssueCalibration, TheFileIsRewrittenOnlyWhenTheFieldIsAdded) {
  const std::string dir = std::string(MAESTRO_TEST_TMP) + "/issue-calibration";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir + "/" + name) << text;
    return dir + "/" + name;
  };
  const std::string gpu = write("gpu.json", ProbedProfile("cuda", 0.004, 0.006, "mixed").dump());
  auto added = AddIssueCostToFile(gpu);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_TRUE(*added);
  EXPECT_TRUE(json::parse(fixtures::ReadFile(gpu)).contains("training_issue_us"));
  const std::string cpu_text = ProbedProfile("cpu", 0.004, 0.006, "fp32").dump();
  const std::string cpu = write("cpu.json", cpu_text);
  added = AddIssueCostToFile(cpu);
  ASSERT_TRUE(added.ok()) << added.status().ToString();
  EXPECT_FALSE(*added);
  EXPECT_EQ(fixtures::ReadFile(cpu), cpu_text);
  const std::string bad_text = ProbedProfile("cuda", 0.004, -1, "mixed").dump();
  const std::string bad = write("bad.json", bad_text);
  added = AddIssueCostToFile(bad);
  ASSERT_FALSE(added.ok());
  EXPECT_NE(added.status().message().find(bad), std::string::npos) << added.status().ToString();
  EXPECT_EQ(fixtures::ReadFile(bad), bad_text);  // bad input leaves the file as it was
  const std::string garbage = write("garbage.json", "{not json");
  added = AddIssueCostToFile(garbage);
  ASSERT_FALSE(added.ok());
  EXPECT_NE(added.status().message().find(garbage), std::string::npos) << added.status().ToString();
}

}  // namespace
}  // namespace maestro::cli
