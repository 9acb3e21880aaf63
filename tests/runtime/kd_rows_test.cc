// SPDX-License-Identifier: Apache-2.0
// KD's compact teacher rows (runtime/kd_rows.h):
//  - the sampled rows' KL estimate has an unbiased gradient: over 20,000
//    independent draws (one sample id each) the mean gradient equals full
//    KL(p_T || s_T)'s within 5 standard errors, as does the mean estimate;
//    top-K's gradient is measurably not the full one (its bias);
//  - the draws are a pure function of (seed, sample id, absolute position,
//    draw): a batch of 1 or 4, whole or in position chunks (ours and the
//    function's own, past kKdRowsChunkElements), the same ids; another seed
//    or sample id, others;
//  - top-K rows and TopKRowsKl reproduce MaskedPositionLoss's top-k term and
//    its gradient; bf16 values are the top-k rounded to bf16;
//  - an independent python3-torch reference (kd_rows_reference.py, written
//    from the published formulas with analytic gradients, fp64) gives the
//    same rows' entropy and top-K, KL_hat, top-K KL and their gradients
//    within 1e-5. Skips that case when no python3 has torch.
#include "runtime/kd_rows.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "base/status.h"
#include "runtime/vocab_loss.h"
#include "tests/fixtures/python3.h"
#include "tests/fixtures/scratch.h"
#include "tests/fixtures/test_paths.h"

namespace maestro::runtime {
namespace {

double MaxAbs(const torch::Tensor& t) {
  return t.abs().max().item<double>();
}

// Full KL(p_T || s_T) per position: teacher, student (B, L, V); returns (B, L).
torch::Tensor FullKl(const torch::Tensor& student, const torch::Tensor& teacher, double temperature) {
  auto t_logp = torch::log_softmax(teacher / temperature, -1);
  auto s_logp = torch::log_softmax(student / temperature, -1);
  return (t_logp.exp() * (t_logp - s_logp)).sum(-1);
}

TEST(KdRows, SampledGradientIsUnbiasedAndTopKIsNot) {
  constexpr int64_t kVocab = 12, kPositions = 3, kTrials = 20000, kDraws = 4;
  constexpr double kTemperature = 2.0;
  auto gen = at::detail::createCPUGenerator(41);
  const auto teacher = torch::empty({1, kPositions, kVocab}).normal_(0.0, 2.0, gen);
  const auto student = torch::empty({1, kPositions, kVocab}).normal_(0.0, 2.0, gen);

  auto z_full = student.clone().requires_grad_(true);
  const auto full_kl = FullKl(z_full, teacher, kTemperature);  // (1, L)
  full_kl.sum().backward();
  const auto full_grad = z_full.grad()[0];  // (L, V)

  // One trial per sample id: each row's draws are independent of the others'.
  std::vector<int64_t> ids(kTrials);
  std::iota(ids.begin(), ids.end(), 0);
  const auto rows = SampledTeacherRows(teacher.expand({kTrials, kPositions, kVocab}), kDraws, kTemperature,
                                       /*seed=*/7, ids, /*first_position=*/0);
  ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{kTrials, kPositions, kDraws + 1}));
  auto z = student.expand({kTrials, kPositions, kVocab}).clone().requires_grad_(true);
  const auto kl_hat = SampledRowsKl(z, rows, kTemperature);  // (trials, L)
  kl_hat.sum().backward();
  const auto grads = z.grad();  // (trials, L, V): each trial's gradient
  const double root_n = std::sqrt(static_cast<double>(kTrials));

  const auto grad_se = grads.std(0) / root_n;  // (L, V)
  const auto grad_err = (grads.mean(0) - full_grad).abs();
  const auto grad_tolerance = 5.0 * grad_se + 1e-7;
  EXPECT_TRUE((grad_err <= grad_tolerance).all().item<bool>()) << "mean sampled gradient - full gradient:\n"
                                                               << grads.mean(0) - full_grad << "\nstandard errors:\n"
                                                               << grad_se;
  const auto kl_se = kl_hat.detach().std(0) / root_n;  // (L)
  const auto kl_err = (kl_hat.detach().mean(0) - full_kl.detach()[0]).abs();
  EXPECT_TRUE((kl_err <= 5.0 * kl_se + 1e-7).all().item<bool>())
      << "mean KL_hat " << kl_hat.detach().mean(0) << " vs full KL " << full_kl.detach()[0] << ", SE " << kl_se;
  std::printf("sampled: max |mean grad - full| / SE = %.2f, max |mean KL_hat - KL| / SE = %.2f\n",
              (grad_err / grad_se).max().item<double>(), (kl_err / kl_se).max().item<double>());

