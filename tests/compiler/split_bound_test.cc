// SPDX-License-Identifier: Apache-2.0
// The split bound (issue #16): the GPUs a plan holds, split by work with no
// rounding and no fill, and the plan's fraction of it, in report.txt and
// --json.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "base/checks.h"
#include "compiler/compile.h"
#include "compiler/report.h"
#include "compiler/spec.h"

namespace maestro::compiler {
namespace {

const std::string kSpecs = std::string(MAESTRO_SOURCE_DIR) + "/specs/";

StatusOr<CompileResult> CompileSpec(const std::string& name, Grouping grouping = Grouping::kAuto) {
  MAESTRO_ASSIGN_OR_RETURN(Spec spec, ParseSpecFile(kSpecs + name));
  CompileOptions options;
  options.grouping = grouping;
  return Compile(spec, options);
}

// One section on all it holds, every sample active, no downstream: nothing
// to split and nothing to round: the plan is its own bound.
TEST(SplitBound, ASingleSectionOnItsOwnNodesReachesTheBound) {
  auto r = CompileSpec("tiny_teacher.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto js = nlohmann::json::parse(r->report_json);
  EXPECT_NEAR(js["fraction_of_split_bound"].get<double>(), 1.0, 0.01);
  EXPECT_GT(js["split_bound_seconds"].get<double>(), 0);
  EXPECT_EQ(js["gpus_held"].get<int>(), 2);
  EXPECT_NE(r->report.find("split bound: "), std::string::npos) << r->report;
}

// Two sections with a pipeline between them and whole nodes per section:
// below the bound, and the bound is what the held GPUs would do with the
// plan's work spread evenly.
TEST(SplitBound, ASectionedPlanIsBelowTheBoundItsWorkAndGpusGive) {
  auto r = CompileSpec("tiny_kd.toml", Grouping::kSectioned);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto js = nlohmann::json::parse(r->report_json);
  const double fraction = js["fraction_of_split_bound"].get<double>();
  EXPECT_GT(fraction, 0.0);
  EXPECT_LT(fraction, 1.0);
  EXPECT_NEAR(fraction * r->simulated.step_seconds, js["split_bound_seconds"].get<double>(), 1e-12);
  // The bound never exceeds the busiest section's busy time per replica
  // (its work over its own GPUs): spreading work cannot make it slower.
  double busiest = 0;
  for (const auto& s : r->assignment.sections) busiest = std::max(busiest, s.cost.step_seconds);
  EXPECT_LE(js["split_bound_seconds"].get<double>(), busiest * (1 + 1e-9));
}

}  // namespace
}  // namespace maestro::compiler
