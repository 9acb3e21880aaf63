// SPDX-License-Identifier: Apache-2.0
#include "compiler/device_profile.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

#include "base/checks.h"
#include "base/read_file.h"

namespace maestro::compiler {

// Written by CMake from compiler/devices/*.json (compiler/CMakeLists.txt).
const std::map<std::string, std::string>& EmbeddedDeviceProfiles();

namespace {

using nlohmann::json;

constexpr int kSchemaVersion = 1;

struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// key and path by value: a reference returned next to reference parameters
// bound to temporaries is what g++ 13's -Wdangling-reference flags.
const json& Field(const json& obj, std::string_view key, std::string_view path) {
  if (!obj.is_object() || !obj.contains(key)) {
    throw FieldError(std::string(path) + "/" + std::string(key) + " is missing");
  }
  return obj.at(key);
}

double Positive(const json& v, const std::string& path) {
  if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
    throw FieldError(path + " must be a positive number, got " + v.dump());
  }
  return v.get<double>();
}

// {"value": x, "source": "..."}: a constant with its citation.
double CitedValue(const json& obj, const std::string& key) {
  const json& c = Field(obj, key, "");
  const std::string path = "/" + key;
  const json& src = Field(c, "source", path);
  if (!src.is_string() || src.get<std::string>().empty()) throw FieldError(path + "/source must be a non-empty string");
  return Positive(Field(c, "value", path), path + "/value");
}

std::vector<double> PositiveArray(const json& v, const std::string& path) {
  if (!v.is_array() || v.empty()) throw FieldError(path + " must be a non-empty array of positive numbers");
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) out.push_back(Positive(v[i], path + "/" + std::to_string(i)));
  return out;
}

void CheckAscending(const std::vector<double>& xs, const std::string& path) {
  for (size_t i = 1; i < xs.size(); ++i) {
    if (!(xs[i] > xs[i - 1])) throw FieldError(path + " must be strictly ascending");
  }
}

// "source": a non-empty string, or {"document": ..., "date": ..., ...}.
void CheckSource(const json& table, const std::string& path) {
  const json& src = Field(table, "source", path);
  if (src.is_string() && !src.get<std::string>().empty()) return;
  if (src.is_object()) {
    for (const char* key : {"document", "date"}) {
      const json& v = Field(src, key, path + "/source");
      if (!v.is_string() || v.get<std::string>().empty()) {
        throw FieldError(path + "/source/" + key + " must be a non-empty string");
      }
    }
    return;
  }
  throw FieldError(path + "/source must be a non-empty string or an object with document and date");
}