  // Top-K (K = 3 of 12): renormalized over the top 3, the tail's mass is
  // missing from its target: its gradient is off by far more than sampling error.
  auto z_top = student.clone().requires_grad_(true);
  TopKRowsKl(z_top, TopKTeacherRows(teacher, 3, torch::kFloat32), kTemperature).sum().backward();
  const double bias = MaxAbs(z_top.grad()[0] - full_grad);
  std::printf("top-3: max |grad - full| = %.4f (sampled tolerance %.4f)\n", bias, grad_tolerance.max().item<double>());
  EXPECT_GT(bias, 10.0 * grad_tolerance.max().item<double>());
}

TEST(KdRows, DrawsArePureFunctionsOfSeedSampleAndPosition) {
  constexpr int64_t kVocab = 50, kPositions = 10, kDraws = 16;
  constexpr double kTemperature = 1.5;
  constexpr uint64_t kSeed = 123;
  auto gen = at::detail::createCPUGenerator(5);
  const auto logits = torch::empty({4, kPositions, kVocab}).normal_(0.0, 1.0, gen);
  const std::vector<int64_t> sample_ids = {7, 3, 11, 5};
  const auto batch = SampledTeacherRows(logits, kDraws, kTemperature, kSeed, sample_ids, 100);  // (4, L, n + 1)

  // The rows: integral ids in [0, V), the exact entropy.
  const auto ids = batch.narrow(2, 0, kDraws);
  EXPECT_TRUE(ids.eq(ids.round()).all().item<bool>());
  EXPECT_GE(ids.min().item<double>(), 0.0);
  EXPECT_LT(ids.max().item<double>(), static_cast<double>(kVocab));
  const auto logp = torch::log_softmax(logits.to(torch::kFloat64) / kTemperature, -1);
  const auto entropy = -(logp.exp() * logp).sum(-1);
  EXPECT_LE(MaxAbs(batch.select(2, kDraws).to(torch::kFloat64) - entropy), 1e-6);

  // Sample 11 alone, whole and in two chunks of positions.
  const auto alone = SampledTeacherRows(logits.narrow(0, 2, 1), kDraws, kTemperature, kSeed, {11}, 100);
  EXPECT_TRUE(torch::equal(alone[0], batch[2]));
  const auto head = SampledTeacherRows(logits.narrow(0, 2, 1).narrow(1, 0, 4), kDraws, kTemperature, kSeed, {11}, 100);
  const auto tail =
      SampledTeacherRows(logits.narrow(0, 2, 1).narrow(1, 4, kPositions - 4), kDraws, kTemperature, kSeed, {11}, 104);
  EXPECT_TRUE(torch::equal(torch::cat({head, tail}, 1)[0], batch[2]));

  // Another seed, another sample id, another first position: other draws.
  const auto reseeded = SampledTeacherRows(logits.narrow(0, 2, 1), kDraws, kTemperature, kSeed + 1, {11}, 100);
  const auto renamed = SampledTeacherRows(logits.narrow(0, 2, 1), kDraws, kTemperature, kSeed, {12}, 100);
  const auto shifted = SampledTeacherRows(logits.narrow(0, 2, 1), kDraws, kTemperature, kSeed, {11}, 101);
  for (const auto& other : {reseeded, renamed, shifted}) {
    EXPECT_FALSE(torch::equal(other.narrow(2, 0, kDraws), alone.narrow(2, 0, kDraws)));
  }

  // A padded vocabulary (-inf logits past V - 8): never drawn, and the
  // entropy that of the real tokens (not 0 * -inf).
  const auto padded = logits.clone();
  padded.narrow(2, kVocab - 8, 8).fill_(-std::numeric_limits<float>::infinity());
  const auto padded_rows = SampledTeacherRows(padded, kDraws, kTemperature, kSeed, sample_ids, 0);
  EXPECT_LT(padded_rows.narrow(2, 0, kDraws).max().item<double>(), static_cast<double>(kVocab - 8));
  const auto real_logp = torch::log_softmax(logits.narrow(2, 0, kVocab - 8).to(torch::kFloat64) / kTemperature, -1);
  EXPECT_LE(MaxAbs(padded_rows.select(2, kDraws).to(torch::kFloat64) + (real_logp.exp() * real_logp).sum(-1)), 1e-6);
}

