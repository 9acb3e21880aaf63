// SPDX-License-Identifier: Apache-2.0
// Context parallelism of ViT sections (docs/context_parallel_vit.md), labels
// mpi;runtime:
//  - unit: EncoderSequenceSplit's chunks, padding and in-image offsets, and
//    its block-diagonal attention equal to attention over each image alone
//    (fp64 formula) for images of several lengths split across ranks;
//  - the planner: --pin vit.cp=2 compiles to a runnable plan (the support
//    row context_parallel_encoder), a decoder at CP 2 is planner-only
//    "CP=2 (decoder)", and a fused section with cp 2 is refused by name;
//  - mpirun: the tiny VLM fed by a JSONL manifest with 0, 1 or 2 images per
//    sample (PNG 28x28 gray and JPEG 20x36 RGB, resized by the data layer),
//    its ViT at patch 4 (49 patches per image, so a micro-batch's patches
//    split mid-image and, with an odd image count, pad), trained with the ViT
//    at CP 2, CP 2 x TP 2 and CP 2 x DP 2 (ZeRO-1): the loss of every step and
//    the final weights of both sections within 5e-5 relative of the
//    one-process reference (runtime/reference.h).
// One torch TU.
#include "runtime/parallel/vit_context_parallel.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/candidates.h"
#include "compiler/compile.h"
#include "compiler/runtime_support.h"
#include "compiler/spec.h"
#include "plan/plan.h"
#include "plan/runtime_support.h"
#include "runtime/models/encoders.h"
#include "runtime/section_runner.h"
#include "tests/fixtures/test_paths.h"
#include "tests/launcher/run_util.h"
#include "tests/runtime/checkpoint_weights.h"
#include "tests/runtime/local_plan.h"
#include "tests/runtime/multi_rank_harness.h"
#include "tests/runtime/run_dir_util.h"

