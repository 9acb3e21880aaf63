// SPDX-License-Identifier: Apache-2.0
// Ctrl-C in a terminal is a preemption (issue #39): `maestro run` (mpirun, 2
// ranks, a tiny decoder on the built-in text) starts in a pseudo-terminal as
// its session leader, so its process group is the terminal's foreground
// group, as in a user's shell; the test types the terminal's interrupt
// character (^C) into the terminal, and the kernel's line discipline sends
// SIGINT to that group, as a keyboard does.
//  - One Ctrl-C once the run has trained a few steps: it checkpoints, exits
//    kExitRequeue and says to run the same command again, which resumes at
//    the next step (no step trained twice) and finishes.
//  - Two Ctrl-C: the run stops at once, without waiting for a checkpoint, exit
//    kExitInterrupted, and no rank is left behind.
// Every wait is for something the run shows (metrics.jsonl, the terminal's
// text), with a deadline. ~10 s each on 2 cores.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/exit_codes.h"
#include "tests/fixtures/test_paths.h"

extern char** environ;

namespace maestro {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A program running in a pseudo-terminal of its own: it is the session
// leader, the terminal is its controlling terminal and its process group the
// terminal's foreground group.
class TerminalRun {
 public:
  TerminalRun(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env) {
    // Everything the child needs is made before fork: after it, only exec.
    std::vector<std::string> env_text;
    for (char** e = environ; *e != nullptr; ++e) {
      bool replaced = false;
      for (const auto& [name, value] : env)
        replaced = replaced || std::strncmp(*e, (name + "=").c_str(), name.size() + 1) == 0;
      if (!replaced) env_text.emplace_back(*e);
    }
    for (const auto& [name, value] : env) env_text.push_back(name + "=" + value);
    std::vector<char*> args, envp;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    for (const auto& e : env_text) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    // forkpty: setsid, the slave as controlling terminal (TIOCSCTTY) and as
    // stdin/stdout/stderr; the terminal's foreground group is then the child's.
    pid_ = forkpty(&master_, nullptr, nullptr, nullptr);
    if (pid_ == 0) {
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    if (pid_ < 0) return;
    fcntl(master_, F_SETFL, fcntl(master_, F_GETFL) | O_NONBLOCK);
    // What a user's terminal does with ^C: ISIG on, VINTR = ^C (the default).
    termios t{};
    tcgetattr(master_, &t);
    t.c_lflag |= ISIG;
    t.c_cc[VINTR] = 0x03;
    tcsetattr(master_, TCSANOW, &t);
  }
  ~TerminalRun() {
    if (pid_ > 0 && !status_) {  // a failed test: end it (its mpirun stops the ranks)
      kill(pid_, SIGTERM);
      Wait(std::chrono::seconds(20));
      if (!status_) {
        kill(-pid_, SIGKILL);
        Wait(std::chrono::seconds(5));
      }
    }
    if (master_ >= 0) close(master_);
  }
  TerminalRun(const TerminalRun&) = delete;
  TerminalRun& operator=(const TerminalRun&) = delete;

  bool started() const { return pid_ > 0; }
  const std::string& output() const { return output_; }

  // Keys typed at the terminal.
  void Type(const std::string& keys) {
    ASSERT_EQ(write(master_, keys.data(), keys.size()), static_cast<ssize_t>(keys.size())) << std::strerror(errno);
  }

  // Shows the terminal's text until `done()` holds (true) or `limit` passes
  // or the program ends (false).
  bool WaitUntil(const std::function<bool()>& done, std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!done()) {
      if (status_ || Clock::now() > deadline || !Read(std::chrono::milliseconds(50))) return done();
      Reap();
    }
    return true;
  }

  // Waits for the program's end (reading its text to the end); its exit
  // status, or nothing when `limit` passed first.
  std::optional<int> Wait(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!status_ && Clock::now() < deadline) {
      Read(std::chrono::milliseconds(50));
      Reap();
    }
    while (status_ && Read(std::chrono::milliseconds(0))) {
    }
    return status_;
  }

