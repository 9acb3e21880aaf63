// SPDX-License-Identifier: Apache-2.0
#include "datasets/default_text.h"

#include <fmt/format.h>

#include <array>
#include <string_view>
#include <utility>

#include "base/checks.h"
#include "base/log.h"
#include "datasets/idx_file.h"

namespace maestro::datasets {

namespace {

// fortunes-min's three cookie files, in this order (literature first: the
// most natural prose).
constexpr std::array<const char*, 3> kFortuneFiles = {"literature", "fortunes", "riddles"};

StatusOr<std::string> ReadFortunes(const std::string& dir) {
  std::string text;
  for (const char* name : kFortuneFiles) {
    const std::string path = fmt::format("{}/{}", dir, name);
    MAESTRO_ASSIGN_OR_RETURN(std::string raw, ReadMaybeGzipFile(path, "install the Debian package fortunes-min"));
    size_t pos = 0;
    while (pos < raw.size()) {
      size_t end = raw.find('\n', pos);
      if (end == std::string::npos) end = raw.size() - 1;
      const std::string_view line(raw.data() + pos, end - pos + 1);
      if (line != "%\n" && line != "%") text.append(line);
      pos = end + 1;
    }
  }
  return text;
}

}  // namespace

StatusOr<DefaultText> ReadDefaultText(const std::string& fortunes_dir, const std::string& gpl_path) {
  StatusOr<std::string> fortunes = ReadFortunes(fortunes_dir);
  if (fortunes.ok()) {
    return DefaultText{std::move(fortunes).value(),
                       fmt::format("fortunes-min ({}/{{literature,fortunes,riddles}})", fortunes_dir)};
  }
  if (fortunes.status().code() != StatusCode::kNotFound) return fortunes.status();
  StatusOr<std::string> gpl = ReadMaybeGzipFile(gpl_path, "install the Debian package base-files");
  if (!gpl.ok()) {
    if (gpl.status().code() != StatusCode::kNotFound) return gpl.status();
    return Status::NotFound(
        fmt::format("no default text for the demo: {}; and {}: no such file. Install the Debian package "
                    "fortunes-min (scripts/setup.sh does) or base-files, or set text_path",
                    fortunes.status().message(), gpl_path));
  }
  Log(LogLevel::kWarn, "demo text: {}; falling back to {} (a much smaller text)", fortunes.status().message(),
      gpl_path);
  return DefaultText{std::move(gpl).value(), fmt::format("base-files ({})", gpl_path)};
}

}  // namespace maestro::datasets
