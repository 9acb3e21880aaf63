// SPDX-License-Identifier: Apache-2.0
// Running other programs without a shell: argv goes to posix_spawnp as is,
// so no user string is ever interpreted by a shell.
//
// RunInterruptible runs a child that checkpoints on request (`maestro run`'s
// mpirun) so that Ctrl-C in a terminal is a preemption: the child gets a
// process group of its own, so the keyboard's SIGINT (sent to the terminal's
// foreground group) reaches only this process, which turns the first one into
// the child's request signal and a second one into an abort. (mpirun, left in
// the foreground group, would end every rank on the first SIGINT: SIGTERM,
// then SIGKILL a second later, before they could checkpoint. Open MPI puts
// each rank in a process group of its own, so the ranks never see it.)
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

// What RunInterruptible says and sends; the texts are written from a signal
// handler as they are (end them with a newline).
struct InterruptOptions {
  int request_signal = 0;       // sent to the child on the first SIGINT (SIGUSR1: mpirun passes it on)
  const char* on_request = "";  // written to stderr then
  const char* on_abort = "";    // written to stderr on the second SIGINT
};

struct InterruptibleResult {
  int exit_code = 0;   // the child's, as RunProcess returns it
  int interrupts = 0;  // SIGINTs received while the child ran
};

// RunProcess (stdout inherited), with the child in a process group of its own
// and its stdin /dev/null (a background group that read the terminal would be
// stopped; SIGTTOU is ignored in it, so a terminal with `stty tostop` does not
// stop its output). While the child runs:
//  - the first SIGINT writes `on_request` and sends the child `request_signal`;
//  - a second SIGINT writes `on_abort` and sends it SIGTERM (mpirun then ends
//    every rank: SIGTERM, SIGKILL a second later); a third, SIGKILL;
//  - SIGTERM and SIGHUP are passed on to the child; SIGTSTP (Ctrl-Z) is passed
//    on and this process stops too; SIGCONT is passed on.
// A signal that was ignored when this was called (nohup, `cmd &` in a script)
// stays ignored. The previous handlers are restored before it returns.
StatusOr<InterruptibleResult> RunInterruptible(const std::vector<std::string>& argv, const InterruptOptions& options);

}  // namespace maestro::cli
