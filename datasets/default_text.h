// SPDX-License-Identifier: Apache-2.0
// The default English text of the demo data sets: fortunes-min's cookie files
// (literature, fortunes, riddles; "%" separator lines removed), or base-files'
// GPL-3 when fortunes-min is absent. Directories are parameters so tests can
// point them at scratch folders.
// May call: idx_file (file reading). Thread safety: pure function.
#pragma once

#include <string>

#include "base/status.h"

namespace maestro::datasets {

inline constexpr const char* kDefaultFortunesDir = "/usr/share/games/fortunes";
inline constexpr const char* kDefaultGplPath = "/usr/share/common-licenses/GPL-3";

struct DefaultText {
  std::string text;
  std::string source;  // "fortunes-min (<dir>/{literature,fortunes,riddles})" or "base-files (<gpl path>)"
};

// NotFound names both files and the packages when neither source is there;
// any other failure (a damaged file) is returned as is.
StatusOr<DefaultText> ReadDefaultText(const std::string& fortunes_dir = kDefaultFortunesDir,
                                      const std::string& gpl_path = kDefaultGplPath);

}  // namespace maestro::datasets