// Past kKdRowsChunkElements the functions chunk positions themselves: the
// same rows as two calls each under the limit.
TEST(KdRows, OwnChunksEqualCallersChunks) {
  constexpr int64_t kVocab = int64_t{1} << 20, kDraws = 8;
  const int64_t positions = kKdRowsChunkElements / kVocab + 1;  // two chunks inside
  const int64_t split = positions / 2;
  auto gen = at::detail::createCPUGenerator(9);
  const auto logits = torch::empty({1, positions, kVocab}).normal_(0.0, 3.0, gen);
  const auto whole = SampledTeacherRows(logits, kDraws, 1.0, 1, {0}, 0);
  const auto parts =
      torch::cat({SampledTeacherRows(logits.narrow(1, 0, split), kDraws, 1.0, 1, {0}, 0),
                  SampledTeacherRows(logits.narrow(1, split, positions - split), kDraws, 1.0, 1, {0}, split)},
                 1);
  EXPECT_TRUE(torch::equal(whole, parts));
  const auto top_whole = TopKTeacherRows(logits, 4, torch::kBFloat16);
  const auto top_parts = torch::cat({TopKTeacherRows(logits.narrow(1, 0, split), 4, torch::kBFloat16),
                                     TopKTeacherRows(logits.narrow(1, split, positions - split), 4, torch::kBFloat16)},
                                    1);
  EXPECT_TRUE(torch::equal(top_whole, top_parts));
}

TEST(KdRows, TopKRowsReproduceMaskedPositionLoss) {
  constexpr int64_t kSamples = 2, kPositions = 5, kVocab = 40, kTop = 7;
  constexpr double kTemperature = 1.5;
  auto gen = at::detail::createCPUGenerator(3);
  const auto teacher = torch::empty({kSamples, kPositions, kVocab}).normal_(0.0, 3.0, gen);
  const auto student = torch::empty({kSamples, kPositions, kVocab}).normal_(0.0, 2.0, gen);
  const auto weights = torch::empty({kSamples, kPositions}).normal_(0.0, 1.0, gen);

  plan::LossDesc loss;
  loss.kd_alpha = 1.0;  // KL only: (1 - a) CE = 0
  loss.temperature = kTemperature;
  loss.top_k = static_cast<int>(kTop);
  auto z_ref = student.clone().requires_grad_(true);
  const auto targets = torch::zeros({kSamples, kPositions}, torch::kLong);
  const auto ref = MaskedPositionLoss(z_ref, targets, teacher, loss) / (kTemperature * kTemperature);
  (ref * weights).sum().backward();

  auto z = student.clone().requires_grad_(true);
  const auto rows = TopKTeacherRows(teacher, kTop, torch::kFloat32);
  ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{kSamples, kPositions, 2 * kTop}));
  const auto kl = TopKRowsKl(z, rows, kTemperature);
  ASSERT_EQ(kl.sizes(), (std::vector<int64_t>{kSamples, kPositions}));
  (kl * weights).sum().backward();
  EXPECT_LE(MaxAbs(kl.detach() - ref.detach()), 1e-6);
  EXPECT_LE(MaxAbs(z.grad() - z_ref.grad()), 1e-6);

  // The layout: descending raw logits, then their ids; bf16 values are the
  // fp32 top-k rounded to bf16 (the ids the same).
  const auto top = teacher.topk(kTop, -1);
  EXPECT_TRUE(torch::equal(rows.narrow(2, 0, kTop), std::get<0>(top)));
  EXPECT_TRUE(torch::equal(rows.narrow(2, kTop, kTop), std::get<1>(top).to(torch::kFloat32)));
  const auto bf16 = TopKTeacherRows(teacher.to(torch::kBFloat16).to(torch::kFloat32), kTop, torch::kBFloat16);
  const auto rounded = TopKTeacherRows(teacher, kTop, torch::kBFloat16);
  EXPECT_TRUE(torch::equal(rounded.narrow(2, 0, kTop), std::get<0>(top).to(torch::kBFloat16).to(torch::kFloat32)));
  EXPECT_TRUE(torch::equal(rounded.narrow(2, kTop, kTop), rows.narrow(2, kTop, kTop)));
  EXPECT_TRUE(torch::equal(bf16.narrow(2, 0, kTop), rounded.narrow(2, 0, kTop)));
}

