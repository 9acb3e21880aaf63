// SPDX-License-Identifier: Apache-2.0
// Crash reports: on SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT the process
// writes one line naming the program, its rank (once known), the signal and
// the faulting address, then the native stack (glibc backtrace; resolve the
// frames with `addr2line -e <binary> -f -C <offset>`), and dies of the same
// signal with the default action (core dump where `ulimit -c` allows it).
// Open MPI and PMIx install their own handlers at init, which print no
// frames under srun: call InstallCrashReporter() again after them.
// Thread safety: the handler only calls async-signal-safe functions (and
// backtrace(), whose first, allocating call InstallCrashReporter makes).
#pragma once

namespace maestro {

// `program` must outlive the process (a string literal).
void InstallCrashReporter(const char* program);
// The rank the report names; -1: unknown.
void SetCrashReportRank(int rank);

}  // namespace maestro
