// SPDX-License-Identifier: Apache-2.0
// Issue #16: a spec whose model a runtime cannot run is planned with its
// sections marked planner-only, naming the feature. MoE was the example
// until this build's runtime ran it (docs/moe.md): the spec now compiles as
// it is, and is planner-only for a target runtime without MoE
// (--runtime-support without "moe").
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

StatusOr<Spec> MoeKd() {
  std::ifstream in(std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_kd.toml");
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  const std::string at = "ffn_hidden = 512\n";  // the teacher's
  const size_t pos = s.find(at);
  if (pos == std::string::npos) return Status::InvalidArgument("specs/tiny_kd.toml changed: no teacher ffn_hidden");
  s.insert(pos + at.size(), "experts = 4\nexperts_per_token = 2\nmoe_ffn_hidden = 128\n");
  return ParseSpecString(s, "moe.toml", std::string(MAESTRO_SOURCE_DIR) + "/specs");
}

TEST(PlannerOnly, AMoeSectionRunsHereAndIsPlannerOnlyForARuntimeWithoutMoe) {
  auto spec = MoeKd();
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto runs = Compile(*spec, CompileOptions{});
  ASSERT_TRUE(runs.ok()) << "this build's runtime runs MoE: " << runs.status().ToString();
  for (const auto& s : runs->plan.sections) EXPECT_EQ(s.planner_only, "") << s.name;

  // Planned for a runtime without MoE (--runtime-support without "moe"):
  // the MoE section is marked planner-only, naming the feature.
  CompileOptions without_moe;
  without_moe.support = kRuntimeSupport;
  without_moe.support.mixture_of_experts = false;
  without_moe.support_given = true;
  auto planned = Compile(*spec, without_moe);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  const auto& teacher = planned->plan.sections[static_cast<size_t>(planned->plan.section_index("teacher"))];
  EXPECT_NE(teacher.planner_only.find("MoE"), std::string::npos) << teacher.planner_only;
  EXPECT_NE(planned->report.find("planner-only"), std::string::npos);
}

}  // namespace
}  // namespace maestro::compiler
