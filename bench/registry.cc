// SPDX-License-Identifier: Apache-2.0
#include "bench/registry.h"

#include <algorithm>
#include <chrono>

namespace maestro::bench {

std::map<std::string, BenchEntry>& Registry() {
  static std::map<std::string, BenchEntry> registry;
  return registry;
}

Registrar::Registrar(const std::string& name, const std::string& description, BenchFn fn) {
  Registry()[name] = BenchEntry{description, std::move(fn)};
}

double MedianSeconds(const std::function<void()>& fn, int repeats) {
  fn();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace maestro::bench
