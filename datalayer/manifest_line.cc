// SPDX-License-Identifier: Apache-2.0
#include "datalayer/manifest_line.h"

namespace maestro::datalayer::internal {
namespace {

struct Cursor {
  const char* p;
  const char* end;
  void SkipSpace() {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')) ++p;
  }
  bool Eat(char c) {
    SkipSpace();
    if (p < end && *p == c) {
      ++p;
      return true;
    }
    return false;
  }
  // A string without escapes or control characters.
  bool String(std::string_view& out) {
    if (!Eat('"')) return false;
    const char* start = p;
    while (p < end && *p != '"') {
      if (*p == '\\' || static_cast<unsigned char>(*p) < 0x20) return false;
      ++p;
    }
    if (p == end) return false;
    out = std::string_view(start, static_cast<size_t>(p - start));
    ++p;
    return true;
  }
  // An integer of at most 18 digits, optionally negative; not followed by
  // '.', 'e' or 'E' (those are floats: left to nlohmann).
  bool Integer(int64_t& out, bool allow_negative) {
    SkipSpace();
    bool negative = false;
    if (p < end && *p == '-') {
      if (!allow_negative) return false;
      negative = true;
      ++p;
    }
    const char* start = p;
    int64_t v = 0;
    while (p < end && *p >= '0' && *p <= '9') v = v * 10 + (*p++ - '0');
    const auto digits = p - start;
    if (digits == 0 || digits > 18) return false;
    if (digits > 1 && *start == '0') return false;  // JSON has no leading zeros
    if (p < end && (*p == '.' || *p == 'e' || *p == 'E')) return false;
    out = negative ? -v : v;
    return true;
  }
};

}  // namespace

bool ScanSimpleManifestLine(const char* begin, const char* end, ManifestLine& out) {
  Cursor c{begin, end};
  out.tokens.clear();
  bool have_id = false, have_location = false, have_tokens = false;
  if (!c.Eat('{')) return false;
  for (;;) {
    std::string_view key;
    if (!c.String(key) || !c.Eat(':')) return false;
    if (key == "id") {
      if (!c.Integer(out.id, /*allow_negative=*/true)) return false;
      have_id = true;
    } else if (key == "location") {
      if (!c.String(out.location)) return false;
      have_location = true;
    } else if (key == "tokens") {
      if (have_tokens || !c.Eat('{')) return false;  // a repeated key: leave to nlohmann
      for (;;) {
        std::string_view name;
        int64_t n = 0;
        if (!c.String(name) || !c.Eat(':') || !c.Integer(n, /*allow_negative=*/false)) return false;
        for (const auto& t : out.tokens) {
          if (t.first == name) return false;  // duplicate modality: leave to nlohmann
        }
        out.tokens.emplace_back(name, n);
        if (c.Eat(',')) continue;
        if (c.Eat('}')) break;
        return false;
      }
      have_tokens = true;
    } else {
      return false;  // unknown key: nlohmann decides
    }
    if (c.Eat(',')) continue;
    if (c.Eat('}')) break;
    return false;
  }
  c.SkipSpace();
  return c.p == end && have_id && have_location && have_tokens && !out.tokens.empty();
}

}  // namespace maestro::datalayer::internal
