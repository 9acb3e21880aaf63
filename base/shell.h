// SPDX-License-Identifier: Apache-2.0
// Quoting of strings that reach a shell (the generated sbatch script, the
// mpirun command line). Invariant: no string from a user's spec reaches a
// shell unless it went through ShellQuote() or passed a Is*() check.
#pragma once

#include <string>
#include <string_view>

namespace maestro {

// 'it'\''s' style POSIX single quoting; safe for any byte string without NUL.
std::string ShellQuote(std::string_view s);

// True for [A-Za-z0-9_.,:/=+@%-]+ : words that need no quoting anywhere.
bool IsPlainShellWord(std::string_view s);

// True when `s` contains no NUL, CR or LF (a value that may go inside an
// `#SBATCH --opt=VALUE` line, which Slurm parses without a shell).
bool IsSingleLine(std::string_view s);

}  // namespace maestro
