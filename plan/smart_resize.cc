// SPDX-License-Identifier: Apache-2.0
#include "plan/smart_resize.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace maestro::plan {

StatusOr<std::pair<int64_t, int64_t>> SmartResize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                                  int64_t max_pixels) {
  // Sides past 2^26 would make height * width inexact in a double (Python's
  // ints are exact); no image comes near (kDefaultMaxPixels is 2^26 pixels).
  constexpr int64_t kMaxSide = int64_t{1} << 26;
  if (height < 1 || width < 1 || height > kMaxSide || width > kMaxSide) {
    return Status::InvalidArgument(
        fmt::format("smart_resize: image of {}x{} (height x width) must have sides in "
                    "[1, 2^26]",
                    height, width));
  }
  if (factor < 1 || min_pixels < 1 || max_pixels < 1) {
    return Status::InvalidArgument(fmt::format("smart_resize: factor {}, min_pixels {} and max_pixels {} must be >= 1",
                                               factor, min_pixels, max_pixels));
  }
  const double h = static_cast<double>(height);
  const double w = static_cast<double>(width);
  const double f = static_cast<double>(factor);
  const double aspect = static_cast<double>(std::max(height, width)) / static_cast<double>(std::min(height, width));
  if (aspect > 200) {
    return Status::InvalidArgument(
        fmt::format("absolute aspect ratio must be smaller than 200, got {} ({}x{}); crop "
                    "or pad the image",
                    aspect, height, width));
  }
  // Python's round() on a float rounds half to even: std::nearbyint in the
  // default rounding mode (FE_TONEAREST) does the same.
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  const double area = static_cast<double>(height * width);  // exact: both sides <= 2^26
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(area / static_cast<double>(max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / area);
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return std::make_pair(h_bar, w_bar);
}

}  // namespace maestro::plan
