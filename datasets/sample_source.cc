// SPDX-License-Identifier: Apache-2.0
#include "datasets/sample_source.h"

#include <fmt/format.h>

#include <iterator>
#include <string_view>

#include "base/files.h"

namespace maestro::datasets {

namespace {

// `text` as the inside of a JSON string.
void AppendJsonEscaped(fmt::memory_buffer& out, std::string_view text) {
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(static_cast<unsigned char>(c)));
    } else {
      out.push_back(c);
    }
  }
}

}  // namespace

StatusOr<int64_t> WriteManifest(const SampleSource& source, const std::string& path) {
  const int64_t n = source.NumSamples(Split::kTrain);
  fmt::memory_buffer out;
  for (int64_t id = 0; id < n; ++id) {
    const SampleTokens sample = source.TokensOf(id);
    fmt::format_to(std::back_inserter(out), "{{\"id\": {}, \"location\": \"", id);
    AppendJsonEscaped(out, sample.location);
    fmt::format_to(std::back_inserter(out), "\", \"tokens\": {{");
    for (size_t m = 0; m < sample.tokens.size(); ++m) {
      if (m > 0) fmt::format_to(std::back_inserter(out), ", ");
      out.push_back('"');
      AppendJsonEscaped(out, sample.tokens[m].first);
      fmt::format_to(std::back_inserter(out), "\": {}", sample.tokens[m].second);
    }
    fmt::format_to(std::back_inserter(out), "}}}}\n");
  }
  Status written = WriteFileAtomically(path, std::string_view(out.data(), out.size()));
  if (!written.ok()) return written.WithContext(fmt::format("manifest {}", path));
  return n;
}

}  // namespace maestro::datasets