// Linear interpolation of ys over log(xs) at log(x), clamped at both ends.
double LogInterp(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (xs.size() == 1 || x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  size_t hi = 1;
  while (xs[hi] < x) ++hi;
  const double a = std::log(xs[hi - 1]), b = std::log(xs[hi]);
  const double w = (std::log(x) - a) / (b - a);
  return ys[hi - 1] + w * (ys[hi] - ys[hi - 1]);
}

DeviceProfile ParseOrThrow(const json& j) {
  DeviceProfile p;
  const json& schema = Field(j, "schema", "");
  if (schema != "maestro.device_profile") throw FieldError("/schema must be \"maestro.device_profile\"");
  const json& version = Field(j, "schema_version", "");
  if (version != kSchemaVersion) {
    throw FieldError("/schema_version is " + version.dump() + "; this build reads version " +
                     std::to_string(kSchemaVersion));
  }
  const json& name = Field(j, "name", "");
  if (!name.is_string() || name.get<std::string>().empty()) throw FieldError("/name must be a non-empty string");
  p.name = name.get<std::string>();
  CheckSource(j, "");
  p.peak_flops = CitedValue(j, "peak_bf16_tflops") * 1e12;
  p.memory_bytes_per_s = CitedValue(j, "memory_bandwidth_tb_per_s") * 1e12;
  p.kernel_launch_seconds = CitedValue(j, "kernel_launch_us") * 1e-6;
  // Optional: what one autograd-tracked kernel of a training step costs the
  // CPU to issue on this machine (docs/step_model.md, "The CPU's issue cost").
  if (j.contains("training_issue_us")) p.training_issue_seconds = CitedValue(j, "training_issue_us") * 1e-6;

  const json& gemm = Field(j, "gemm", "");
  CheckSource(gemm, "/gemm");
  const std::vector<double> m = PositiveArray(Field(gemm, "m", "/gemm"), "/gemm/m");
  CheckAscending(m, "/gemm/m");
  const json& rows = Field(gemm, "rows", "/gemm");
  if (!rows.is_array() || rows.empty()) throw FieldError("/gemm/rows must be a non-empty array");
  for (size_t r = 0; r < rows.size(); ++r) {
    const std::string path = "/gemm/rows/" + std::to_string(r);
    GemmRow row;
    if (rows[r].contains("label")) {
      const json& label = rows[r].at("label");
      if (!label.is_string()) throw FieldError(path + "/label must be a string");
      row.label = label.get<std::string>();
    }
    row.k = Positive(Field(rows[r], "k", path), path + "/k");
    row.n = Positive(Field(rows[r], "n", path), path + "/n");
    const std::vector<double> tflops = PositiveArray(Field(rows[r], "tflops", path), path + "/tflops");
    if (tflops.size() != m.size()) {
      throw FieldError(path + "/tflops has " + std::to_string(tflops.size()) + " values; /gemm/m has " +
                       std::to_string(m.size()));
    }
    std::vector<double> noisy;
    if (rows[r].contains("noisy_m")) noisy = PositiveArray(rows[r].at("noisy_m"), path + "/noisy_m");
    for (size_t i = 0; i < m.size(); ++i) {
      if (std::find(noisy.begin(), noisy.end(), m[i]) != noisy.end()) continue;
      row.m.push_back(m[i]);
      row.tflops.push_back(tflops[i]);
    }
    if (row.m.empty()) throw FieldError(path + "/noisy_m leaves no point in the row");
    p.gemm.push_back(std::move(row));
  }

  p.IndexGemm();

  const json& att = Field(j, "attention", "");
  CheckSource(att, "/attention");
  const std::vector<double> t = PositiveArray(Field(att, "t", "/attention"), "/attention/t");
  CheckAscending(t, "/attention/t");
  const json& arows = Field(att, "rows", "/attention");
  if (!arows.is_array() || arows.empty()) throw FieldError("/attention/rows must be a non-empty array");
  for (size_t r = 0; r < arows.size(); ++r) {
    const std::string path = "/attention/rows/" + std::to_string(r);
    AttentionRow row;
    row.heads = Positive(Field(arows[r], "heads", path), path + "/heads");
    row.head_dim = Positive(Field(arows[r], "head_dim", path), path + "/head_dim");
    row.t = t;
    row.fwd_tflops = PositiveArray(Field(arows[r], "fwd_tflops", path), path + "/fwd_tflops");
    row.fwd_bwd_tflops = PositiveArray(Field(arows[r], "fwd_bwd_tflops", path), path + "/fwd_bwd_tflops");
    if (row.fwd_tflops.size() != t.size() || row.fwd_bwd_tflops.size() != t.size()) {
      throw FieldError(path + ": fwd_tflops and fwd_bwd_tflops need one value per /attention/t entry (" +
                       std::to_string(t.size()) + ")");
    }
    p.attention.push_back(std::move(row));
  }

  if (j.contains("validation")) {
    const json& v = j.at("validation");
    CheckSource(v, "/validation");
    const json& cases = Field(v, "cases", "/validation");
    if (!cases.is_array()) throw FieldError("/validation/cases must be an array");
    for (size_t i = 0; i < cases.size(); ++i) {
      const std::string path = "/validation/cases/" + std::to_string(i);
      ValidationCase c;
      const json& model = Field(cases[i], "model", path);
      if (!model.is_string()) throw FieldError(path + "/model must be a string");
      c.model = model.get<std::string>();
      c.micro_batch = static_cast<int64_t>(Positive(Field(cases[i], "micro_batch", path), path + "/micro_batch"));
      c.seq_len = static_cast<int64_t>(Positive(Field(cases[i], "seq_len", path), path + "/seq_len"));
      c.seconds_per_step = Positive(Field(cases[i], "seconds_per_step", path), path + "/seconds_per_step");
      p.validation.push_back(c);
    }
  }
  return p;
}

}  // namespace

void DeviceProfile::IndexGemm() {
  gemm_groups.clear();
  for (auto& row : gemm) {
    row.log_m.clear();
    for (const double v : row.m) row.log_m.push_back(std::log(v));
  }
  for (const auto& row : gemm) {
    if (std::any_of(gemm_groups.begin(), gemm_groups.end(), [&](const GemmKGroup& g) { return g.k == row.k; })) {
      continue;
    }
    GemmKGroup group;
    group.k = row.k;
    std::vector<size_t> members;
    for (size_t i = 0; i < gemm.size(); ++i) {
      if (gemm[i].k == row.k) members.push_back(i);
    }
    std::sort(members.begin(), members.end(), [&](size_t a, size_t b) { return gemm[a].n < gemm[b].n; });
    for (const size_t i : members) {
      if (!group.rows.empty() && gemm[group.rows.back()].n == gemm[i].n) continue;  // duplicate N: the first wins
      group.rows.push_back(i);
      group.log_n.push_back(std::log(gemm[i].n));
    }
    gemm_groups.push_back(std::move(group));
  }
}

