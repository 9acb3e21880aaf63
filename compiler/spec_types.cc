// SPDX-License-Identifier: Apache-2.0
#include "compiler/spec_types.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "base/text.h"

namespace maestro::compiler {

const GpuTypeSpec* ClusterSpec::Find(const std::string& name) const {
  for (const auto& g : gpu_types) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

int Spec::section_index(const std::string& name) const {
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const ModelSpec* Spec::FindModel(const std::string& name) const {
  for (const auto& m : models) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

std::string AtPos(const std::string& path, SourcePos pos, const std::string& message) {
  // One line: a spec's strings and file name may hold control characters, a
  // NUL that would cut the message short, or bytes that are not UTF-8.
  if (pos.line <= 0) return fmt::format("{}: {}", PrintableText(path), PrintableText(message));
  return fmt::format("{}:{}:{}: {}", PrintableText(path), pos.line, pos.column, PrintableText(message));
}

int EditDistance(const std::string& a, const std::string& b) {
  // Optimal string alignment: insertions, deletions, substitutions and
  // transpositions of neighbours ("nmae" -> "name") cost 1.
  std::vector<std::vector<int>> d(a.size() + 1, std::vector<int>(b.size() + 1, 0));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

std::string Suggest(const std::string& word, const std::vector<std::string>& candidates) {
  if (word.size() > 256) return "";
  std::string best;
  int best_d = std::numeric_limits<int>::max();
  for (const auto& c : candidates) {
    const int dist = EditDistance(word, c);
    if (dist < best_d) {
      best_d = dist;
      best = c;
    }
  }
  const int limit = word.size() <= 4 ? 1 : (word.size() <= 8 ? 2 : 3);
  if (best.empty() || best_d == 0 || best_d > limit) return "";
  return fmt::format(" (did you mean '{}'?)", best);
}

}  // namespace maestro::compiler
