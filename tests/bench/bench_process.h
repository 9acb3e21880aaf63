// SPDX-License-Identifier: Apache-2.0
// Runs maestro-bench (or any tool) as a child process for the bench tests:
// argv as is (no shell), stdout and stderr captured separately in files of a
// folder, MAESTRO_BENCH_DIR pointed at that folder's scratch/.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace maestro::bench_test {

struct ToolRun {
  int exit_code = -1;  // 128+signal when killed; -1 when it could not start
  std::string out;     // everything written to stdout
  std::string err;     // everything written to stderr
};

inline std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs argv with stdout in dir/stdout, stderr in dir/stderr and
// MAESTRO_BENCH_DIR=dir/scratch (created here); waits for it.
inline ToolRun RunTool(const std::vector<std::string>& argv, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir / "scratch");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, (dir / "stdout").c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, (dir / "stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::string scratch = "MAESTRO_BENCH_DIR=" + (dir / "scratch").string();
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("MAESTRO_BENCH_DIR=", 0) != 0) env.push_back(*e);
  }
  env.push_back(scratch.data());
  env.push_back(nullptr);
  ToolRun run;
  pid_t pid = 0;
  if (posix_spawn(&pid, args[0], &actions, nullptr, args.data(), env.data()) == 0) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  posix_spawn_file_actions_destroy(&actions);
  run.out = Slurp(dir / "stdout");
  run.err = Slurp(dir / "stderr");
  return run;
}

}  // namespace maestro::bench_test
