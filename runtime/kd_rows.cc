// SPDX-License-Identifier: Apache-2.0
#include "runtime/kd_rows.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "base/splitmix.h"

namespace maestro::runtime {
namespace {

// Calls fn(start, len) over the positions [0, l) in chunks whose (b, len, v)
// tensors hold at most kKdRowsChunkElements elements (one position at least).
template <typename Fn>
void ForPositionChunks(int64_t b, int64_t l, int64_t v, const Fn& fn) {
  const int64_t len = std::max<int64_t>(1, kKdRowsChunkElements / std::max<int64_t>(1, b * v));
  for (int64_t start = 0; start < l; start += len) fn(start, std::min(len, l - start));
}

void CheckTeacherLogits(const torch::Tensor& logits, const char* what) {
  TORCH_CHECK(logits.defined() && logits.dim() == 3, what, ": teacher logits must be (B, L, V)");
  TORCH_CHECK(logits.is_floating_point(), what, ": teacher logits must be floating point, got ", logits.scalar_type());
  TORCH_CHECK(logits.size(2) >= 1 && logits.size(2) < kMaxExactFloatId, what, ": the vocabulary (", logits.size(2),
              ") must be in [1, 2^24): ids travel as exact fp32 values");
}

// The student's logits and the rows beside them; returns V.
int64_t CheckStudentAndRows(const torch::Tensor& student_logits, const torch::Tensor& rows, double temperature,
                            const char* what) {
  TORCH_CHECK(student_logits.defined() && student_logits.dim() == 3, what, ": student logits must be (B, L, V)");
  TORCH_CHECK(rows.defined() && rows.dim() == 3, what, ": rows must be (B, L, width)");
  TORCH_CHECK(rows.size(0) == student_logits.size(0) && rows.size(1) == student_logits.size(1), what, ": rows ",
              rows.sizes(), " do not match the student logits ", student_logits.sizes());
  TORCH_CHECK(rows.device() == student_logits.device(), what, ": rows on ", rows.device(), ", student logits on ",
              student_logits.device());
  TORCH_CHECK(temperature > 0.0, what, ": the temperature must be positive, got ", temperature);
  const int64_t v = student_logits.size(2);
  TORCH_CHECK(v >= 1 && v < kMaxExactFloatId, what, ": the vocabulary (", v, ") must be in [1, 2^24)");
  return v;
}

torch::TensorOptions Fp32On(const torch::Tensor& like) {
  return torch::TensorOptions().dtype(torch::kFloat32).device(like.device());
}

// (B, L, n) fp64 uniforms in [0, 1), on the host: draw j of position l of
// sample b is SplitMix64's stream j of the key (seed, sample_ids[b],
// first_position + l), 53 bits.
torch::Tensor DrawUniforms(uint64_t seed, const std::vector<int64_t>& sample_ids, int64_t first_position,
                           int64_t positions, int64_t draws) {
  const auto b = static_cast<int64_t>(sample_ids.size());
  auto uniforms = torch::empty({b, positions, draws}, torch::kFloat64);
  double* out = uniforms.data_ptr<double>();
  const uint64_t seed_key = SplitMix64(seed);
  for (int64_t s = 0; s < b; ++s) {
    const uint64_t sample_key = SplitMix64(seed_key ^ static_cast<uint64_t>(sample_ids[static_cast<size_t>(s)]));
    for (int64_t p = 0; p < positions; ++p) {
      uint64_t state = SplitMix64(sample_key ^ static_cast<uint64_t>(first_position + p));
      for (int64_t j = 0; j < draws; ++j) *out++ = static_cast<double>(SplitMix64Next(state) >> 11) * 0x1.0p-53;
    }
  }
  return uniforms;
}

}  // namespace

torch::Tensor TopKTeacherRows(const torch::Tensor& teacher_logits, int64_t k, torch::ScalarType values_dtype) {
  CheckTeacherLogits(teacher_logits, "TopKTeacherRows");
  const int64_t b = teacher_logits.size(0), l = teacher_logits.size(1), v = teacher_logits.size(2);
  TORCH_CHECK(k >= 1 && k <= v, "TopKTeacherRows: k (", k, ") must be in [1, V = ", v, "]");
  TORCH_CHECK(c10::isFloatingType(values_dtype), "TopKTeacherRows: values_dtype must be a float type, got ",
              values_dtype);
  torch::NoGradGuard no_grad;
  auto rows = torch::empty({b, l, 2 * k}, Fp32On(teacher_logits));  // (B, L, 2K)
  ForPositionChunks(b, l, v, [&](int64_t start, int64_t len) {
    auto top = teacher_logits.narrow(1, start, len)
                   .to(torch::kFloat32)
                   .topk(k, -1, /*largest=*/true,
                         /*sorted=*/true);  // (B, len, K) x 2
    auto part = rows.narrow(1, start, len);
    part.narrow(2, 0, k).copy_(std::get<0>(top).to(values_dtype));  // rounded, then back to fp32
    part.narrow(2, k, k).copy_(std::get<1>(top));                   // int64 ids -> exact fp32
  });
  return rows;
}

torch::Tensor SampledTeacherRows(const torch::Tensor& teacher_logits, int64_t draws, double temperature, uint64_t seed,
                                 const std::vector<int64_t>& sample_ids, int64_t first_position) {
  CheckTeacherLogits(teacher_logits, "SampledTeacherRows");
  const int64_t b = teacher_logits.size(0), l = teacher_logits.size(1), v = teacher_logits.size(2);
  TORCH_CHECK(draws >= 1, "SampledTeacherRows: draws (", draws, ") must be at least 1");
  TORCH_CHECK(temperature > 0.0, "SampledTeacherRows: the temperature must be positive, got ", temperature);
  TORCH_CHECK(static_cast<int64_t>(sample_ids.size()) == b, "SampledTeacherRows: ", sample_ids.size(),
              " sample ids for a batch of ", b);
  torch::NoGradGuard no_grad;
  const auto uniforms = DrawUniforms(seed, sample_ids, first_position, l, draws).to(teacher_logits.device());
  auto rows = torch::empty({b, l, draws + 1}, Fp32On(teacher_logits));  // (B, L, n + 1)
  ForPositionChunks(b, l, v, [&](int64_t start, int64_t len) {
    // fp64 throughout, so the CDF's rounding moves a draw across a token
    // boundary with odds ~V * 1e-16 (fp32: ~V * 1e-7), on any device.
    // Two (B, len, V) fp64 temporaries at most: x then log p, log p then p.
    auto x = teacher_logits.narrow(1, start, len).to(torch::kFloat64, /*non_blocking=*/false, /*copy=*/true);
    auto logp = torch::log_softmax(x.div_(temperature), -1);  // (B, len, V)
    x = torch::Tensor();
    auto probs = logp.exp();
    // -inf logits (a padded vocabulary) have p = 0 and contribute 0 to H, not 0 * -inf.
    auto entropy = -logp.clamp_min_(std::numeric_limits<double>::lowest()).mul_(probs).sum(-1, /*keepdim=*/true);
    logp = torch::Tensor();                                                             // entropy: (B, len, 1)
    auto& cdf = probs.cumsum_(-1);                                                      // (B, len, V)
    auto targets = uniforms.narrow(1, start, len) * cdf.narrow(2, v - 1, 1);            // (B, len, n)
    auto ids = torch::searchsorted(cdf, targets, /*out_int32=*/false, /*right=*/true);  // first cdf > target
    auto part = rows.narrow(1, start, len);
    part.narrow(2, 0, draws).copy_(ids.clamp_max_(v - 1));
    part.narrow(2, draws, 1).copy_(entropy);
  });
  return rows;
}

torch::Tensor TopKRowsKl(const torch::Tensor& student_logits, const torch::Tensor& rows, double temperature) {
  const int64_t v = CheckStudentAndRows(student_logits, rows, temperature, "TopKRowsKl");
  const int64_t width = rows.size(2);
  TORCH_CHECK(width >= 2 && width % 2 == 0 && width / 2 <= v, "TopKRowsKl: a top-K row's width (", width,
              ") must be 2K with K in [1, V = ", v, "]");
  const int64_t k = width / 2;
  const auto teacher = rows.detach().to(torch::kFloat32);
  auto t_logp = torch::log_softmax(teacher.narrow(2, 0, k) / temperature, -1);  // (B, L, K) renormalized over K
  auto ids = teacher.narrow(2, k, k).to(torch::kLong);                          // (B, L, K)
  auto s_logp = torch::log_softmax(student_logits.to(torch::kFloat32) / temperature, -1).gather(-1, ids);
  return (t_logp.exp() * (t_logp - s_logp)).sum(-1);  // (B, L)
}

torch::Tensor SampledRowsKl(const torch::Tensor& student_logits, const torch::Tensor& rows, double temperature) {
  CheckStudentAndRows(student_logits, rows, temperature, "SampledRowsKl");
  const int64_t draws = rows.size(2) - 1;
  TORCH_CHECK(draws >= 1, "SampledRowsKl: a sampled row's width (", rows.size(2), ") must be n + 1 with n >= 1");
  const auto teacher = rows.detach().to(torch::kFloat32);
  auto ids = teacher.narrow(2, 0, draws).to(torch::kLong);  // (B, L, n)
  auto entropy = teacher.select(2, draws);                  // (B, L)
  auto s_logp = torch::log_softmax(student_logits.to(torch::kFloat32) / temperature, -1).gather(-1, ids);
  return -s_logp.mean(-1) - entropy;  // (B, L)
}

}  // namespace maestro::runtime
