// SPDX-License-Identifier: Apache-2.0
// Placeholder spec reader (issue 3 replaces it with the full compiler).
#pragma once
#include <string>
#include <vector>
#include "base/status.h"
namespace maestro::compiler {
struct SectionSummary { std::string name, model, mode; };
StatusOr<std::vector<SectionSummary>> ReadSectionSummaries(const std::string& spec_path);
}  // namespace maestro::compiler