namespace maestro {
namespace {

using runtime::EncoderSequenceSplit;
using runtime_testing::LastCheckpoint;

// ---- EncoderSequenceSplit (no processes) ----

TEST(VitContextParallelSplit, ChunksPadAndKnowEachTokensPlaceInItsImage) {
  const std::vector<int64_t> lengths{5, 3, 7};
  // Each global position's offset inside its segment, by walking the segments.
  std::vector<int64_t> offset_of;
  for (int64_t n : lengths)
    for (int64_t i = 0; i < n; ++i) offset_of.push_back(i);
  const int64_t total = static_cast<int64_t>(offset_of.size());
  auto full = torch::arange(total * 2, torch::kFloat32).view({total, 2}) + 1;  // no zero row
  for (int cp : {1, 2, 3, 4}) {
    std::vector<torch::Tensor> chunks;
    for (int r = 0; r < cp; ++r) {
      const EncoderSequenceSplit split(lengths, r, cp);
      EXPECT_EQ(split.total(), total);
      EXPECT_EQ(split.chunk(), (total + cp - 1) / cp);
      auto local = split.Local(full);
      ASSERT_EQ(local.size(0), split.chunk());
      const auto offsets = split.LocalOffsetsInSegment(torch::kCPU);
      for (int64_t i = 0; i < split.chunk(); ++i) {
        const int64_t p = r * split.chunk() + i;
        if (p < total) {
          EXPECT_EQ(offsets[i].item<int64_t>(), offset_of[static_cast<size_t>(p)]) << "cp " << cp << " pos " << p;
          EXPECT_TRUE(local[i].equal(full[p]));
        } else {
          EXPECT_EQ(local[i].abs().sum().item<float>(), 0.0f) << "padding rows are zero";
        }
      }
      chunks.push_back(local);
    }
    const EncoderSequenceSplit split(lengths, 0, cp);
    EXPECT_TRUE(split.DropPadding(torch::cat(chunks, 0)).equal(full)) << "cp " << cp;
  }
}

// softmax(q k^T / sqrt(D)) v in fp64: q (H, T, D), k and v (H, S, D).
torch::Tensor AttentionFormula(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  auto q64 = q.to(torch::kFloat64), k64 = k.to(torch::kFloat64), v64 = v.to(torch::kFloat64);
  auto scores = torch::matmul(q64, k64.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(-1)));
  return torch::matmul(torch::softmax(scores, -1), v64);
}

TEST(VitContextParallelSplit, BlockDiagonalAttentionEqualsEachImageAlone) {
  // Images of several lengths, equal neighbours (batched together), split
  // mid-image and padded for most CP sizes.
  const std::vector<int64_t> lengths{4, 9, 2, 9, 9, 5};
  int64_t total = 0;
  for (int64_t n : lengths) total += n;
  torch::manual_seed(7);
  const int64_t heads = 2, d = 8;
  auto q = torch::randn({heads, total, d}), k = torch::randn({heads, total, d}), v = torch::randn({heads, total, d});
  // The reference: each image's queries against its own keys only.
  std::vector<torch::Tensor> want;
  int64_t start = 0;
  for (int64_t n : lengths) {
    want.push_back(AttentionFormula(q.narrow(1, start, n), k.narrow(1, start, n), v.narrow(1, start, n)));
    start += n;
  }
  const auto expected = torch::cat(want, 1);  // (H, total, D)
  for (int cp : {1, 2, 3, 4, 7}) {
    std::vector<torch::Tensor> k_chunks, v_chunks, outs;
    std::vector<EncoderSequenceSplit> splits;
    for (int r = 0; r < cp; ++r) splits.emplace_back(lengths, r, cp);
    // What the all-gather gives every rank: the ranks' chunks in order.
    auto local = [&](const torch::Tensor& t, const EncoderSequenceSplit& s) {
      return s.Local(t.transpose(0, 1)).transpose(0, 1).unsqueeze(0);  // (1, H, chunk, D)
    };
    for (const auto& s : splits) {
      k_chunks.push_back(local(k, s));
      v_chunks.push_back(local(v, s));
    }
    const auto k_all = torch::cat(k_chunks, 2), v_all = torch::cat(v_chunks, 2);
    for (const auto& s : splits) outs.push_back(s.Attention(local(q, s), k_all, v_all)[0]);
    const auto got = splits[0].DropPadding(torch::cat(outs, 1).transpose(0, 1)).transpose(0, 1);
    ASSERT_EQ(got.sizes(), expected.sizes());
    const double err = (got.to(torch::kFloat64) - expected).abs().max().item<double>();
    EXPECT_LT(err, 1e-5) << "cp " << cp;
  }
}

// A rank whose chunk is all padding still reaches k and v in backward (their
// all-gathers' reduce-scatters are collectives every CP rank must join).
TEST(VitContextParallelSplit, APaddingOnlyRankStillBackpropagatesIntoKeysAndValues) {
  const EncoderSequenceSplit split({3}, 3, 4);  // chunk 1: rank 3 holds position 3, past the end
  auto q = torch::randn({1, 2, 1, 4}, torch::requires_grad());
  auto k = torch::randn({1, 2, 4, 4}, torch::requires_grad()), v = torch::randn({1, 2, 4, 4}, torch::requires_grad());
  auto out = split.Attention(q, k, v);
  EXPECT_EQ(out.abs().sum().item<float>(), 0.0f);
  out.sum().backward();
  ASSERT_TRUE(k.grad().defined() && v.grad().defined());
  EXPECT_EQ(k.grad().abs().sum().item<float>(), 0.0f);
}

// ---- the planner and the refusals ----

plan::Plan CompiledTinyVlm(compiler::Grouping grouping, const std::vector<std::string>& pins) {
  return runtime_testing::CompiledExamplePlan("tiny_vlm.toml", grouping, pins);
}

TEST(VitContextParallelPlanner, EncoderCpRunsAndDecoderCpIsPlannerOnly) {
  EXPECT_TRUE(compiler::kRuntimeSupport.context_parallel_encoder);
  const plan::Plan p = CompiledTinyVlm(compiler::Grouping::kSectioned, {"vit.cp=2"});
  const int vit = p.section_index("vit"), llm = p.section_index("llm");
  ASSERT_GE(vit, 0);
  ASSERT_GE(llm, 0);
  const auto& v = p.sections[static_cast<size_t>(vit)];
  EXPECT_EQ(v.config.cp, 2) << "the planner honours --pin vit.cp=2";
  EXPECT_EQ(compiler::PlannerOnlyFeatures(v.model, v.config), "");
  plan::ParallelConfig cp2 = p.sections[static_cast<size_t>(llm)].config;
  cp2.cp = 2;
  const std::string decoder = compiler::PlannerOnlyFeatures(p.sections[static_cast<size_t>(llm)].model, cp2);
  if (compiler::kRuntimeSupport.context_parallel_decoder) {
    EXPECT_EQ(decoder, "");
  } else {
    EXPECT_EQ(decoder, "CP=2 (decoder)");
  }
  compiler::RuntimeSupport no_encoder_cp;
  no_encoder_cp.context_parallel_encoder = false;
  EXPECT_EQ(compiler::PlannerOnlyFeatures(v.model, v.config, no_encoder_cp), "CP=2 (encoder)");
  EXPECT_TRUE(plan::CheckContextParallelRuns(p, v).ok());
}

// A fused section runs CP at PP 1 (docs/fused_context_parallel.md) and is
// refused by name with PP too.
TEST(VitContextParallelPlanner, FusedSectionWithCpAndPpIsRefusedByName) {
  plan::Plan p = CompiledTinyVlm(compiler::Grouping::kFused, {});
  ASSERT_EQ(p.sections.size(), 1u);
  p.sections[0].config.cp = 2;
  EXPECT_TRUE(plan::CheckContextParallelRuns(p, p.sections[0]).ok());
  p.sections[0].config.pp = 2;
  const Status refused = plan::CheckContextParallelRuns(p, p.sections[0]);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("fused section"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("--grouping sectioned"), std::string::npos) << refused.message();
  plan::Plan s = CompiledTinyVlm(compiler::Grouping::kSectioned, {});
  auto& llm = s.sections[static_cast<size_t>(s.section_index("llm"))];
  llm.config.cp = 2;
  // Decoder CP runs too (docs/context_parallel.md), but not with PP.
  EXPECT_TRUE(plan::CheckContextParallelRuns(s, llm).ok());
  llm.config.pp = 2;
  const Status pipelined = plan::CheckContextParallelRuns(s, llm);
  ASSERT_FALSE(pipelined.ok());
  EXPECT_NE(pipelined.message().find("context and pipeline parallelism"), std::string::npos) << pipelined.message();
}

// ---- mpirun: the tiny VLM with its ViT at CP 2 ----

constexpr int64_t kImageToken = 300;  // below the tiny decoder's vocabulary of 512
constexpr int64_t kPatchSize = 4;     // 28 / 4 = 7: 49 patches per image
constexpr int64_t kPatchesPerImage = 49;

// <dir>/img/*.png|jpg and <dir>/train.jsonl: `samples` samples with 0, 1, 2,
// 0, 1, 2, ... images, kPatchesPerImage placeholders per image.
std::string WriteManifest(const std::string& dir, int samples) {
  return runtime_testing::WriteImageManifest(dir, samples, kPatchesPerImage, kImageToken);
}

// Fresh(name): <test-tmp>/runtime_vit_cp/<name>, emptied.
const runtime_testing::FreshDirs Fresh{"runtime_vit_cp"};

// The tiny VLM (sectioned, --pin vit.cp=2) on the manifest in `data_dir`:
// the ViT at patch 4 with cp 2, tp `vit_tp`, dp `dp` (ZeRO-1 when dp > 1),
// micro-batch 3 (odd image counts: splits inside images and padding); the
// decoder at dp `dp`, micro-batch 4.
plan::Plan VitCpPlan(const std::string& data_dir, int vit_tp, int dp, int64_t steps,
                     plan::RecomputeGranularity vit_recompute = plan::RecomputeGranularity::kNone) {
  plan::Plan p = CompiledTinyVlm(compiler::Grouping::kSectioned, {"vit.cp=2"});
  if (p.section_index("vit") < 0) return p;
  runtime_testing::UseImageManifest(p, WriteManifest(data_dir, 48), kImageToken, 128, 12);
  for (auto& s : p.sections) {
    const bool vit = s.name == "vit";
    runtime_testing::SetDegrees(s, {vit ? vit_tp : 1, 1, vit ? 2 : 1, dp, vit ? 3 : 4});
    s.config.zero_stage = dp > 1 ? 1 : 0;
    s.config.set_recompute_granularity(s.name == "vit" ? vit_recompute : plan::RecomputeGranularity::kNone);
    if (s.name == "vit") {
      s.model.patch_size = kPatchSize;
      s.optimizer.grad_clip = 0.01;  // below the ViT's gradient norm: clipping acts, on the CP-summed norm
    }
    s.run_ahead = 0;
  }
  runtime_testing::PlaceOnThisMachine(p, steps);
  return p;
}

// The ViT ranks' "context parallel: held X of Y tokens (+P padding)" lines
// (runtime/executor.cc): per (tp, dp) the CP ranks' chunks cover every token
// exactly once, each rank a strict part. Returns the padding rows of all ranks.
int64_t ExpectTheCpRanksSplitTheTokens(const std::string& what, const plan::Plan& p, const std::string& output) {
  const std::regex line(
      R"(section 'vit' tp (\d+) cp (\d+) dp (\d+): context parallel: held (\d+) of (\d+) tokens \(\+(\d+) padding\))");
  std::map<std::pair<int, int>, std::map<int, std::pair<int64_t, int64_t>>> held;  // (tp, dp) -> cp -> (mine, total)
  int64_t padding = 0;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    held[{std::stoi(m[1]), std::stoi(m[3])}][std::stoi(m[2])] = {std::stoll(m[4]), std::stoll(m[5])};
    padding += std::stoll(m[6]);
  }
  const auto& vit = p.sections[static_cast<size_t>(p.section_index("vit"))].config;
  EXPECT_EQ(static_cast<int>(held.size()), vit.tp * vit.dp) << what << ": one line per CP rank\n" << output;
  for (const auto& [group, ranks] : held) {
    EXPECT_EQ(static_cast<int>(ranks.size()), vit.cp) << what;
    int64_t sum = 0;
    for (const auto& [cp, counts] : ranks) {
      EXPECT_GT(counts.first, 0) << what << " cp " << cp;
      EXPECT_LT(counts.first, counts.second) << what << " cp " << cp << " holds a part, not the whole";
      EXPECT_EQ(counts.second, ranks.begin()->second.second) << what;
      sum += counts.first;
    }
    EXPECT_EQ(sum, ranks.begin()->second.second) << what << ": the chunks cover every token once";
  }
  return padding;
}

