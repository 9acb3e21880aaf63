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

#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "runtime/checkpoint_slices.h"
#include "runtime/section_runner.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::runtime {
namespace {

std::vector<std::string> BytesOf(const RankPieces& pieces) {
  std::vector<std::string> out;
  for (const auto& s : pieces.slices) out.emplace_back(s.bytes);
  return out;
}

TEST(CheckpointSnapshot, AnOwnCopyKeepsTheStepBoundarysStateWhileTheNextStepChangesIt) {
  auto spec = compiler::ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_kd.toml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  compiler::CompileOptions options;
  options.grouping = compiler::Grouping::kSectioned;
  auto compiled = compiler::Compile(*spec, options);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  plan::Plan p = compiled->plan;
  const int s = p.section_index("student");
  for (auto& section : p.sections) section.init_from.clear();  // the teacher (and its head) from the seed
  auto runner = SectionRunner::Create(p, s, RunnerOptions{});
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  // One optimizer step first, so AdamW has moments to snapshot too.
  {
    torch::NoGradGuard guard;
    for (auto& w : (*runner)->Parameters()) w.mutable_grad() = torch::ones_like(w);
  }
  (*runner)->OptimizerStep(0);

  plan::RankCoords coords;
  coords.section = s;
  const plan::SectionPlan& section = p.sections[static_cast<size_t>(s)];
  auto snapshot = CollectRankPieces(section, coords, (*runner)->CheckpointedRunners(), {}, PieceMemory::kOwnCopy);
  auto views = CollectRankPieces(section, coords, (*runner)->CheckpointedRunners(), {});
  ASSERT_TRUE(snapshot.ok() && views.ok());
  const std::vector<std::string> at_the_boundary = BytesOf(*snapshot);
  ASSERT_EQ(at_the_boundary, BytesOf(*views));
  int moments = 0;
  for (const auto& piece : snapshot->slices) moments += piece.tensor.find("/adamw.") != std::string::npos ? 1 : 0;
  ASSERT_GT(moments, 0) << "the moments are in the snapshot";

  // The next step updates the weights and the moments in place.
  (*runner)->OptimizerStep(1);

  EXPECT_EQ(BytesOf(*snapshot), at_the_boundary) << "the snapshot holds the step boundary's state";
  const std::vector<std::string> live = BytesOf(*views);
  size_t changed = 0;
  for (size_t i = 0; i < live.size(); ++i) changed += live[i] != at_the_boundary[i] ? 1 : 0;
  EXPECT_GT(changed, live.size() / 2) << "views follow the live state (the check can tell them apart)";
}

}  // namespace
}  // namespace maestro::runtime
