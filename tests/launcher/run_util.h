// SPDX-License-Identifier: Apache-2.0
// Test helpers: run a command (mpirun ...) with extra environment, capture
// its stdout+stderr and exit status, and measure its wall time.
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace maestro::launcher::testing {

struct RunResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string output;  // stdout and stderr interleaved
  double seconds = 0;
};

inline RunResult RunCaptured(const std::vector<std::string>& argv,
                             const std::vector<std::pair<std::string, std::string>>& env = {}) {
  RunResult result;
  int fds[2];
  if (pipe(fds) != 0) return result;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) result.output.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

// mpirun on loopback, as root if need be, oversubscribed, ranks yielding.
inline std::vector<std::string> MpirunArgs(int ranks) {
  return {"timeout",
          "-s",
          "KILL",
          "120",
          MAESTRO_MPIRUN,
          "--allow-run-as-root",
          "--oversubscribe",
          "--mca",
          "btl",
          "self,vader",
          "--mca",
          "mpi_yield_when_idle",
          "1",
          "-np",
          std::to_string(ranks)};
}

}  // namespace maestro::launcher::testing