// Plan `p` against the reference: the losses of every step and the final
// weights of every section within kAdamWWeightRelativeBound relative. Returns the CP ranks' padding rows.
int64_t ExpectEqualsTheReference(const std::string& what, const plan::Plan& p, const std::string& dir) {
  const auto runs = runtime_testing::ExpectRunEqualsReference(what, p, dir);
  if (runs.run.exit_code != 0) return 0;
  const int64_t padding = ExpectTheCpRanksSplitTheTokens(what, p, runs.run.output);
  const auto &a = runs.run_losses, &r = runs.reference_losses;
  if (runs.reference.exit_code != 0 || r.size() != a.size() || a.empty()) return padding;
  double worst_loss = 0.0;
  for (const auto& [step, loss] : a)
    worst_loss = std::max(worst_loss, std::abs(loss - r.at(step)) / std::abs(r.at(step)));

  double worst = 0.0;
  for (const auto& s : p.sections) {
    const auto mine = runtime_testing::CheckpointWeights(s.model, dir + "/run", s.name);
    const auto want = runtime_testing::CheckpointWeights(s.model, dir + "/reference", s.name);
    EXPECT_FALSE(mine.empty()) << s.name;
    EXPECT_EQ(mine.size(), want.size()) << s.name;
    if (mine.empty() || mine.size() != want.size()) continue;
    // The key third of a fused qkv bias has a gradient of rounding noise
    // (softmax ignores a shift shared by every key) that AdamW turns into
    // steps of up to ~lr: held to lr x steps, the rest to 1e-5
    // (checkpoint_weights.h says more).
    std::string where;
    const double d = runtime_testing::LargestRelativeDifference(mine, want, &where,
                                                                s.optimizer.lr * static_cast<double>(p.data.steps));
    EXPECT_LE(d, runtime_testing::kAdamWWeightRelativeBound) << what << ": " << s.name << "." << where;
    worst = std::max(worst, d);
  }
  std::cout << what << ": losses within " << worst_loss << ", final weights within " << worst
            << " relative of the reference\n";
  return padding;
}

