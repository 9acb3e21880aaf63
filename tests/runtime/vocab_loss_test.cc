// SPDX-License-Identifier: Apache-2.0
// The chunked vocabulary loss (runtime/vocab_loss.h, plan/loss_chunk.h):
// over chunks of positions, each recomputed in backward, the per-sample
// losses and every gradient (the hidden state's, the LM head's) equal the
// whole computation's, for cross-entropy, full-vocabulary KD and top-k KD,
// with ignored targets, uneven last chunks and CP-style given target counts;
// and the chunk rule itself. (That a chunked run holds one chunk's logits
// chain is measured on a real run: memory_run_test's
// ChunkedVocabularyLossHoldsOneChunksLogits.)
#include "runtime/vocab_loss.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "datasets/demo_data.h"
#include "plan/loss_chunk.h"
#include "runtime/models/decoder.h"
#include "runtime/models/encoders.h"
#include "tests/fixtures/models.h"

namespace maestro::runtime {
namespace {

constexpr int64_t kSamples = 3, kPositions = 10, kHidden = 32, kVocab = 50, kTeacherHidden = 24;

struct LossRun {
  torch::Tensor per_sample;                    // (B)
  torch::Tensor hidden_grad;                   // (B, T, C)
  std::map<std::string, torch::Tensor> grads;  // the model's parameters with a gradient
  bool logits_kept = false;
};

// One PerSampleLoss over `chunk` positions a chunk and its backward, with a
// different weight per sample (so a per-sample error cannot cancel out).
LossRun RunLoss(DecoderLMImpl* lm, const torch::Tensor& hidden0, const torch::Tensor& targets,
                const torch::Tensor& teacher_hidden, const torch::Tensor& teacher_head, const plan::LossDesc& loss,
                const torch::Tensor& target_counts, int64_t chunk) {
  lm->zero_grad();
  auto hidden = hidden0.clone().requires_grad_(true);
  torch::Tensor logits;
  LossRun out;
  out.per_sample =
      PerSampleLoss(lm, hidden, targets, TeacherRows{plan::TeacherRowsForm::kHidden, teacher_hidden, teacher_head},
                    loss, target_counts, chunk, &logits);
  out.logits_kept = logits.defined();
  auto weights = torch::arange(1, kSamples + 1, torch::kFloat32);  // (B)
  (out.per_sample * weights).sum().backward();
  out.hidden_grad = hidden.grad().clone();
  for (const auto& p : lm->named_parameters()) {
    if (p.value().grad().defined()) out.grads[p.key()] = p.value().grad().clone();
  }
  return out;
}

void ExpectSame(const LossRun& whole, const LossRun& chunked, const std::string& what) {
  EXPECT_TRUE(torch::allclose(whole.per_sample, chunked.per_sample, 1e-5, 1e-6))
      << what << ": " << whole.per_sample << " vs " << chunked.per_sample;
  EXPECT_TRUE(torch::allclose(whole.hidden_grad, chunked.hidden_grad, 1e-4, 1e-6)) << what << ": hidden's gradient";
  ASSERT_EQ(whole.grads.size(), chunked.grads.size()) << what;
  ASSERT_FALSE(whole.grads.empty()) << what << ": the head must get a gradient";
  for (const auto& [name, g] : whole.grads) {
    ASSERT_TRUE(chunked.grads.count(name)) << what << ": " << name;
    EXPECT_TRUE(torch::allclose(g, chunked.grads.at(name), 1e-4, 1e-6)) << what << ": " << name << "'s gradient";
  }
}

TEST(VocabLoss, ChunksRecomputedInBackwardEqualTheWholeLossAndGradients) {
  torch::manual_seed(7);
  for (bool tied : {false, true}) {
    plan::ModelDesc d = fixtures::DecoderModel({kHidden, 1, 4, 2, 48, kVocab});
    d.tie_embeddings = tied;
    auto built = BuildModel(d);
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    auto* lm = (*built)->as<DecoderLMImpl>();
    ASSERT_NE(lm, nullptr);
    const auto hidden = torch::randn({kSamples, kPositions, kHidden});
    auto targets = torch::randint(0, kVocab, {kSamples, kPositions}, torch::kInt64);
    targets[0][0] = datasets::kIgnoreTarget;  // ignored positions in the first and the last chunk
    targets[2][kPositions - 1] = datasets::kIgnoreTarget;
    targets[1][4] = datasets::kIgnoreTarget;
    const auto teacher_hidden = torch::randn({kSamples, kPositions, kTeacherHidden});
    const auto teacher_head = torch::randn({kVocab, kTeacherHidden});
    const auto cp_counts = torch::tensor({17.0f, 9.0f, 30.0f});  // a CP rank's: the whole sequence's counts

    plan::LossDesc ce;
    plan::LossDesc kd;
    kd.kind = "kd";
    kd.kd_alpha = 0.3;
    kd.temperature = 2.0;
    plan::LossDesc kd_top = kd;
    kd_top.top_k = 5;
    struct Case {
      const char* name;
      plan::LossDesc loss;
      bool teacher;
      bool counts;
    };
    for (const Case& c : {Case{"cross-entropy", ce, false, false}, Case{"kd", kd, true, false},
                          Case{"kd top-5", kd_top, true, false}, Case{"kd, CP target counts", kd, true, true}}) {
      const torch::Tensor th = c.teacher ? teacher_hidden : torch::Tensor();
      const torch::Tensor counts = c.counts ? cp_counts : torch::Tensor();
      const LossRun whole = RunLoss(lm, hidden, targets, th, teacher_head, c.loss, counts, kPositions);
      EXPECT_TRUE(whole.logits_kept) << c.name;
      for (int64_t chunk : {1, 3, 4, 9}) {  // uneven last chunks: 3 x 3 + 1, 4 + 4 + 2, 9 + 1
        const LossRun chunked = RunLoss(lm, hidden, targets, th, teacher_head, c.loss, counts, chunk);
        const std::string what = std::string(c.name) + (tied ? ", tied" : "") + ", chunk " + std::to_string(chunk);
        EXPECT_FALSE(chunked.logits_kept) << what;
        ExpectSame(whole, chunked, what);
      }
    }
  }
}

// Under no_grad (evaluation) a chunked loss is the same number and builds
// no graph.
TEST(VocabLoss, WithoutGradTheChunksComputeTheSameLoss) {
  torch::manual_seed(3);
  auto built = BuildModel(fixtures::DecoderModel({kHidden, 1, 4, 2, 48, kVocab}));
  ASSERT_TRUE(built.ok());
  auto* lm = (*built)->as<DecoderLMImpl>();
  const auto hidden = torch::randn({kSamples, kPositions, kHidden});
  const auto targets = torch::randint(0, kVocab, {kSamples, kPositions}, torch::kInt64);
  torch::NoGradGuard no_grad;
  torch::Tensor logits;
  const auto whole = PerSampleLoss(lm, hidden, targets, TeacherRows{}, plan::LossDesc{}, {}, kPositions, &logits);
  const auto chunked = PerSampleLoss(lm, hidden, targets, TeacherRows{}, plan::LossDesc{}, {}, 4, &logits);
  EXPECT_TRUE(torch::allclose(whole, chunked, 1e-5, 1e-6));
  EXPECT_FALSE(chunked.requires_grad());
}

// The rule: a micro-batch of at most kLossWholeTokens tokens runs whole; a
// larger one in chunks of at most kLossChunkTokens tokens (one position a
// chunk at the least).
TEST(VocabLoss, ChunkRuleBoundsTheTokensOfAChunk) {
  const int64_t whole = plan::kLossWholeTokens, k = plan::kLossChunkTokens;
  ASSERT_LE(k, whole);
  EXPECT_EQ(plan::LossChunkPositions(1, whole), whole);
  EXPECT_FALSE(plan::LossIsChunked(1, whole));
  EXPECT_EQ(plan::LossChunkPositions(4, whole / 4), whole / 4);
  EXPECT_TRUE(plan::LossIsChunked(1, whole + 1));
  EXPECT_EQ(plan::LossChunkPositions(1, whole + 1), k);
  for (int64_t samples : {1, 2, 3, 8, 16}) {
    for (int64_t positions : {k / 2, k, whole, 4 * whole, int64_t{32768}}) {
      const int64_t chunk = plan::LossChunkPositions(samples, positions);
      EXPECT_GE(chunk, 1);
      EXPECT_LE(chunk, positions);
      if (samples * positions > whole) {
        EXPECT_LE(samples * chunk, k) << samples << " x " << positions;
      } else {
        EXPECT_EQ(chunk, positions);
      }
    }
  }
  EXPECT_EQ(plan::LossChunkPositions(2 * k, 8), 1) << "more samples than the chunk's tokens: one position a chunk";
}

}  // namespace
}  // namespace maestro::runtime
