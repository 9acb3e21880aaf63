// SPDX-License-Identifier: Apache-2.0
#include "base/text.h"

#include <fmt/format.h>

namespace maestro {

namespace {

// The length of the valid UTF-8 sequence at s[i] (1-4), or 0 when the byte
// there starts none (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF).
size_t Utf8SequenceAt(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

std::string Escape(std::string_view s, bool keep_newlines) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = Utf8SequenceAt(s, i);
    if (n == 0) {
      out += fmt::format("\\x{:02x}", c);
      ++i;
      continue;
    }
    if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) {  // C1: U+0080..U+009F
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(s[i + 1]));
    } else if (n > 1 || (c >= 0x20 && c != 0x7F) || (c == '\n' && keep_newlines)) {
      out.append(s.substr(i, n));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\0') {
      out += "\\0";
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
    i += n;
  }
  return out;
}

}  // namespace

std::string PrintableText(std::string_view s) {
  return Escape(s, false);
}

std::string PrintableLines(std::string_view s) {
  return Escape(s, true);
}

size_t Utf8ErrorOffset(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceAt(s, i);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

}  // namespace maestro
