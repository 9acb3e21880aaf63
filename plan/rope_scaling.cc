// SPDX-License-Identifier: Apache-2.0
// RoPE inverse frequencies and the cos/sin scale (no torch in this file).
#include "plan/rope_scaling.h"

#include <algorithm>
#include <cmath>

namespace maestro::plan {
namespace {

constexpr double kPi = 3.14159265358979323846;

// theta^(-2i/D), i in [0, D/2): the unscaled frequencies.
std::vector<double> DefaultFrequencies(double theta, int64_t head_dim) {
  std::vector<double> inv(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv.size(); ++i) {
    inv[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  }
  return inv;
}

// Llama 3.1: wavelengths above original / low_freq_factor are divided by
// factor, those below original / high_freq_factor kept, and those between
// blended by how many times they fit in the original context.
void ScaleLlama3(const RopeScaling& s, std::vector<double>& inv) {
  const double original = s.original_max_position_embeddings;
  const double low_freq_wavelen = original / s.low_freq_factor;
  const double high_freq_wavelen = original / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * kPi / f;
    if (wavelen > low_freq_wavelen) {
      f /= s.factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
}

// YaRN ("NTK-by-parts"): the dimension at which a frequency turns
// `rotations` times over the original context, D ln(L / (2 pi r)) / (2 ln theta).
double CorrectionDim(double rotations, int64_t head_dim, double theta, double original) {
  return static_cast<double>(head_dim) * std::log(original / (rotations * 2 * kPi)) / (2 * std::log(theta));
}

// Dimensions below the beta_fast one keep their frequency (extrapolation),
// those above the beta_slow one are divided by factor (interpolation), a
// linear ramp between.
void ScaleYarn(double theta, int64_t head_dim, const RopeScaling& s, std::vector<double>& inv) {
  double low = CorrectionDim(s.beta_fast, head_dim, theta, s.original_max_position_embeddings);
  double high = CorrectionDim(s.beta_slow, head_dim, theta, s.original_max_position_embeddings);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(head_dim - 1));
  if (low == high) high += 0.001;  // HF's guard against a zero-width ramp
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    inv[i] = inv[i] / s.factor * ramp + inv[i] * (1 - ramp);
  }
}

double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

}  // namespace

const char* RopeTypeName(RopeType type) {
  switch (type) {
    case RopeType::kDefault: return "default";
    case RopeType::kLinear: return "linear";
    case RopeType::kLlama3: return "llama3";
    case RopeType::kYarn: return "yarn";
    case RopeType::kDynamic: return "dynamic";
  }
  return "unknown";
}

std::optional<RopeType> RopeTypeOfName(const std::string& name) {
  for (int code = 0; code < kRopeTypeCount; ++code) {
    const auto type = static_cast<RopeType>(code);
    if (name == RopeTypeName(type)) return type;
  }
  return std::nullopt;
}

std::vector<double> RopeInverseFrequencies(double theta, int64_t head_dim, const RopeScaling& s) {
  std::vector<double> inv = DefaultFrequencies(theta, head_dim);
  switch (s.type) {
    case RopeType::kLinear:
      for (double& f : inv) f /= s.factor;
      break;
    case RopeType::kLlama3: ScaleLlama3(s, inv); break;
    case RopeType::kYarn: ScaleYarn(theta, head_dim, s, inv); break;
    case RopeType::kDefault:
    case RopeType::kDynamic: break;
  }
  return inv;
}

double RopeAttentionFactor(const RopeScaling& s) {
  if (s.type != RopeType::kYarn) return 1.0;
  if (s.attention_factor > 0) return s.attention_factor;
  if (s.mscale > 0 && s.mscale_all_dim > 0) {
    return YarnMscale(s.factor, s.mscale) / YarnMscale(s.factor, s.mscale_all_dim);
  }
  return YarnMscale(s.factor, 1.0);
}

}  // namespace maestro::plan