 private:
  // Waits up to `wait` for text and appends it; false at the terminal's end
  // (every writer closed it).
  bool Read(std::chrono::milliseconds wait) {
    pollfd p{master_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(wait.count())) <= 0) return true;
    char buf[4096];
    const ssize_t n = read(master_, buf, sizeof(buf));
    if (n > 0) {
      output_.append(buf, static_cast<size_t>(n));
      return true;
    }
    return n < 0 && (errno == EAGAIN || errno == EINTR);  // EIO: the slave side is closed
  }
  void Reap() {
    int status = 0;
    if (!status_ && waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
  }

  int master_ = -1;
  pid_t pid_ = -1;
  std::optional<int> status_;
  std::string output_;
};

// A decoder small enough for a few milliseconds a step on one thread
// (`steps` of them), or, with `slow`, a few hundred.
void WriteSpec(const std::string& path, int steps, bool slow) {
  std::ofstream out(path);
  out << "[job]\nname = \"interrupt\"\nsteps = " << steps << R"(

[cluster]
nodes = 1
gpus_per_node = 2

[cluster.gpu.cpu]
cpu = true
memory_gb = 2
tflops_bf16 = 0.05

[data]
dataset = "text"
global_batch = )"
      << (slow ? 32 : 8) << "\nseq_len = " << (slow ? 128 : 32) << R"(
seed = 7

[models.lm]
kind = "decoder"
hidden = )"
      << (slow ? 128 : 32) << "\nlayers = " << (slow ? 4 : 1) << R"(
heads = 2
kv_heads = 1
ffn_hidden = 128
vocab = 512

[[section]]
name = "lm"
model = "lm"
mode = "train"
optimizer = { lr = 1e-3 }
)";
}

// The "step" of every step line of metrics.jsonl, in file order.
std::vector<int64_t> MetricsSteps(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<int64_t> steps;
  std::string line;
  const std::string key = "\"step\":";
  while (std::getline(in, line)) {
    const size_t at = line.find(key);
    if (at != std::string::npos && line.find("\"loss\"") != std::string::npos) {
      steps.push_back(std::stoll(line.substr(at + key.size())));
    }
  }
  return steps;
}

// Live processes whose command line names `text` (a run's folder).
int ProcessesNaming(const std::string& text) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline;  // its arguments, each ended by '\0'
    std::getline(in, cmdline);
    if (cmdline.find(text) != std::string::npos && entry.path().filename() != std::to_string(getpid())) ++count;
  }
  return count;
}

class MaestroRunInterrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::string(MAESTRO_TEST_TMP) + "/maestro-interrupt-" + info->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::vector<std::string> Command(const std::string& spec) const {
    return {std::string(MAESTRO_BIN_DIR) + "/maestro", "run", spec, "-o", dir_ + "/out", "--ranks", "2", "--no-eval"};
  }
  static std::vector<std::pair<std::string, std::string>> Env() {
    return {{"MAESTRO_THREADS_PER_RANK", "1"}, {"MAESTRO_COMM_TIMEOUT_S", "60"}};
  }
  std::string run_dir() const { return dir_ + "/out/run"; }

  std::string dir_;
};

