// SPDX-License-Identifier: Apache-2.0
// The profile file: measured section times per micro-batch size, the JSON
// array that `maestro-worker --profile` (and `maestro profile`) writes and
// `maestro-compile --profiles` reads (docs/spec.md, `[[profile]]`):
//   [{"section", "gpus", "micro_batch", "seconds",
//     "forward_seconds" (optional), "optimizer_seconds" (optional)}, ...]
// One format, read and written here only.
// May call: base, nlohmann-json. Thread safety: pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace maestro::plan {

// One measured point: a micro-batch of `micro_batch` samples through one
// replica of `gpus` GPUs/ranks (tp * pp * cp).
struct ProfilePoint {
  std::string section;
  int gpus = 1;
  int micro_batch = 1;
  double seconds = 0.0;            // forward + backward (forward alone when frozen)
  double forward_seconds = 0.0;    // its forward part (0: unknown)
  double optimizer_seconds = 0.0;  // the replica's optimizer step per training step (0: unknown or frozen)
};

// The time at `samples` samples per micro-batch of a measured curve:
// `points` are (micro-batch, seconds), sorted by micro-batch. Piecewise
// linear through them, extended by the nearest segment outside them, and
// never below what an affine cost with no negative fixed part allows: below
// the smallest point, its proportional share; above the largest, its value
// (a noisy sweep whose per-sample time rises with the size extrapolates to
// zero or below otherwise). One point: proportional. None, or samples <= 0: 0.
// The compiler's pricing and `maestro profile`'s calibration both use it.
double ProfileCurveAt(const std::vector<std::pair<double, double>>& points, double samples);

std::string ProfilePointsToJson(const std::vector<ProfilePoint>& points);
// InvalidArgument naming the point ("profile point 3: ...") when the text is
// not a JSON array of such objects; values are not range-checked here.
StatusOr<std::vector<ProfilePoint>> ProfilePointsFromJson(const std::string& text);

// The profile file: NotFound when it cannot be opened; InvalidArgument
// ("PATH: profile point 3: ...") when it is not one.
StatusOr<std::vector<ProfilePoint>> ReadProfileFile(const std::string& path);
// IOError naming the path when it cannot be written.
Status WriteProfileFile(const std::string& path, const std::vector<ProfilePoint>& points);

}  // namespace maestro::plan
