// SPDX-License-Identifier: Apache-2.0
// Tensor-parallel encoders under mpirun (labels mpi;runtime): the tiny VLM
// compiled --grouping sectioned with --pin vit.tp=2 (the planner accepts it:
// compiler/runtime_support.h tensor_parallel_encoder) runs its ViT (blocks
// and merger) split over 2 ranks, and
//  - every step's loss equals the monolithic reference's within 1e-5
//    relative, and so do the final weights of both sections (the checkpoint
//    holds the full, gathered ViT; the key third of a fused qkv bias, whose
//    gradient is rounding noise that AdamW amplifies, within lr x steps);
//  - each TP rank's AdamW state holds its shard only (about half the
//    reference's; a quarter at TP 2 x DP 2 with ZeRO-1);
//  - a run stopped after a checkpoint and resumed ends with the losses and
//    weights of an uninterrupted one, bit for bit;
// and the fused VLM at TP 2 (ViT and decoder both split) gives the
// reference's losses and weights, its ViT's optimizer state a shard too.
// Skips, naming the missing file, without the Fashion-MNIST demo images.
// One torch TU (the checkpoints' weights are read back with torch).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "compiler/workload_builder.h"
#include "plan/plan.h"
#include "runtime/models/encoders.h"
#include "tests/fixtures/demo_images.h"
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/checkpoint_weights.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using runtime_testing::LastCheckpoint;

// specs/tiny_vlm.toml compiled with `grouping` and `pins`.
plan::Plan CompiledTinyVlm(compiler::Grouping grouping, const std::vector<std::string>& pins) {
  return runtime_testing::CompiledExamplePlan("tiny_vlm.toml", grouping, pins);
}

// The ViT at TP 2 (micro-batch 8), the decoder whole (micro-batch 4), one
// replica each, on this machine; `steps` steps.
plan::Plan VitTp2Plan(int64_t steps) {
  plan::Plan p = CompiledTinyVlm(compiler::Grouping::kSectioned, {"vit.tp=2"});
  const int vit = p.section_index("vit");
  EXPECT_GE(vit, 0);
  if (vit < 0) return p;
  EXPECT_EQ(p.sections[static_cast<size_t>(vit)].config.tp, 2) << "the planner honours --pin vit.tp=2";
  for (auto& s : p.sections)
    runtime_testing::SetDegrees(s, {s.name == "vit" ? 2 : 1, 1, 1, 1, s.name == "vit" ? 8 : 4});
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// The whole VLM in one fused section at TP 2, micro-batch 4.
plan::Plan FusedTp2Plan(int64_t steps) {
  plan::Plan p = CompiledTinyVlm(compiler::Grouping::kFused, {});
  plan::SectionPlan* f = runtime_testing::TheFusedSection(p);
  if (f == nullptr) return p;
  runtime_testing::SetDegrees(*f, {2, 1, 1, 1, 4});
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// Fresh(name): <test-tmp>/runtime_encoder_tp/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_encoder_tp"};

// The components of `p` by name with their model: a fused section's, else its sections'.
std::map<std::string, plan::ModelDesc> ModelsOf(const plan::Plan& p) {
  std::map<std::string, plan::ModelDesc> out;
  for (const auto& s : plan::ExpandFusedSections(p).sections) out[s.name] = s.model;
  return out;
}

// Plan `p` against the reference: losses at every step and the final
// weights of every section within kAdamWWeightRelativeBound relative; the ViT's AdamW moments
// written by 1 / `share` ranks (its TP ranks, and its DP ranks under ZeRO-1),
// each about `share` of the reference's (1/2 at TP 2; 1/4 with ZeRO-1 over
// DP 2 on top).
void ExpectEqualsTheReference(const std::string& what, const plan::Plan& p, double share = 0.5) {
  const std::string dir = Fresh(what);
  ASSERT_NO_FATAL_FAILURE(runtime_testing::ExpectRunEqualsReference(what, p, dir));

  // The key bias's gradient is zero but for rounding (softmax ignores a
  // shift shared by every key), and AdamW turns that noise into steps of up
  // to ~lr * |g| / (|g| + eps): the key third is held to what noise can move
  // it (lr x steps), the q and v thirds to 1e-5 like the rest.
  const double key_bias_bound = p.sections.front().optimizer.lr * static_cast<double>(p.data.steps);
  double worst = 0.0;
  for (const auto& [name, desc] : ModelsOf(p)) {
    const auto mine = runtime_testing::CheckpointWeights(desc, dir + "/run", name);
    const auto want = runtime_testing::CheckpointWeights(desc, dir + "/reference", name);
    ASSERT_FALSE(mine.empty()) << name;
    ASSERT_EQ(mine.size(), want.size()) << name;
    std::string where;
    const double d = runtime_testing::LargestRelativeDifference(mine, want, &where, key_bias_bound);
    EXPECT_LE(d, runtime_testing::kAdamWWeightRelativeBound) << what << ": " << name << "." << where;
    worst = std::max(worst, d);
  }
  std::cout << what << ": final weights within " << worst << " relative of the reference\n";

  // Each rank writes its own shard of the ViT's AdamW moments.
  const auto mine = runtime_testing::PieceBytesByFile(LastCheckpoint(dir + "/run"), "vit/adamw.");
  const auto ref = runtime_testing::PieceBytesByFile(LastCheckpoint(dir + "/reference"), "vit/adamw.");
  ASSERT_EQ(ref.size(), 1u) << what;
  ASSERT_EQ(static_cast<double>(mine.size()), std::round(1.0 / share)) << what;
  const double whole = ref.begin()->second;
  for (const auto& [file, shard] : mine) {
    EXPECT_LT(shard, (share + 0.25) * whole) << what << ": " << file << " holds its shard's moments only";
    EXPECT_GT(shard, 0.8 * share * whole) << what << ": " << file;
  }
}

TEST(EncoderTpTraining, VitTp2SectionedEqualsTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  ExpectEqualsTheReference("vit_tp2", VitTp2Plan(5));
}

// ZeRO-1 on a TP-split ViT: TP 2 x DP 2, AdamW's moments sharded over DP
// within each TP shard (runtime/parallel/distributed_optimizer.h), the
// decoder at DP 2.
TEST(EncoderTpTraining, VitTp2Dp2WithZero1EqualsTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  plan::Plan p = VitTp2Plan(4);
  for (auto& s : p.sections) {
    s.config.dp = 2;
    s.config.micro_batch = 4;
    if (s.name == "vit") s.config.zero_stage = 1;
  }
  runtime_testing::PlaceOnThisMachine(p, 4);
  ExpectEqualsTheReference("vit_tp2_dp2_zero1", p, 0.25);
}

TEST(EncoderTpTraining, FusedVlmTp2WithTheVitSplitEqualsTheReference) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  ExpectEqualsTheReference("fused_tp2", FusedTp2Plan(5));
}

TEST(EncoderTpTraining, VitTp2StopAndResumeIsBitIdenticalToAnUninterruptedRun) {
  MAESTRO_SKIP_WITHOUT_DEMO_IMAGES();
  const plan::Plan p = VitTp2Plan(6);
  // Weights equal after 3 steps past the resume show that every TP shard's
  // weights and moments came back.
  runtime_testing::ExpectStopAndResumeCheckpointsEqual("vit_tp2", p, Fresh("resume"), 3, 5, "vit/adamw.", 2,
                                                       {/*optimizer_present=*/true, /*optimizer_bytes_equal=*/true});
}

}  // namespace
}  // namespace maestro
