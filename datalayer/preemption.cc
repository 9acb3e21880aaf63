// SPDX-License-Identifier: Apache-2.0
#include "datalayer/preemption.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace maestro::datalayer {
namespace {
std::atomic<int> g_signal{0};
std::atomic<int> g_interrupts{0};  // SIGINTs seen while an instance lives
std::atomic<bool> g_installed{false};
std::atomic<bool> g_keep_early{false};
struct sigaction g_old_usr1;
struct sigaction g_old_term;
struct sigaction g_old_int;
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

extern "C" void OnPreemptionSignal(int sig) {
  if (sig == SIGINT && g_interrupts.fetch_add(1, std::memory_order_relaxed) > 0) {
    // The second interrupt: no checkpoint, now. SIGINT is blocked while this
    // handler runs, so the raised one is delivered, with the default action,
    // when it returns.
    static const char kMessage[] = "maestro-worker: interrupted again: stopping now, without a checkpoint\n";
    [[maybe_unused]] const ssize_t w = write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    signal(SIGINT, SIG_DFL);
    raise(SIGINT);
    return;
  }
  g_signal.store(sig, std::memory_order_relaxed);
}
}  // namespace

StatusOr<std::unique_ptr<PreemptionSignal>> PreemptionSignal::Install() {
  bool expected = false;
  if (!g_installed.compare_exchange_strong(expected, true)) {
    return Status::FailedPrecondition("PreemptionSignal::Install: handlers are already installed");
  }
  if (!g_keep_early.load()) g_signal.store(0);
  g_interrupts.store(0);
  struct sigaction sa {};
  sa.sa_handler = OnPreemptionSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR1, &sa, &g_old_usr1) != 0 || sigaction(SIGTERM, &sa, &g_old_term) != 0 ||
      sigaction(SIGINT, &sa, &g_old_int) != 0) {
    g_installed.store(false);
    return Status::Internal("sigaction(SIGUSR1/SIGTERM/SIGINT) failed");
  }
  return std::unique_ptr<PreemptionSignal>(new PreemptionSignal());
}

PreemptionSignal::~PreemptionSignal() {
  sigaction(SIGUSR1, &g_old_usr1, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
  g_installed.store(false);
}

bool PreemptionSignal::requested() const {
  return g_signal.load(std::memory_order_relaxed) != 0;
}
int PreemptionSignal::signal_number() const {
  return g_signal.load(std::memory_order_relaxed);
}

void KeepEarlyPreemptionRequests() {
  g_keep_early.store(true);
  struct sigaction sa {};
  sa.sa_handler = OnPreemptionSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
}

int SlurmRestartCount() {
  const char* v = std::getenv("SLURM_RESTART_COUNT");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || n < 0) return 0;
  return static_cast<int>(n);
}

}  // namespace maestro::datalayer
