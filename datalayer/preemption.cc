// SPDX-License-Identifier: Apache-2.0
#include "datalayer/preemption.h"

#include <signal.h>

#include <atomic>
#include <cstdlib>

namespace maestro::datalayer {
namespace {
std::atomic<int> g_signal{0};
std::atomic<bool> g_installed{false};
struct sigaction g_old_usr1;
struct sigaction g_old_term;
static_assert(std::atomic<int>::is_always_lock_free, "the signal flag must be lock-free");

extern "C" void OnPreemptionSignal(int sig) {
  g_signal.store(sig, std::memory_order_relaxed);
}
}  // namespace

StatusOr<std::unique_ptr<PreemptionSignal>> PreemptionSignal::Install() {
  bool expected = false;
  if (!g_installed.compare_exchange_strong(expected, true)) {
    return Status::FailedPrecondition("PreemptionSignal::Install: handlers are already installed");
  }
  g_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = OnPreemptionSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR1, &sa, &g_old_usr1) != 0 || sigaction(SIGTERM, &sa, &g_old_term) != 0) {
    g_installed.store(false);
    return Status::Internal("sigaction(SIGUSR1/SIGTERM) failed");
  }
  return std::unique_ptr<PreemptionSignal>(new PreemptionSignal());
}

PreemptionSignal::~PreemptionSignal() {
  sigaction(SIGUSR1, &g_old_usr1, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  g_installed.store(false);
}

bool PreemptionSignal::requested() const {
  return g_signal.load(std::memory_order_relaxed) != 0;
}
int PreemptionSignal::signal_number() const {
  return g_signal.load(std::memory_order_relaxed);
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
