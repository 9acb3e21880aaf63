// SPDX-License-Identifier: Apache-2.0
// Compiled against the system's fmt, linked with its libfmt and runtime_like.
#include <fmt/format.h>

#include <cstdio>
#include <string>

std::string RuntimeMessage(int step, double loss);

int main() {
  const std::string own = fmt::format("worker fmt {}", FMT_VERSION);
  std::printf("%s; %s\n", own.c_str(), RuntimeMessage(3, 0.5).c_str());
  return 0;
}
