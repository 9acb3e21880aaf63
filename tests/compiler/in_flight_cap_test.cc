// SPDX-License-Identifier: Apache-2.0
// The in-flight cap as a planner decision (issue #16, docs/scheduler.md "In-
// flight cap"): a training section that feeds others (a ViT under its LLM)
// holds every micro-batch of its replica between forward and backward unless
// the schedule caps it; the memory model prices the cap (cap + 1 held), the
// step simulation schedules with it, and compile keeps the cap whose plan
// simulates the shortest step. The runtime side (the executed order keeps
// the cap) is tests/runtime/in_flight_cap_run_test.cc.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/checks.h"
#include "compiler/compile.h"
#include "compiler/memory_model.h"
#include "compiler/spec.h"
#include "plan/plan.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

const std::string kSpecs = std::string(MAESTRO_SOURCE_DIR) + "/specs/";

std::string ReadSpecText(const std::string& name) {
  std::ifstream in(kSpecs + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `name` with `line` added at the top of its [job] table, compiled with
// `grouping` (sectioned: the cap applies to sectioned plans; a fused plan is
// one section, which the cap never bounds).
StatusOr<CompileResult> CompileWithJobLine(const std::string& name, const std::string& line,
                                           Grouping grouping = Grouping::kAuto) {
  std::string text = ReadSpecText(name);
  const size_t at = text.find("[job]\n");
  if (at == std::string::npos) return Status::Internal(name + " has no [job] table");
  text.insert(at + 6, line + "\n");
  MAESTRO_ASSIGN_OR_RETURN(Spec spec, ParseSpecString(text, kSpecs + name, kSpecs));
  CompileOptions options;
  options.grouping = grouping;
  return Compile(spec, options);
}

double SimulatedStep(const CompileResult& r) {
  return nlohmann::json::parse(r.report_json)["simulation"]["step_seconds"].get<double>();
}

// mllm_multi_image: 8 images of 4096 patches per sample through a 32-layer
// ViT. Uncapped, the ViT must hold every micro-batch of its replica, so it
// needs many replicas to fit and idles; capped, it fits on fewer GPUs and the
// LLM gets them. Compile keeps the faster sectioned plan, and that is a
// capped one. (Auto fuses this spec since the chunked vocabulary loss made
// its baseline fit at CP 1: docs/loss_chunking.md.)
TEST(InFlightCap, ThePlannerCapsAViTThatFeedsItsLlmWhenThatShortensTheStep) {
  auto chosen = CompileWithJobLine("mllm_multi_image.toml", "", Grouping::kSectioned);
  ASSERT_TRUE(chosen.ok()) << chosen.status().ToString();
  auto uncapped = CompileWithJobLine("mllm_multi_image.toml", "max_in_flight = 0", Grouping::kSectioned);
  ASSERT_TRUE(uncapped.ok()) << uncapped.status().ToString();

  ASSERT_FALSE(chosen->grouping.fused) << chosen->report;
  EXPECT_GT(chosen->plan.schedule_max_in_flight, 0) << chosen->report;
  EXPECT_EQ(uncapped->plan.schedule_max_in_flight, 0);
  EXPECT_LT(SimulatedStep(*chosen), SimulatedStep(*uncapped)) << chosen->report << uncapped->report;
  const auto js = nlohmann::json::parse(chosen->report_json);
  EXPECT_EQ(js["max_in_flight"].get<int>(), chosen->plan.schedule_max_in_flight);
  EXPECT_NE(chosen->report.find("in-flight cap"), std::string::npos) << chosen->report;
  EXPECT_NE(chosen->report.find("no cap"), std::string::npos) << "the report names the alternative tried";

  // The ViT holds fewer GPUs under the cap: that is where the step came from.
  const int vit = chosen->plan.section_index("vit");
  ASSERT_GE(vit, 0);
  EXPECT_LT(chosen->plan.sections[static_cast<size_t>(vit)].config.ranks(),
            uncapped->plan.sections[static_cast<size_t>(vit)].config.ranks());
}

// A pinned cap is kept as given, and a spec where no training section feeds
// another (KD: the teacher is frozen) is planned without one and says nothing.
TEST(InFlightCap, APinIsKeptAndAWorkloadWithNothingToCapHasNoCap) {
  auto pinned = CompileWithJobLine("mllm_multi_image.toml", "max_in_flight = 16", Grouping::kSectioned);
  ASSERT_TRUE(pinned.ok()) << pinned.status().ToString();
  EXPECT_EQ(pinned->plan.schedule_max_in_flight, 16);

  auto kd = CompileWithJobLine("kd_72b_to_7b.toml", "");
  ASSERT_TRUE(kd.ok()) << kd.status().ToString();
  EXPECT_EQ(kd->plan.schedule_max_in_flight, 0);
  EXPECT_EQ(kd->report.find("in-flight cap"), std::string::npos) << kd->report;

  auto bad = CompileWithJobLine("mllm_multi_image.toml", "max_in_flight = -1");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_in_flight"), std::string::npos) << bad.status().ToString();
}

// The memory model: a training section that feeds others holds cap + 1
// micro-batches' activations under a cap, every micro-batch without one; a
// sink holds one either way.
TEST(InFlightCap, TheMemoryModelHoldsCapPlusOneMicroBatches) {
  auto r = CompileWithJobLine("mllm_multi_image.toml", "max_in_flight = 0", Grouping::kSectioned);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const int vit = r->plan.section_index("vit");
  ASSERT_GE(vit, 0);
  SectionWork sw = r->workload.sections[static_cast<size_t>(vit)];
  ASSERT_FALSE(sw.sink);
  plan::ParallelConfig c;
  c.micro_batch = 1;
  c.recompute = true;
  const DeviceType device;
  const double microbatches = 40;
  const auto held = [&](int cap) {
    sw.in_flight_cap = cap;
    return EstimateSectionMemory(sw, c, microbatches, 1.0, device).activations;
  };
  const double one = held(1), three = held(3), none = held(0);
  EXPECT_NEAR(three / one, 2.0, 1e-9) << "4 held against 2";
  EXPECT_NEAR(none / one, microbatches / 2.0, 1e-9) << "every micro-batch against 2";
  EXPECT_NEAR(held(100), none, 1e-9) << "a cap above the micro-batches changes nothing";
}

}  // namespace
}  // namespace maestro::compiler
