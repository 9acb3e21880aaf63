// SPDX-License-Identifier: Apache-2.0
#include "cli/subprocess.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace maestro::cli {

std::string SelfDirectory() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string path(buf, static_cast<size_t>(n));
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string WithHugePageMalloc(const char* existing) {
  constexpr char kTunable[] = "glibc.malloc.hugetlb";
  const std::string value = existing != nullptr ? existing : "";
  if (value.empty()) return std::string(kTunable) + "=1";
  // GLIBC_TUNABLES is name=value pairs joined by ':'; a user's own choice stays.
  if (value.find(kTunable) != std::string::npos) return value;
  return value + ":" + kTunable + "=1";
}

void PreferHugePagesForChildren() {
  const std::string value = WithHugePageMalloc(std::getenv("GLIBC_TUNABLES"));
  setenv("GLIBC_TUNABLES", value.c_str(), 1);
}

StatusOr<int> RunProcess(const std::vector<std::string>& argv, ChildStdout child_stdout) {
  if (argv.empty()) return Status::InvalidArgument("RunProcess: empty argv");
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (child_stdout == ChildStdout::kToStderr) posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return Status::NotFound(fmt::format("cannot start '{}': {}", argv[0], std::strerror(rc)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::IOError(fmt::format("waitpid '{}': {}", argv[0], std::strerror(errno)));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace maestro::cli
