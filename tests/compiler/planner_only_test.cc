// SPDX-License-Identifier: Apache-2.0
// Issue #16: a spec whose model the runtime cannot run (MoE) is refused
// without --allow-planner-only (exit 2, naming the section and the feature),
// and planned (marked planner-only) with it.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "compiler/compile.h"
#include "compiler/spec.h"

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

TEST(PlannerOnly, AMoeSectionIsRefusedWithoutAllowPlannerOnly) {
  auto spec = MoeKd();
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto refused = Compile(*spec, CompileOptions{});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);  // exit 2
  const std::string m = refused.status().message();
  EXPECT_NE(m.find("moe.toml:"), std::string::npos) << m;
  EXPECT_NE(m.find("'teacher'"), std::string::npos) << m;
  EXPECT_NE(m.find("MoE"), std::string::npos) << m;
  EXPECT_NE(m.find("--allow-planner-only"), std::string::npos) << m;

  CompileOptions allow;
  allow.allow_planner_only = true;
  auto planned = Compile(*spec, allow);
  ASSERT_TRUE(planned.ok()) << planned.status().ToString();
  EXPECT_NE(planned->report.find("planner-only"), std::string::npos);
}

}  // namespace
}  // namespace maestro::compiler
