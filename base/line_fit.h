// SPDX-License-Identifier: Apache-2.0
// Weighted least-squares line y = a + b x, for cost lines (seconds of a
// micro-batch = fixed + per-sample x samples) fitted to measured ops: used
// by profile calibration (cli/) and the runtime's fitted timeline.
// May call: nothing. Thread safety: pure function.
#pragma once

#include <cstddef>
#include <vector>

namespace maestro {

// False (a and b untouched) when the sizes differ, no weight is positive or
// x does not vary.
inline bool FitWeightedLine(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& w,
                            double* a, double* b) {
  if (x.size() != y.size() || x.size() != w.size()) return false;
  double sw = 0, sx = 0, sy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sw += w[i];
    sx += w[i] * x[i];
    sy += w[i] * y[i];
  }
  if (!(sw > 0)) return false;
  const double mx = sx / sw, my = sy / sw;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxx += w[i] * (x[i] - mx) * (x[i] - mx);
    sxy += w[i] * (x[i] - mx) * (y[i] - my);
  }
  if (!(sxx > 0)) return false;
  *b = sxy / sxx;
  *a = my - *b * mx;
  return true;
}

}  // namespace maestro
