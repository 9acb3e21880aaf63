// SPDX-License-Identifier: Apache-2.0
#include "base/crash_report.h"

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <initializer_list>

namespace maestro {
namespace {

const char* g_program = "maestro";
std::atomic<int> g_rank{-1};

void WriteString(const char* s) {
  const size_t n = std::strlen(s);
  [[maybe_unused]] ssize_t w = ::write(STDERR_FILENO, s, n);
}

// Decimal or hex without allocation; into buf (>= 24 bytes).
const char* Format(unsigned long long v, int base, char* buf) {
  char tmp[24];
  int n = 0;
  do {
    const int digit = static_cast<int>(v % static_cast<unsigned>(base));
    tmp[n++] = static_cast<char>(digit < 10 ? '0' + digit : 'a' + digit - 10);
    v /= static_cast<unsigned>(base);
  } while (v != 0 && n < 23);
  int i = 0;
  while (n > 0) buf[i++] = tmp[--n];
  buf[i] = '\0';
  return buf;
}

void OnFatalSignal(int sig, siginfo_t* info, void*) {
  char buf[24];
  WriteString("\n");
  WriteString(g_program);
  const int rank = g_rank.load(std::memory_order_relaxed);
  if (rank >= 0) {
    WriteString(" rank ");
    WriteString(Format(static_cast<unsigned long long>(rank), 10, buf));
  }
  WriteString(" (pid ");
  WriteString(Format(static_cast<unsigned long long>(::getpid()), 10, buf));
  WriteString("): fatal signal ");
  const char* name = sigabbrev_np(sig);
  WriteString(name != nullptr ? name : "?");
  WriteString(" at address 0x");
  WriteString(Format(reinterpret_cast<unsigned long long>(info != nullptr ? info->si_addr : nullptr), 16, buf));
  WriteString("; native stack:\n");
  void* frames[64];
  const int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, STDERR_FILENO);
  // Die of the same signal, with the default action.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  raise(sig);
}

}  // namespace

void InstallCrashReporter(const char* program) {
  g_program = program;
  void* warm[1];
  (void)backtrace(warm, 1);  // loads libgcc's unwinder now, not in the handler
  struct sigaction sa {};
  sa.sa_sigaction = OnFatalSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigaction(sig, &sa, nullptr);
}

void SetCrashReportRank(int rank) {
  g_rank.store(rank, std::memory_order_relaxed);
}

}  // namespace maestro
