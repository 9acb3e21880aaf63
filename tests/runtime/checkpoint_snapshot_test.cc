// SPDX-License-Identifier: Apache-2.0
// The snapshot of an asynchronous save (runtime/checkpoint_slices.h
// PieceMemory::kOwnCopy; docs/datalayer.md "Asynchronous save"): the pieces
// a rank hands its background writer hold the state of the step boundary,
// whatever the next step does to the parameters and AdamW's moments in
// place meanwhile. The same collection as views (what a synchronous save
// writes at once) follows the live state: the check below tells the two
// apart, so a snapshot that only referenced the state would fail it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "runtime/checkpoint_slices.h"
#include "runtime/replica_owners.h"
#include "runtime/section_runner.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::runtime {
namespace {

std::vector<std::string> BytesOf(const RankPieces& pieces) {
  std::vector<std::string> out;
  for (const auto& s : pieces.slices) out.emplace_back(s.bytes);
  return out;
}

// tiny_kd's sectioned plan, the student's runner after one optimizer step
// (so AdamW has moments to write too).
struct StudentAfterAStep {
  plan::Plan p;
  int s = -1;
  std::unique_ptr<SectionRunner> runner;
  StudentAfterAStep() {
    auto spec = compiler::ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_kd.toml");
    EXPECT_TRUE(spec.ok()) << spec.status().ToString();
    compiler::CompileOptions options;
    options.grouping = compiler::Grouping::kSectioned;
    auto compiled = compiler::Compile(*spec, options);
    EXPECT_TRUE(compiled.ok()) << compiled.status().ToString();
    p = compiled->plan;
    s = p.section_index("student");
    for (auto& section : p.sections) section.init_from.clear();  // the teacher (and its head) from the seed
    auto created = SectionRunner::Create(p, s, RunnerOptions{});
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    runner = std::move(*created);
    {
      torch::NoGradGuard guard;
      for (auto& w : runner->Parameters()) w.mutable_grad() = torch::ones_like(w);
    }
    runner->OptimizerStep(0);
  }
  const plan::SectionPlan& section() const { return p.sections[static_cast<size_t>(s)]; }
  plan::RankCoords coords() const {
    plan::RankCoords c;
    c.section = s;
    return c;
  }
};

TEST(CheckpointSnapshot, AnOwnCopyKeepsTheStepBoundarysStateWhileTheNextStepChangesIt) {
  StudentAfterAStep student;
  ASSERT_FALSE(::testing::Test::HasFailure());
  SectionRunner* const runner = student.runner.get();
  const plan::SectionPlan& section = student.section();
  const plan::RankCoords coords = student.coords();
  auto snapshot = CollectRankPieces(section, coords, runner->CheckpointedRunners(), {}, PieceMemory::kOwnCopy);
  auto views = CollectRankPieces(section, coords, runner->CheckpointedRunners(), {});
  ASSERT_TRUE(snapshot.ok() && views.ok());
  const std::vector<std::string> at_the_boundary = BytesOf(*snapshot);
  ASSERT_EQ(at_the_boundary, BytesOf(*views));
  int moments = 0;
  for (const auto& piece : snapshot->slices) moments += piece.tensor.find("/adamw.") != std::string::npos ? 1 : 0;
  ASSERT_GT(moments, 0) << "the moments are in the snapshot";

  // The next step updates the weights and the moments in place.
  runner->OptimizerStep(1);

  EXPECT_EQ(BytesOf(*snapshot), at_the_boundary) << "the snapshot holds the step boundary's state";
  const std::vector<std::string> live = BytesOf(*views);
  size_t changed = 0;
  for (size_t i = 0; i < live.size(); ++i) changed += live[i] != at_the_boundary[i] ? 1 : 0;
  EXPECT_GT(changed, live.size() / 2) << "views follow the live state (the check can tell them apart)";
}

// runtime/replica_owners.h: largest first to the least-loaded place.
TEST(ReplicaOwners, SpreadsTheBytesNearlyEvenlyOverTheGroupAndAlikeOnEveryCall) {
  using Owners = std::vector<std::pair<int, int>>;
  const auto spread = [](const std::vector<GroupPiece>& pieces, int dp, int tp) {
    Owners out;
    for (const GroupOwner& o : SpreadOverReplicaGroup(pieces, dp, tp)) out.emplace_back(o.dp, o.tp);
    return out;
  };
  EXPECT_EQ(spread({{5, false}, {7, true}}, 1, 1), (Owners{{0, 0}, {0, -1}}));
  EXPECT_TRUE(spread({}, 4, 2).empty());
  // DP 2, TP 1: 9 -> 0, 7 -> 1, 5 -> 1 (7 < 9), 4 -> 0 (13 > 9), 1 -> 1 (12 < 13).
  EXPECT_EQ(spread({{4, false}, {9, false}, {1, false}, {7, false}, {5, false}}, 2, 1),
            (Owners{{0, 0}, {0, 0}, {1, 0}, {1, 0}, {1, 0}}));
  // DP 1, TP 2: a slice of 10 on both TP ranks, then whole pieces to the
  // lighter rank: 6 -> TP 0 (ties: the lower), 5 -> TP 1, 2 -> TP 1.
  EXPECT_EQ(spread({{10, true}, {6, false}, {5, false}, {2, false}}, 1, 2), (Owners{{0, -1}, {0, 0}, {0, 1}, {0, 1}}));
  // DP 2, TP 2: two slices to the two replicas, the whole pieces over the four ranks.
  EXPECT_EQ(spread({{8, true}, {8, true}, {3, false}, {3, false}, {3, false}, {3, false}}, 2, 2),
            (Owners{{0, -1}, {1, -1}, {0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  std::vector<GroupPiece> pieces;
  for (int i = 0; i < 200; ++i) pieces.push_back({(i * 7919) % 1000 + 1, i % 3 == 0});
  const auto owners = SpreadOverReplicaGroup(pieces, 4, 2);
  std::vector<int64_t> load(8, 0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (int t = 0; t < 2; ++t) {
      if (owners[i].tp < 0 || owners[i].tp == t) load[static_cast<size_t>(owners[i].dp * 2 + t)] += pieces[i].bytes;
    }
  }
  EXPECT_LE(*std::max_element(load.begin(), load.end()) - *std::min_element(load.begin(), load.end()), 1000)
      << "within the largest piece";
  EXPECT_EQ(spread(pieces, 4, 2), spread(pieces, 4, 2));
}

// The student at DP 2 without ZeRO-1: each replica writes a part of the
// weights and their AdamW moments, the two parts disjoint, together every
// tensor the DP 1 layout writes, near half the bytes each, and both with
// the same AdamW step count.
TEST(CheckpointSnapshot, DataParallelReplicasEachWriteAPartOfTheStateAndTogetherAllOfIt) {
  StudentAfterAStep student;
  ASSERT_FALSE(::testing::Test::HasFailure());
  SectionRunner* const runner = student.runner.get();
  plan::SectionPlan section = student.section();
  const auto pieces_of = [&](int dp, int dp_rank) {
    section.config.dp = dp;
    plan::RankCoords coords = student.coords();
    coords.dp = dp_rank;
    auto pieces = CollectRankPieces(section, coords, runner->CheckpointedRunners(), {});
    EXPECT_TRUE(pieces.ok()) << pieces.status().ToString();
    return std::move(*pieces);
  };
  const auto tensors = [](const RankPieces& pieces, int64_t* bytes) {
    std::map<std::string, int64_t> out;
    for (const auto& slice : pieces.slices) {
      out[slice.tensor] += static_cast<int64_t>(slice.bytes.size());
      *bytes += static_cast<int64_t>(slice.bytes.size());
    }
    return out;
  };
  int64_t all_bytes = 0, bytes0 = 0, bytes1 = 0;
  const RankPieces alone = pieces_of(1, 0), first = pieces_of(2, 0), second = pieces_of(2, 1);
  const auto all = tensors(alone, &all_bytes);
  const auto mine = tensors(first, &bytes0);
  const auto theirs = tensors(second, &bytes1);
  ASSERT_FALSE(mine.empty());
  ASSERT_FALSE(theirs.empty()) << "DP rank 1 writes its share";
  std::map<std::string, int64_t> both = mine;
  for (const auto& [name, n] : theirs) EXPECT_TRUE(both.emplace(name, n).second) << name << " written twice";
  EXPECT_EQ(both, all);
  EXPECT_EQ(bytes0 + bytes1, all_bytes);
  int64_t largest = 0;
  for (const auto& [name, n] : all) largest = std::max(largest, n);
  EXPECT_LE(std::abs(bytes0 - bytes1), 3 * largest) << "near half each (a parameter and its moments go together)";
  EXPECT_EQ(first.counters, alone.counters);
  EXPECT_EQ(second.counters, alone.counters) << "the same AdamW step count from either replica";
}

}  // namespace
}  // namespace maestro::runtime