namespace {

// LogInterp of row's tflops over log(m) at log_x = log(x): the same
// arithmetic, with the table's logarithms precomputed.
double RowTflops(const GemmRow& row, double x, double log_x) {
  const auto& xs = row.m;
  if (xs.size() == 1 || x <= xs.front()) return row.tflops.front();
  if (x >= xs.back()) return row.tflops.back();
  size_t hi = 1;
  while (xs[hi] < x) ++hi;
  const double a = row.log_m[hi - 1], b = row.log_m[hi];
  const double w = (log_x - a) / (b - a);
  return row.tflops[hi - 1] + w * (row.tflops[hi] - row.tflops[hi - 1]);
}

}  // namespace

double DeviceProfile::GemmFlopsPerSecond(double m, double k, double n) const {
  // Nearest K (in log space; the first group wins a tie); its rows, ascending in N.
  const GemmKGroup* best = &gemm_groups.front();
  double best_distance = std::fabs(std::log(best->k / k));
  for (const auto& group : gemm_groups) {
    const double distance = std::fabs(std::log(group.k / k));
    if (distance < best_distance) {
      best = &group;
      best_distance = distance;
    }
  }
  const double log_m = std::log(m);
  const auto tflops_of = [&](size_t i) { return RowTflops(gemm[best->rows[i]], m, log_m); };
  const auto& rows = best->rows;
  if (rows.size() == 1 || n <= gemm[rows.front()].n) return tflops_of(0) * 1e12;
  if (n >= gemm[rows.back()].n) return tflops_of(rows.size() - 1) * 1e12;
  size_t hi = 1;
  while (gemm[rows[hi]].n < n) ++hi;
  const double a = best->log_n[hi - 1], b = best->log_n[hi];
  const double w = (std::log(n) - a) / (b - a);
  const double lo_tflops = tflops_of(hi - 1), hi_tflops = tflops_of(hi);
  return (lo_tflops + w * (hi_tflops - lo_tflops)) * 1e12;
}

double DeviceProfile::AttentionFlopsPerSecond(double head_dim, double t, bool forward_and_backward) const {
  const AttentionRow* best = &attention.front();
  for (const auto& row : attention) {
    if (std::fabs(row.head_dim - head_dim) < std::fabs(best->head_dim - head_dim)) best = &row;
  }
  return LogInterp(best->t, forward_and_backward ? best->fwd_bwd_tflops : best->fwd_tflops, t) * 1e12;
}

StatusOr<DeviceProfile> ParseDeviceProfile(const std::string& json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    return Status::InvalidArgument(origin + ": not valid JSON (" + e.what() + "); fix the file's syntax");
  }
  try {
    DeviceProfile p = ParseOrThrow(j);
    p.origin = origin;
    return p;
  } catch (const FieldError& e) {
    return Status::InvalidArgument(origin + ": " + e.what() +
                                   " (docs/step_model.md describes the device profile schema)");
  } catch (const json::exception& e) {
    return Status::InvalidArgument(origin + ": " + e.what() +
                                   " (docs/step_model.md describes the device profile schema)");
  }
}

StatusOr<DeviceProfile> LoadDeviceProfileFile(const std::string& path) {
  MAESTRO_ASSIGN_OR_RETURN(std::string text, ReadSmallFile(path, kMaxConfigBytes, "the device profile"));
  return ParseDeviceProfile(text, path);
}

std::vector<std::string> BuiltinDeviceProfileNames() {
  std::vector<std::string> names;
  for (const auto& [name, text] : EmbeddedDeviceProfiles()) names.push_back(name);
  return names;
}

StatusOr<DeviceProfile> BuiltinDeviceProfile(const std::string& name) {
  const auto& all = EmbeddedDeviceProfiles();
  const auto it = all.find(name);
  if (it == all.end()) {
    std::string known;
    for (const auto& n : BuiltinDeviceProfileNames()) known += (known.empty() ? "" : ", ") + n;
    return Status::NotFound("no built-in device profile \"" + name + "\" (known: " + known +
                            "); add compiler/devices/" + name + ".json or give a file");
  }
  return ParseDeviceProfile(it->second, "embedded:compiler/devices/" + name + ".json");
}

DeviceProfile ScaledToPeak(const DeviceProfile& p, double peak_flops) {
  DeviceProfile out = p;
  const double f = p.peak_flops > 0 ? peak_flops / p.peak_flops : 1.0;
  out.peak_flops = peak_flops;
  for (auto& row : out.gemm) {
    for (double& v : row.tflops) v *= f;
  }
  for (auto& row : out.attention) {
    for (double& v : row.fwd_tflops) v *= f;
    for (double& v : row.fwd_bwd_tflops) v *= f;
  }
  out.validation.clear();  // measured on the other GPU
  return out;
}

}  // namespace maestro::compiler
