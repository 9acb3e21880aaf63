// SPDX-License-Identifier: Apache-2.0
// Text that came from a user (a spec's strings, a file name, a command-line
// argument) on its way to a person: the terminal, report.txt, an error
// message. Control characters and bytes that are not UTF-8 are written as
// escapes, so such text can neither drive the terminal (ESC, BEL), forge a
// line (newline, CR), nor cut a message short (NUL).
//
// Owns: PrintableText, PrintableLines, Utf8ErrorOffset (the one UTF-8 check).
// May call: fmt. Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace maestro {

// `s` with every control character escaped: "\n", "\r", "\t", "\0", "\x1b"
// (C0 and DEL), "\u009b" (C1), and every byte outside valid UTF-8 as "\xff".
// Valid UTF-8 (names in any script) passes unchanged.
std::string PrintableText(std::string_view s);

// The same, but '\n' is kept: a message or report of several lines whose
// line breaks are the program's own.
std::string PrintableLines(std::string_view s);

// The offset of the first byte of `s` that is not valid UTF-8 (overlong
// forms and surrogates included), or std::string_view::npos.
size_t Utf8ErrorOffset(std::string_view s);

}  // namespace maestro
