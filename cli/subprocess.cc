// SPDX-License-Identifier: Apache-2.0
#include "cli/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace maestro::cli {

namespace {

// RunInterruptible's state, read by its signal handlers.
std::atomic<pid_t> g_child{0};  // 0: no child to signal
std::atomic<int> g_interrupts{0};
std::atomic<int> g_request_signal{0};
std::atomic<const char*> g_on_request{""};
std::atomic<const char*> g_on_abort{""};
static_assert(std::atomic<pid_t>::is_always_lock_free && std::atomic<const char*>::is_always_lock_free,
              "the handlers' state must be lock-free");

// Async-signal-safe.
void WriteToStderr(const char* text) {
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = write(STDERR_FILENO, text, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

extern "C" void OnInterrupt(int) {
  const int saved_errno = errno;
  const pid_t child = g_child.load();
  const int n = g_interrupts.fetch_add(1) + 1;
  if (child > 0) {
    if (n == 1) {
      WriteToStderr(g_on_request.load());
      if (g_request_signal.load() != 0) kill(child, g_request_signal.load());
    } else if (n == 2) {
      WriteToStderr(g_on_abort.load());
      kill(child, SIGTERM);
    } else {
      kill(child, SIGKILL);
    }
  }
  errno = saved_errno;
}

extern "C" void OnPassOn(int sig) {
  const int saved_errno = errno;
  if (const pid_t child = g_child.load(); child > 0) kill(child, sig);
  errno = saved_errno;
}

// Ctrl-Z: the child's group stops (mpirun stops every rank), then this process.
extern "C" void OnTerminalStop(int) {
  const int saved_errno = errno;
  if (const pid_t child = g_child.load(); child > 0) kill(child, SIGTSTP);
  raise(SIGSTOP);  // SIGCONT (fg, bg) resumes here; OnPassOn then continues the child
  errno = saved_errno;
}

// The signals RunInterruptible handles, and what it does with each.
struct Handled {
  int sig;
  void (*handler)(int);
};
constexpr Handled kHandled[] = {
    {SIGINT, OnInterrupt}, {SIGTERM, OnPassOn}, {SIGHUP, OnPassOn}, {SIGTSTP, OnTerminalStop}, {SIGCONT, OnPassOn}};
constexpr size_t kHandledCount = sizeof(kHandled) / sizeof(kHandled[0]);

int ExitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

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
  return ExitCodeOf(status);
}

StatusOr<InterruptibleResult> RunInterruptible(const std::vector<std::string>& argv, const InterruptOptions& options) {
  if (argv.empty()) return Status::InvalidArgument("RunInterruptible: empty argv");
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  // The handled signals wait, blocked, until the child's pid is known.
  sigset_t handled, old_mask;
  sigemptyset(&handled);
  for (const Handled& h : kHandled) sigaddset(&handled, h.sig);
  sigprocmask(SIG_BLOCK, &handled, &old_mask);
  g_child.store(0);
  g_interrupts.store(0);
  g_request_signal.store(options.request_signal);
  g_on_request.store(options.on_request);
  g_on_abort.store(options.on_abort);
  struct sigaction old_actions[kHandledCount];
  for (size_t i = 0; i < kHandledCount; ++i) {
    sigaction(kHandled[i].sig, nullptr, &old_actions[i]);
    if (kHandled[i].sig != SIGCONT && old_actions[i].sa_handler == SIG_IGN) continue;  // nohup, `cmd &`
    struct sigaction sa {};
    sa.sa_handler = kHandled[i].handler;
    sa.sa_mask = handled;  // one handler at a time
    sa.sa_flags = SA_RESTART;
    sigaction(kHandled[i].sig, &sa, nullptr);
  }
  // Ignored in the child too (exec keeps ignored signals ignored): its
  // background group then writes to a `stty tostop` terminal.
  struct sigaction ignored {
  }, old_ttou{};
  ignored.sa_handler = SIG_IGN;
  sigaction(SIGTTOU, &ignored, &old_ttou);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);  // a group of its own
  posix_spawnattr_setsigmask(&attr, &old_mask);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);

  auto restore = [&] {
    sigprocmask(SIG_BLOCK, &handled, nullptr);
    g_child.store(0);
    sigaction(SIGTTOU, &old_ttou, nullptr);
    for (size_t i = 0; i < kHandledCount; ++i) sigaction(kHandled[i].sig, &old_actions[i], nullptr);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  };
  if (rc != 0) {
    restore();
    return Status::NotFound(fmt::format("cannot start '{}': {}", argv[0], std::strerror(rc)));
  }
  g_child.store(pid);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);

  // Wait without reaping first, so that no handler signals a reaped (and
  // perhaps reused) pid; then reap with the handlers gone.
  siginfo_t info{};
  while (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  restore();
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Status::IOError(fmt::format("waitpid '{}': {}", argv[0], std::strerror(errno)));
  }
  InterruptibleResult result;
  result.exit_code = ExitCodeOf(status);
  result.interrupts = g_interrupts.load();
  return result;
}

}  // namespace maestro::cli
