// SPDX-License-Identifier: Apache-2.0
// The multi-rank harness's own checks (labels unit;runtime; no processes):
// its comparisons fail where a run differs (a loss 2e-5 relative off, a
// missing step, a loss that does not fall, other weights in a checkpoint),
// the worker's log lines parse, and the plan shaping sets what it says.
#include "tests/runtime/multi_rank_harness.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <string>

namespace maestro {
namespace {

using runtime_testing::StepLosses;

TEST(MultiRankHarness, LossesNearFailsBeyondTheTolerance) {
  const StepLosses want{{0, 2.0}, {1, 1.5}};
  runtime_testing::ExpectLossesNear("same", want, want);
  runtime_testing::ExpectLossesNear("within", {{0, 2.0 * (1 + 0.5e-5)}, {1, 1.5}}, want);
  EXPECT_NONFATAL_FAILURE(runtime_testing::ExpectLossesNear("off", {{0, 2.0 * (1 + 2e-5)}, {1, 1.5}}, want),
                          "off step 0");
  EXPECT_FATAL_FAILURE(runtime_testing::ExpectLossesNear("missing", StepLosses{{2, 1.0}}, StepLosses{{0, 1.0}}),
                       "no such step");
}

TEST(MultiRankHarness, LossFallsFailsOnAFlatRun) {
  runtime_testing::ExpectLossFalls("falls", {{0, 2.0}, {1, 1.0}});
  EXPECT_NONFATAL_FAILURE(runtime_testing::ExpectLossFalls("flat", {{0, 2.0}, {1, 2.0}}), "the loss moves");
}

TEST(MultiRankHarness, SameCheckpointWeightsFailsOnOtherBytes) {
  datalayer::CheckpointData x, y;
  x.sections["student"].model = "abc";
  x.sections["student"].optimizer = "m1";
  y = x;
  runtime_testing::ExpectSameCheckpointWeights("same", x, y);
  y.sections["student"].model = "abd";
  EXPECT_NONFATAL_FAILURE(runtime_testing::ExpectSameCheckpointWeights("other", x, y), "weights of student");
  y = x;
  y.sections["student"].optimizer = "m2";
  runtime_testing::ExpectSameCheckpointWeights("optimizer not compared", x, y);
  runtime_testing::CheckpointChecks bytes;
  bytes.optimizer_bytes_equal = true;
  EXPECT_NONFATAL_FAILURE(runtime_testing::ExpectSameCheckpointWeights("optimizer", x, y, bytes), "optimizer student");
  // (EXPECT_FATAL_FAILURE's statement cannot name locals.)
  static datalayer::CheckpointData one_entry, two_entries;
  one_entry = x;
  two_entries = x;
  two_entries.sections["student#tp1"] = {};
  EXPECT_FATAL_FAILURE(runtime_testing::ExpectSameCheckpointWeights("entries", one_entry, two_entries), "entries");
}

TEST(MultiRankHarness, ReadsTheWorkersLogLines) {
  // The lines' shape as runtime/executor.cc logs them.
  const std::string log =
      "spool hits 12, computed 40 rows\n"
      "section 'teacher' dp 0: ran ahead by 2 batch(es): 3 step(s) computed ahead, at most 16 rows ahead (bound 16)\n"
      "spool hits 7,";
  int count = 0;
  EXPECT_EQ(runtime_testing::LoggedNumber(log, "spool hits ", &count), 12);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(runtime_testing::LoggedNumber(log, "computed "), 40);
  EXPECT_EQ(runtime_testing::LoggedNumber(log, "absent "), -1);
  const auto line = runtime_testing::ParseRunAheadLine(log);
  EXPECT_EQ(line.steps_ahead, 3);
  EXPECT_EQ(line.most_rows, 16);
  EXPECT_EQ(line.bound, 16);
  EXPECT_EQ(runtime_testing::ParseRunAheadLine("no run-ahead").steps_ahead, -1);
}

TEST(MultiRankHarness, ShapingSetsTheDegreesAndKeepsTheRest) {
  plan::SectionPlan s;
  s.config.zero_stage = 1;
  s.config.ep = 2;
  runtime_testing::SetDegrees(s, {2, 3, 4, 5, 6});
  EXPECT_EQ(s.config.tp, 2);
  EXPECT_EQ(s.config.pp, 3);
  EXPECT_EQ(s.config.cp, 4);
  EXPECT_EQ(s.config.dp, 5);
  EXPECT_EQ(s.config.micro_batch, 6);
  EXPECT_EQ(s.config.zero_stage, 1);
  EXPECT_EQ(s.config.ep, 2);
  s.loss.kind = "ce";
  runtime_testing::UseKdLoss(s);
  EXPECT_EQ(s.loss.kind, "kd");
  EXPECT_EQ(s.loss.kd_alpha, 0.5);
  EXPECT_EQ(s.loss.temperature, 2.0);
  s.loss.kd_alpha = 0.25;
  runtime_testing::UseKdLoss(s);
  EXPECT_EQ(s.loss.kd_alpha, 0.25) << "a KD loss stays as the spec gave it";
}

}  // namespace
}  // namespace maestro