TEST_F(MaestroRunInterrupt, CtrlCCheckpointsExitsResumableAndTheSameCommandResumesAtTheNextStep) {
  constexpr int kSteps = 400;
  const std::string spec = dir_ + "/tiny.toml";
  WriteSpec(spec, kSteps, /*slow=*/false);
  int64_t stopped_after = -1;
  {
    TerminalRun run(Command(spec), Env());
    ASSERT_TRUE(run.started());
    ASSERT_TRUE(run.WaitUntil([&] { return MetricsSteps(run_dir()).size() >= 3; }, std::chrono::seconds(90)))
        << run.output();
    run.Type("\x03");
    const auto status = run.Wait(std::chrono::seconds(60));
    ASSERT_TRUE(status.has_value()) << "still running 60 s after Ctrl-C:\n" << run.output();
    ASSERT_TRUE(WIFEXITED(*status)) << "ended by signal " << WTERMSIG(*status) << ":\n" << run.output();
    EXPECT_EQ(WEXITSTATUS(*status), kExitRequeue) << run.output();
    EXPECT_NE(run.output().find("maestro run: interrupted: checkpointing after the step in progress"),
              std::string::npos)
        << run.output();
    EXPECT_NE(run.output().find("run the same command again to resume"), std::string::npos) << run.output();
    const auto steps = MetricsSteps(run_dir());
    ASSERT_FALSE(steps.empty());
    stopped_after = steps.back();
    EXPECT_LT(stopped_after, kSteps - 1) << "the run ended before the interrupt";
  }
  // A committed checkpoint is there (no temporary file alone), and no rank lives on.
  int checkpoints = 0;
  for (const auto& entry : fs::directory_iterator(run_dir() + "/checkpoints")) {
    if (entry.path().extension() != ".tmp") ++checkpoints;
  }
  EXPECT_GE(checkpoints, 1);
  EXPECT_EQ(ProcessesNaming(dir_ + "/out"), 0);

  // The same command again: it resumes at the next step and finishes.
  TerminalRun again(Command(spec), Env());
  ASSERT_TRUE(again.started());
  const auto status = again.Wait(std::chrono::seconds(120));
  ASSERT_TRUE(status.has_value()) << again.output();
  ASSERT_TRUE(WIFEXITED(*status)) << again.output();
  EXPECT_EQ(WEXITSTATUS(*status), kExitOk) << again.output();
  const auto steps = MetricsSteps(run_dir());
  ASSERT_EQ(steps.size(), static_cast<size_t>(kSteps)) << "a step trained twice or missing";
  for (int i = 0; i < kSteps; ++i) ASSERT_EQ(steps[static_cast<size_t>(i)], i);
  // The second start's first step is the one after the checkpoint.
  EXPECT_NE(again.output().find("step " + std::to_string(stopped_after + 2) + "/" + std::to_string(kSteps)),
            std::string::npos)
      << again.output();
  EXPECT_EQ(again.output().find("step 1/" + std::to_string(kSteps)), std::string::npos)
      << "the second start trained from step 0:\n"
      << again.output();
}

TEST_F(MaestroRunInterrupt, SecondCtrlCStopsEveryRankAtOnce) {
  const std::string spec = dir_ + "/slow.toml";
  WriteSpec(spec, 100000, /*slow=*/true);
  TerminalRun run(Command(spec), Env());
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.WaitUntil([&] { return !MetricsSteps(run_dir()).empty(); }, std::chrono::seconds(90)))
      << run.output();
  run.Type("\x03");
  // The second Ctrl-C once the first one is acknowledged, as a user presses it.
  ASSERT_TRUE(run.WaitUntil([&] { return run.output().find("maestro run: interrupted: ") != std::string::npos; },
                            std::chrono::seconds(10)))
      << run.output();
  run.Type("\x03");
  const auto t0 = Clock::now();
  const auto status = run.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(status.has_value()) << "still running 30 s after the second Ctrl-C:\n" << run.output();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_LT(seconds, 15.0) << run.output();
  ASSERT_TRUE(WIFEXITED(*status)) << "ended by signal " << WTERMSIG(*status) << ":\n" << run.output();
  EXPECT_EQ(WEXITSTATUS(*status), kExitInterrupted) << run.output();
  EXPECT_NE(run.output().find("maestro run: interrupted again: stopping every rank now"), std::string::npos)
      << run.output();
  EXPECT_EQ(ProcessesNaming(dir_ + "/out"), 0) << "a rank outlived `maestro run`";
}

}  // namespace
}  // namespace maestro
