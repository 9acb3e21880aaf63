// SPDX-License-Identifier: Apache-2.0
#include "bench/registry.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

namespace maestro::bench {

std::map<std::string, BenchEntry>& Registry() {
  static std::map<std::string, BenchEntry> registry;
  return registry;
}

nlohmann::json Goal(double value, double goal, bool at_least) {
  return {{"value", value}, {"goal", goal}, {"met", at_least ? value >= goal : value <= goal}};
}

Registrar::Registrar(const std::string& name, const std::string& description, BenchFn fn) {
  Registry()[name] = BenchEntry{description, std::move(fn)};
}

namespace {
double Seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double Median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

double MedianSeconds(const std::function<void()>& fn, int repeats) {
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < std::max(1, repeats); ++i) t.push_back(Seconds(fn));
  return Median(std::move(t));
}

std::vector<double> InterleavedMedianSeconds(const std::vector<std::function<void()>>& fns, int repeats) {
  for (const auto& fn : fns) fn();  // warm-up
  std::vector<std::vector<double>> t(fns.size());
  for (int i = 0; i < std::max(1, repeats); ++i) {
    for (size_t f = 0; f < fns.size(); ++f) t[f].push_back(Seconds(fns[f]));
  }
  std::vector<double> medians;
  for (auto& times : t) medians.push_back(Median(std::move(times)));
  return medians;
}

std::string ScratchDir(const std::string& name) {
  const char* base = std::getenv("MAESTRO_BENCH_DIR");
  if (base == nullptr) base = std::getenv("TMPDIR");
  const std::filesystem::path dir =
      std::filesystem::path(base != nullptr ? base : "/tmp") / fmt::format("maestro-bench-{}-{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace maestro::bench
