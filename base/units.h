// SPDX-License-Identifier: Apache-2.0
// Bytes and counts as people read them, the one formatting every report,
// error and log line uses (compiler report and explain, planner errors, the
// launcher's buffer descriptions).
//
// Owns: kGiB, GiBText, HumanBytes, HumanCount.
// May call: fmt.
// Thread safety: pure functions.
#pragma once

#include <fmt/format.h>

#include <string>

namespace maestro {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// "12.3" (GiB, one decimal, no unit): table columns headed "GiB".
inline std::string GiBText(double bytes) {
  return fmt::format("{:.1f}", bytes / kGiB);
}

// How a whole number of units is written: "4.0 MiB" (reports, whose columns
// line up) or "4 MiB" (messages).
enum class WholeUnits { kKeepDecimal, kTrimDecimal };

// "12.3 GiB", "4.0 MiB", "2.5 KiB", "17 B": the largest unit (up to TiB) not
// above `bytes`, one decimal.
inline std::string HumanBytes(double bytes, WholeUnits whole = WholeUnits::kKeepDecimal) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{:.0f} B", bytes);
  if (whole == WholeUnits::kTrimDecimal && bytes == static_cast<double>(static_cast<long long>(bytes))) {
    return fmt::format("{} {}", static_cast<long long>(bytes), kUnits[u]);
  }
  return fmt::format("{:.1f} {}", bytes, kUnits[u]);
}

// "1.2T", "7.6B", "3.0M", "4.1K", "950": parameter and token counts.
inline std::string HumanCount(double x) {
  if (x >= 1e12) return fmt::format("{:.1f}T", x / 1e12);
  if (x >= 1e9) return fmt::format("{:.1f}B", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.1f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}K", x / 1e3);
  return fmt::format("{:.0f}", x);
}

}  // namespace maestro
