// SPDX-License-Identifier: Apache-2.0
// The checkpoint's predicted cost (compiler/checkpoint_cost.h; issue #39
// item 4): the state a plan's checkpoint holds, what the busiest node
// writes under each layout rule, the report's line, and the warning when
// [job] signal_seconds leaves less than a step plus the write.
#include "compiler/checkpoint_cost.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "compiler/compile.h"
#include "compiler/model.h"
#include "compiler/spec.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::compiler {
namespace {

const std::string kSpecs = std::string(MAESTRO_SOURCE_DIR) + "/specs/";

Spec Load(const std::string& name) {
  auto spec = ParseSpecFile(kSpecs + name);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : Spec{};
}

// One training section of `params`-sized model with the given layout,
// on a cluster of `gpus_per_node`.
struct OneSection {
  Spec spec;
  plan::Plan plan;
};

// The spec compiled once (a compile of it takes seconds); each case
// re-shapes the student of a copy.
const OneSection& Compiled() {
  static const OneSection compiled = [] {
    OneSection out;
    out.spec = Load("kd_72b_to_7b.toml");
    auto r = Compile(out.spec, CompileOptions{});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) out.plan = r->plan;
    return out;
  }();
  return compiled;
}

OneSection Student(int tp, int dp, int zero_stage, int gpus_per_node) {
  OneSection out = Compiled();
  out.spec.cluster.gpus_per_node = gpus_per_node;
  for (auto& s : out.plan.sections) {
    if (s.name != "student") continue;
    s.config.tp = tp;
    s.config.pp = 1;
    s.config.cp = 1;
    s.config.dp = dp;
    s.config.zero_stage = zero_stage;
  }
  return out;
}

double StudentParams(const plan::Plan& p) {
  return static_cast<double>(
      ComputeModelFacts(p.sections[static_cast<size_t>(p.section_index("student"))].model, 0).params);
}

TEST(CheckpointCost, TheStateIsTheTrainingSectionsWeightsAndMomentsInFp32) {
  const OneSection a = Student(1, 1, 0, 8);
  const CheckpointCost cost = PredictCheckpoint(a.spec, a.plan);
  const double params = StudentParams(a.plan);
  ASSERT_GT(params, 6e9) << "a 7B student";
  EXPECT_DOUBLE_EQ(cost.state_bytes, 12 * params) << "the frozen teacher writes nothing";
  EXPECT_DOUBLE_EQ(cost.busiest_node_bytes, 12 * params) << "one rank writes it all";
  EXPECT_DOUBLE_EQ(cost.write_bytes_per_s, kDefaultCheckpointWriteGBps * 1e9);
  EXPECT_DOUBLE_EQ(cost.write_seconds, cost.busiest_node_bytes / cost.write_bytes_per_s);
}

TEST(CheckpointCost, NodesWriteInParallelAndZero1SpreadsTheMoments) {
  const double params = StudentParams(Student(1, 1, 0, 8).plan);
  // TP 2 on one node of 8: both TP ranks' halves go through the same node.
  const OneSection tp2_one_node = Student(2, 1, 0, 8);
  EXPECT_DOUBLE_EQ(PredictCheckpoint(tp2_one_node.spec, tp2_one_node.plan).busiest_node_bytes, 12 * params);
  // One GPU per node: each TP rank's node writes half.
  const OneSection tp2_two_nodes = Student(2, 1, 0, 1);
  EXPECT_DOUBLE_EQ(PredictCheckpoint(tp2_two_nodes.spec, tp2_two_nodes.plan).busiest_node_bytes, 6 * params);
  // DP 4 without ZeRO-1: one replica writes weights and moments; with it,
  // each DP rank writes a quarter of the moments (one GPU per node).
  const OneSection replicated = Student(1, 4, 0, 1);
  const OneSection zero1 = Student(1, 4, 1, 1);
  EXPECT_DOUBLE_EQ(PredictCheckpoint(replicated.spec, replicated.plan).busiest_node_bytes, 12 * params);
  EXPECT_DOUBLE_EQ(PredictCheckpoint(zero1.spec, zero1.plan).busiest_node_bytes, 4 * params + 2 * params);
  // A faster file system writes the same bytes sooner.
  OneSection faster = zero1;
  faster.spec.cluster.checkpoint_write_gbps = 4 * kDefaultCheckpointWriteGBps;
  EXPECT_DOUBLE_EQ(PredictCheckpoint(faster.spec, faster.plan).write_seconds,
                   PredictCheckpoint(zero1.spec, zero1.plan).write_seconds / 4);
}

TEST(CheckpointCost, ASignalLeadShorterThanAStepPlusTheWriteIsWarnedWithTheFix) {
  OneSection a = Student(1, 1, 0, 8);
  const CheckpointCost cost = PredictCheckpoint(a.spec, a.plan);  // 7B x 12 B at 2 GB/s: about 45 s
  a.spec.job.signal_seconds = 10;
  const std::string w = SignalLeadWarning(a.spec, cost, 5.0);
  EXPECT_NE(w.find("signal_seconds = 10"), std::string::npos) << w;
  EXPECT_NE(w.find(fmt::format("Set signal_seconds = {}", static_cast<int>(std::ceil(2 * (5.0 + cost.write_seconds))))),
            std::string::npos)
      << w;
  a.spec.job.signal_seconds = static_cast<int>(std::ceil(5.0 + cost.write_seconds));
  EXPECT_EQ(SignalLeadWarning(a.spec, cost, 5.0), "") << "enough lead time";
  a.spec.job.signal_seconds = 0;
  EXPECT_EQ(SignalLeadWarning(a.spec, cost, 5.0), "") << "no signal asked for";
}

// Through the compiler: the report's line and JSON, and the warning in
// both and in CompileResult::warnings (maestro-compile prints them).
TEST(CheckpointCost, TheReportPrintsThePredictedWriteAndTheWarning) {
  Spec spec = Load("kd_72b_to_7b.toml");
  auto quiet = Compile(spec, CompileOptions{});
  ASSERT_TRUE(quiet.ok()) << quiet.status().ToString();
  EXPECT_NE(quiet->report.find("checkpoint: "), std::string::npos) << quiet->report;
  EXPECT_NE(quiet->report.find("checkpoint_write_gbps"), std::string::npos) << quiet->report;
  EXPECT_NE(quiet->report_json.find("predicted_write_seconds"), std::string::npos);
  EXPECT_TRUE(quiet->warnings.empty()) << "signal_seconds = 300 suffices: " << quiet->warnings.front();
  spec.job.signal_seconds = 1;
  auto warned = Compile(spec, CompileOptions{});
  ASSERT_TRUE(warned.ok()) << warned.status().ToString();
  ASSERT_EQ(warned->warnings.size(), 1u);
  EXPECT_NE(warned->report.find("warning: [job] signal_seconds = 1 "), std::string::npos) << warned->report;
  // A bad write speed is refused at its line.
  auto zero = ParseSpecString("[cluster]\ncheckpoint_write_gbps = 0\n", "t.toml", ".");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("checkpoint_write_gbps"), std::string::npos) << zero.status().message();
}

}  // namespace
}  // namespace maestro::compiler
