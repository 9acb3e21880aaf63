// SPDX-License-Identifier: Apache-2.0
#include "base/shell.h"

namespace maestro {

std::string ShellQuote(std::string_view s) {
  if (!s.empty() && IsPlainShellWord(s)) return std::string(s);
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

bool IsPlainShellWord(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == ',' || c == ':' || c == '/' || c == '=' || c == '+' || c == '@' || c == '%' ||
                    c == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsSingleLine(std::string_view s) {
  for (char c : s) {
    if (c == '\0' || c == '\n' || c == '\r') return false;
  }
  return true;
}

}  // namespace maestro
