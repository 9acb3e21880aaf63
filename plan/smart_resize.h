// SPDX-License-Identifier: Apache-2.0
// The Qwen2-VL family's smart_resize: the one home of the rule that gives a
// native-resolution image its size, shared by the preprocessing
// (datasets/native_image.h) and the planner's per-sample pricing
// (compiler/sample_mix.h). docs/data.md, "### Native resolution (the
// Qwen2-VL family)".
// May call: base. Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <utility>

#include "base/status.h"

namespace maestro::plan {

// transformers' smart_resize (models/qwen2_vl/image_processing_qwen2_vl.py):
// (h_bar, w_bar), multiples of `factor`, close to (height, width) with
// min_pixels <= h_bar * w_bar <= max_pixels where the aspect ratio allows:
//   aspect = max(h, w) / min(h, w) > 200: refused ("absolute aspect ratio
//     must be smaller than 200, got <ratio>");
//   h_bar = round(h / factor) * factor (Python's round: half to even), w_bar
//     likewise; if h_bar * w_bar > max_pixels: beta = sqrt(h * w /
//     max_pixels), h_bar = max(factor, floor(h / beta / factor) * factor),
//     w_bar likewise; elif h_bar * w_bar < min_pixels: beta = sqrt(min_pixels
//     / (h * w)), h_bar = ceil(h * beta / factor) * factor, w_bar likewise.
// In doubles, operation for operation as Python computes it. InvalidArgument
// also for a side < 1 or a factor, min_pixels or max_pixels < 1.
StatusOr<std::pair<int64_t, int64_t>> SmartResize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                                  int64_t max_pixels);

}  // namespace maestro::plan