TEST(VitContextParallelTraining, Cp2EqualsTheReference) {
  const std::string dir = Fresh("cp2");
  const int64_t padding = ExpectEqualsTheReference("vit_cp2", VitCpPlan(dir + "/data", 1, 1, 5), dir);
  EXPECT_GT(padding, 0) << "some micro-batch has an odd image count: 49 x odd tokens pad a row";
}

TEST(VitContextParallelTraining, Cp2Tp2EqualsTheReference) {
  const std::string dir = Fresh("cp2_tp2");
  ExpectEqualsTheReference("vit_cp2_tp2", VitCpPlan(dir + "/data", 2, 1, 4), dir);
}

TEST(VitContextParallelTraining, Cp2Dp2WithZero1EqualsTheReference) {
  const std::string dir = Fresh("cp2_dp2");
  ExpectEqualsTheReference("vit_cp2_dp2_zero1", VitCpPlan(dir + "/data", 1, 2, 4), dir);
}

// Activation recomputation of a CP ViT (the planner picks it with CP for
// large ViTs, e.g. specs/omni_audio_vision_llm.toml): full recomputation runs
// each block again in backward, its k/v all-gathers included, in the same
// order on every CP rank; selective recomputes the block-diagonal core.
TEST(VitContextParallelTraining, Cp2WithFullAndSelectiveRecomputeEqualsTheReference) {
  for (const auto& [name, granularity] :
       {std::pair<std::string, plan::RecomputeGranularity>{"full", plan::RecomputeGranularity::kFull},
        {"selective", plan::RecomputeGranularity::kSelective}}) {
    const std::string dir = Fresh("cp2_recompute_" + name);
    const plan::Plan p = VitCpPlan(dir + "/data", 1, 1, 5, granularity);
    ASSERT_EQ(p.sections[static_cast<size_t>(p.section_index("vit"))].config.recompute_granularity(), granularity);
    ExpectEqualsTheReference("vit_cp2_recompute_" + name, p, dir);
  }
}

// Checkpoints under CP: CP rank 0 sends the ViT's state, every CP rank gets
// it back on resume; a run stopped after step 2 and resumed ends with the
// losses and weights of an uninterrupted one, bit for bit.
TEST(VitContextParallelTraining, Cp2StopAndResumeIsBitIdenticalToAnUninterruptedRun) {
  const std::string dir = Fresh("cp2_resume");
  const plan::Plan p = VitCpPlan(dir + "/data", 1, 1, 4);
  ASSERT_NO_FATAL_FAILURE(runtime_testing::ExpectStopAndResumeLossesEqual("vit_cp2", p, dir, 2));
  const auto x = LastCheckpoint(dir + "/whole"), y = LastCheckpoint(dir + "/split");
  ASSERT_TRUE(x.sections.count("vit"));
  runtime_testing::ExpectSameCheckpointWeights("vit_cp2", x, y);
}

}  // namespace
}  // namespace maestro