TEST(KdRows, RefusesBadArguments) {
  const auto logits = torch::zeros({1, 2, 8});
  EXPECT_THROW(TopKTeacherRows(logits, 0, torch::kFloat32), c10::Error);
  EXPECT_THROW(TopKTeacherRows(logits, 9, torch::kFloat32), c10::Error);
  EXPECT_THROW(TopKTeacherRows(logits, 2, torch::kLong), c10::Error);
  EXPECT_THROW(TopKTeacherRows(torch::zeros({1, 1, 1}).expand({1, 1, kMaxExactFloatId}), 1, torch::kFloat32),
               c10::Error);
  EXPECT_THROW(SampledTeacherRows(logits, 0, 1.0, 1, {0}, 0), c10::Error);
  EXPECT_THROW(SampledTeacherRows(logits, 2, 0.0, 1, {0}, 0), c10::Error);
  EXPECT_THROW(SampledTeacherRows(logits, 2, 1.0, 1, {0, 1}, 0), c10::Error);
  EXPECT_THROW(TopKRowsKl(logits, torch::zeros({1, 2, 5}), 1.0), c10::Error);     // odd width
  EXPECT_THROW(TopKRowsKl(logits, torch::zeros({1, 2, 18}), 1.0), c10::Error);    // K > V
  EXPECT_THROW(TopKRowsKl(logits, torch::zeros({1, 3, 4}), 1.0), c10::Error);     // L differs
  EXPECT_THROW(SampledRowsKl(logits, torch::zeros({1, 2, 1}), 1.0), c10::Error);  // n = 0
}

// ---- the python3-torch reference ---------------------------------------------------

void WriteFloats(const std::string& path, const torch::Tensor& t) {
  const auto c = t.detach().to(torch::kFloat32).contiguous();
  ASSERT_TRUE(fixtures::WriteFile(
      path, std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()) * sizeof(float))));
}

void ExpectMatches(const std::string& path, const torch::Tensor& got, const std::string& what) {
  const std::vector<float> want = fixtures::ReadFloatFile(path);
  ASSERT_EQ(static_cast<int64_t>(want.size()), got.numel()) << what;
  const auto ref = torch::tensor(want).reshape(got.sizes());
  const double err = MaxAbs(got.detach().to(torch::kFloat32) - ref);
  std::printf("%-14s max |C++ - python| = %.3g\n", what.c_str(), err);
  EXPECT_LE(err, 1e-5) << what;
}

TEST(KdRows, MatchTheTorchReference) {
  constexpr int64_t kSamples = 2, kPositions = 3, kVocab = 20, kDraws = 6, kTop = 5;
  constexpr double kTemperature = 1.7;
  auto gen = at::detail::createCPUGenerator(17);
  const auto teacher = torch::empty({kSamples, kPositions, kVocab}).normal_(0.0, 2.0, gen);
  const auto student = torch::empty({kSamples, kPositions, kVocab}).normal_(0.0, 2.0, gen);
  const auto probe = torch::empty({kSamples, kPositions}).normal_(0.0, 1.0, gen);
  const auto sampled = SampledTeacherRows(teacher, kDraws, kTemperature, 99, {3, 9}, 40);
  const auto top = TopKTeacherRows(teacher, kTop, torch::kFloat32);

  auto z_sampled = student.clone().requires_grad_(true);
  const auto kl_sampled = SampledRowsKl(z_sampled, sampled, kTemperature);
  (kl_sampled * probe).sum().backward();
  auto z_top = student.clone().requires_grad_(true);
  const auto kl_top = TopKRowsKl(z_top, top, kTemperature);
  (kl_top * probe).sum().backward();

  const std::string dir = fixtures::ScratchDir("kd_rows_", "reference");
  std::ofstream(dir + "/case.txt") << kSamples << " " << kPositions << " " << kVocab << " " << kDraws << " " << kTop
                                   << " " << kTemperature << "\n";
  WriteFloats(dir + "/teacher.f32", teacher);
  WriteFloats(dir + "/student.f32", student);
  WriteFloats(dir + "/probe.f32", probe);
  WriteFloats(dir + "/sampled_rows.f32", sampled);
  const Status ran = fixtures::RunPython3WithTorch(
      std::string(MAESTRO_SOURCE_DIR) + "/tests/runtime/kd_rows_reference.py", {dir}, dir + "/reference.log");
  if (ran.code() == StatusCode::kUnavailable) GTEST_SKIP() << ran.ToString();
  ASSERT_TRUE(ran.ok()) << ran.ToString();

  ExpectMatches(dir + "/entropy.f32", sampled.select(2, kDraws), "entropy");
  ExpectMatches(dir + "/topk_rows.f32", top, "top-K rows");
  ExpectMatches(dir + "/kl_sampled.f32", kl_sampled, "KL_hat");
  ExpectMatches(dir + "/grad_sampled.f32", z_sampled.grad(), "KL_hat grad");
  ExpectMatches(dir + "/kl_topk.f32", kl_top, "top-K KL");
  ExpectMatches(dir + "/grad_topk.f32", z_top.grad(), "top-K KL grad");
}

}  // namespace
}  // namespace maestro::runtime
