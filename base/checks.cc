// SPDX-License-Identifier: Apache-2.0
#include "base/checks.h"

#include <fmt/format.h>

namespace maestro::internal {

std::string ForeignErrorMessage(const char* api, const char* call, long long rc, const std::string& detail,
                                const char* file, int line) {
  std::string msg = fmt::format("{} call failed with code {}: {}", api, rc, call);
  if (!detail.empty()) msg += fmt::format(" ({})", detail);
  msg += fmt::format(" [at {}:{}]", file, line);
  return msg;
}

}  // namespace maestro::internal
