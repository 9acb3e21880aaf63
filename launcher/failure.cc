// SPDX-License-Identifier: Apache-2.0
#include "launcher/failure.h"

#include <fmt/format.h>
#include <mpi.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace maestro::launcher {
namespace {
std::atomic<const InFlightOp*> g_in_flight{nullptr};
std::atomic<int> g_reporter_rank{-1};

// Async-signal-safe enough: snprintf of ints and strings into a stack buffer.
void ReportSignal(int sig) {
  char line[1024];
  const InFlightOp* op = g_in_flight.load();
  const int rank = g_reporter_rank.load();
  // While a rank trains, SIGINT is a preemption request (datalayer/preemption.h);
  // here it came before or after the training steps.
  const char* why = sig == SIGINT ? "an interrupt outside the training steps, where no checkpoint is taken"
                                  : "the launcher stops every rank when one fails";
  int n = 0;
  if (op != nullptr && op->group != nullptr) {
    const double waited = static_cast<double>(MonotonicNanos() - op->start_ns) * 1e-9;
    char peer[64] = "";
    if (op->peer >= 0) std::snprintf(peer, sizeof(peer), " with rank %d", op->peer);
    n = std::snprintf(line, sizeof(line),
                      "[maestro rank %d ERROR] stopped by signal %d (%s) "
                      "after waiting %.1f s in %s #%llu of %zu bytes%s on %s\n",
                      rank, sig, why, waited, op->op, static_cast<unsigned long long>(op->seq), op->bytes, peer,
                      op->group->description.c_str());
  } else {
    n = std::snprintf(line, sizeof(line),
                      "[maestro rank %d ERROR] stopped by signal %d (%s) "
                      "outside any communication\n",
                      rank, sig, why);
  }
  if (n > 0) {
    const size_t len = static_cast<size_t>(n) < sizeof(line) ? static_cast<size_t>(n) : sizeof(line) - 1;
    [[maybe_unused]] const ssize_t w = write(STDERR_FILENO, line, len);
  }
}

void OnTerminate(int sig) {
  ReportSignal(sig);
  signal(sig, SIG_DFL);
  raise(sig);
}
}  // namespace

int64_t MonotonicNanos() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

std::string DescribeOp(const InFlightOp& op) {
  std::string s = fmt::format("{} #{} of {}", op.op, op.seq, HumanBytes(static_cast<double>(op.bytes)));
  if (op.peer >= 0) s += fmt::format(" with rank {}", op.peer);
  if (op.group != nullptr) s += " on " + op.group->description;
  return s;
}

InFlightScope::InFlightScope(const InFlightOp* op) : previous_(g_in_flight.exchange(op)) {}
InFlightScope::~InFlightScope() {
  g_in_flight.store(previous_);
}
const InFlightOp* CurrentInFlightOp() {
  return g_in_flight.load();
}

void InstallTerminationReporter(int world_rank) {
  g_reporter_rank.store(world_rank);
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnTerminate;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
}

void AbortJob(int world_rank, const Status& why, int exit_code) {
  std::fprintf(stderr, "[maestro rank %d ERROR] %s\n[maestro rank %d ERROR] ending the job (exit code %d)\n",
               world_rank, why.ToString().c_str(), world_rank, exit_code);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace maestro::launcher
