// SPDX-License-Identifier: Apache-2.0
// Compiled with the fake torch include folder first: its fmt wins.
#include <fmt/format.h>

#include <string>

#ifndef EXPECT_FMT_VERSION
#error "EXPECT_FMT_VERSION: the FMT_VERSION of the fake torch's fmt"
#endif
static_assert(FMT_VERSION == EXPECT_FMT_VERSION, "the fake torch's fmt must win this translation unit's include order");

std::string RuntimeMessage(int step, double loss) {
  return fmt::format("step {} loss {:.3f}", step, loss);
}
