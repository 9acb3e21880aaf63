// SPDX-License-Identifier: Apache-2.0
#include "base/shell.h"

#include <fmt/format.h>

#include "base/text.h"

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

void ShellScriptWriter::Line(std::string_view line) {
  ++lines_;
  for (char c : line) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7F) {
      if (error_.empty()) {
        error_ = fmt::format(
            "{} line {} would hold a control character: {}; a newline there starts a line nobody wrote, so a "
            "path, argument or value with control characters cannot go into {}; rename it",
            name_, lines_, PrintableText(line), name_);
      }
      return;
    }
  }
  text_.append(line);
  text_ += '\n';
}

void ShellScriptWriter::Comment(std::string_view text) {
  Line("# " + PrintableText(text));
}

StatusOr<std::string> ShellScriptWriter::Finish() const {
  if (!error_.empty()) return Status::InvalidArgument(error_);
  return text_;
}

}  // namespace maestro
