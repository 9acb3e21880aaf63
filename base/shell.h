// SPDX-License-Identifier: Apache-2.0
// Quoting of strings that reach a shell (the generated sbatch script, the
// mpirun command line) and the one writer of a generated script.
// Invariant: no string from a user's spec reaches a shell unless it went
// through ShellQuote() or passed a Is*() check, and every line of a
// generated script went through ShellScriptWriter (no control characters).
//
// Owns: ShellQuote, IsPlainShellWord, IsSingleLine, ShellScriptWriter.
// May call: base/status.h, base/text.h, fmt. Thread safety: pure functions; a
// ShellScriptWriter belongs to one thread.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace maestro {

// 'it'\''s' style POSIX single quoting; safe for any byte string without NUL.
std::string ShellQuote(std::string_view s);

// True for [A-Za-z0-9_.,:/=+@%-]+ : words that need no quoting anywhere.
bool IsPlainShellWord(std::string_view s);

// True when `s` contains no NUL, CR or LF (a value that may go inside an
// `#SBATCH --opt=VALUE` line, which Slurm parses without a shell).
bool IsSingleLine(std::string_view s);

// A generated shell script (job.sbatch), line by line. A line holding a
// control character (anything below 0x20 but a tab, or DEL) is refused, not
// written: the first such line is what Finish() reports. A newline there
// would start a line nobody wrote (`#SBATCH --account=...`, a command), and
// Slurm reads `#SBATCH` lines without a shell, so quoting cannot help. Text
// from a user that only informs (a spec's file name) goes in a Comment(),
// which escapes control characters instead (base/text.h PrintableText).
class ShellScriptWriter {
 public:
  // `name` names the script in messages ("job.sbatch").
  explicit ShellScriptWriter(std::string name) : name_(std::move(name)) {}
  // One line of code or a directive, written as given (quote user words
  // with ShellQuote first).
  void Line(std::string_view line);
  // "# " + `text` with its control characters escaped.
  void Comment(std::string_view text);
  // The script, or InvalidArgument naming the first refused line.
  StatusOr<std::string> Finish() const;

 private:
  std::string name_;
  std::string text_;
  int lines_ = 0;
  std::string error_;  // the first refused line's message
};

}  // namespace maestro
