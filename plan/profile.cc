// SPDX-License-Identifier: Apache-2.0
#include "plan/profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "base/checks.h"
#include "base/read_file.h"

namespace maestro::plan {

double ProfileCurveAt(const std::vector<std::pair<double, double>>& points, double samples) {
  if (points.empty() || !(samples > 0)) return 0.0;
  const auto& first = points.front();
  const auto& last = points.back();
  if (points.size() == 1) return first.second * samples / first.first;
  size_t hi = 1;
  while (hi + 1 < points.size() && points[hi].first < samples) ++hi;
  const auto& a = points[hi - 1];
  const auto& b = points[hi];
  const double slope = (b.second - a.second) / (b.first - a.first);
  const double floor = samples < first.first  ? first.second * samples / first.first
                       : samples > last.first ? last.second
                                              : 0.0;
  return std::max(floor, a.second + slope * (samples - a.first));
}

std::string ProfilePointsToJson(const std::vector<ProfilePoint>& points) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : points) {
    out.push_back({{"section", p.section},
                   {"gpus", p.gpus},
                   {"micro_batch", p.micro_batch},
                   {"seconds", p.seconds},
                   {"forward_seconds", p.forward_seconds},
                   {"optimizer_seconds", p.optimizer_seconds}});
  }
  return out.dump(2);
}

namespace {

// A point's count field: a JSON integer that fits in an int. nlohmann's
// get<int> of a float outside int's range is undefined behaviour (found by
// compiler/fuzz/profile_fuzz.cc: "gpus": 3.3e121), and of a larger integer
// it wraps; both are refused with the value.
int IntField(const nlohmann::json& o, const char* key, size_t point) {
  const nlohmann::json& v = o.at(key);
  constexpr int64_t kLo = std::numeric_limits<int>::min(), kHi = std::numeric_limits<int>::max();
  const bool fits = v.is_number_unsigned()  ? v.get<uint64_t>() <= static_cast<uint64_t>(kHi)
                    : v.is_number_integer() ? v.get<int64_t>() >= kLo && v.get<int64_t>() <= kHi
                                            : false;
  if (!fits) {
    throw std::invalid_argument(
        fmt::format("profile point {}: '{}' must be a whole number (an int), got {}", point, key, v.dump()));
  }
  return v.get<int>();
}

}  // namespace

StatusOr<std::vector<ProfilePoint>> ProfilePointsFromJson(const std::string& text) {
  const auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("profile points: not valid JSON");
  if (!j.is_array()) return Status::InvalidArgument("profile points: must be a JSON array of objects");
  std::vector<ProfilePoint> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& o = j[i];
    ProfilePoint p;
    try {
      p.section = o.at("section").get<std::string>();
      p.gpus = IntField(o, "gpus", i);
      p.micro_batch = IntField(o, "micro_batch", i);
      p.seconds = o.at("seconds").get<double>();
      p.forward_seconds = o.value("forward_seconds", 0.0);
      p.optimizer_seconds = o.value("optimizer_seconds", 0.0);
    } catch (const nlohmann::json::exception& e) {
      return Status::InvalidArgument(fmt::format("profile point {}: {}", i, e.what()));
    } catch (const std::invalid_argument& e) {
      return Status::InvalidArgument(e.what());
    }
    out.push_back(p);
  }
  return out;
}

StatusOr<std::vector<ProfilePoint>> ReadProfileFile(const std::string& path) {
  MAESTRO_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxProfileBytes, "the profile file"));
  auto points = ProfilePointsFromJson(text);
  if (!points.ok()) return Status::InvalidArgument(fmt::format("{}: {}", path, points.status().message()));
  return points;
}

Status WriteProfileFile(const std::string& path, const std::vector<ProfilePoint>& points) {
  std::ofstream out(path);
  out << ProfilePointsToJson(points) << "\n";
  out.close();
  if (!out) return Status::IOError(fmt::format("cannot write the profile file '{}'", path));
  return Status::Ok();
}

}  // namespace maestro::plan
