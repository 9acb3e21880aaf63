// SPDX-License-Identifier: Apache-2.0
#include "compiler/spec.h"

#include <fmt/format.h>

#include <toml++/toml.h>

namespace maestro::compiler {
StatusOr<std::vector<SectionSummary>> ReadSectionSummaries(const std::string& spec_path) {
  toml::table tbl;
  try {
    tbl = toml::parse_file(spec_path);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    return Status::InvalidArgument(fmt::format("{}:{}:{}: {}", spec_path, b.line, b.column, e.description()));
  }
  std::vector<SectionSummary> out;
  if (auto* arr = tbl["section"].as_array()) {
    for (auto& node : *arr) {
      auto* t = node.as_table();
      if (t == nullptr) continue;
      out.push_back({(*t)["name"].value_or(std::string{}), (*t)["model"].value_or(std::string{}),
                     (*t)["mode"].value_or(std::string{"train"})});
    }
  }
  return out;
}
}  // namespace maestro::compiler
