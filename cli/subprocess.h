// SPDX-License-Identifier: Apache-2.0
// Running other programs without a shell: argv goes to posix_spawnp as is,
// so no user string is ever interpreted by a shell.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace maestro::cli {

// Directory of the running executable (/proc/self/exe), where the sibling
// tools (maestro-compile, maestro-worker) live after a build or an install.
std::string SelfDirectory();

// Where a child's standard output goes: ours, or our standard error (for
// callers whose own stdout is a machine-readable result, e.g. --json).
enum class ChildStdout { kInherit, kToStderr };

// GLIBC_TUNABLES with glibc.malloc.hugetlb=1 added to `existing` (null or
// empty: unset), unless `existing` already sets glibc.malloc.hugetlb: glibc's
// malloc then backs its large blocks with transparent huge pages where the
// kernel offers them (THP "madvise" or "always"; glibc >= 2.35, older ones
// ignore the tunable). It changes no result; CPU ranks' tensors fault in
// 2 MiB pages instead of 4 KiB ones (a 2-step CPU decoder ran 1.75x faster).
std::string WithHugePageMalloc(const char* existing);

// Sets this process's GLIBC_TUNABLES to WithHugePageMalloc(its value), so
// that the workers `maestro` starts (mpirun, maestro-worker) inherit it.
void PreferHugePagesForChildren();

// Runs argv[0] (searched in PATH when it has no '/') with argv; waits; returns
// the exit status (128+signal when killed), or an error when it cannot start.
StatusOr<int> RunProcess(const std::vector<std::string>& argv, ChildStdout child_stdout = ChildStdout::kInherit);

}  // namespace maestro::cli
