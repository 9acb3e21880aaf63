// SPDX-License-Identifier: Apache-2.0
#include "tests/slurm/slurm_test_util.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

#ifndef MAESTRO_SLURM_DEFAULT_DIR
#error "MAESTRO_SLURM_DEFAULT_DIR must be defined by tests/slurm/CMakeLists.txt"
#endif
#ifndef MAESTRO_LOCAL_CLUSTER_SCRIPT
#error "MAESTRO_LOCAL_CLUSTER_SCRIPT must be defined by tests/slurm/CMakeLists.txt"
#endif

namespace maestro::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string Errno(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// The inherited environment with `overrides` ("KEY=VALUE") replacing or
// adding entries.
std::vector<std::string> MergedEnvironment(const std::vector<std::string>& overrides) {
  std::map<std::string, std::string> by_key;
  std::vector<std::string> order;
  auto put = [&](const std::string& entry) {
    const std::string key = entry.substr(0, entry.find('='));
    if (by_key.find(key) == by_key.end()) order.push_back(key);
    by_key[key] = entry;
  };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) put(*e);
  for (const auto& entry : overrides) put(entry);
  std::vector<std::string> out;
  out.reserve(order.size());
  for (const auto& key : order) out.push_back(by_key[key]);
  return out;
}

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { Reset(); }
  int get() const { return fd_; }
  void Reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

int DecodeWaitStatus(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n')) ++i;
  return s.substr(i);
}

std::string JoinArgv(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out;
}

int ToInt(const std::string& s, int fallback) {
  if (s.empty()) return fallback;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  return (end != nullptr && end != s.c_str()) ? static_cast<int>(v) : fallback;
}

// A token `Key=Value` starts a new field when Key looks like an scontrol key
// (letters, digits, '_', ':', '/'); anything else continues the previous
// value (values such as Command or Comment may contain spaces).
bool StartsField(const std::string& token) {
  const size_t eq = token.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  for (size_t i = 0; i < eq; ++i) {
    const char c = token[i];
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == ':' || c == '/';
    if (!ok) return false;
  }
  return true;
}

std::map<std::string, std::string> ParseRecord(const std::string& line) {
  std::map<std::string, std::string> fields;
  std::istringstream in(line);
  std::string token;
  std::string last_key;
  while (in >> token) {
    if (StartsField(token)) {
      const size_t eq = token.find('=');
      last_key = token.substr(0, eq);
      fields[last_key] = token.substr(eq + 1);
    } else if (!last_key.empty()) {
      fields[last_key] += " " + token;
    }
  }
  return fields;
}

std::string Field(const std::map<std::string, std::string>& fields, const std::string& key) {
  auto it = fields.find(key);
  return it == fields.end() ? std::string() : it->second;
}

}  // namespace

StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
                                   std::chrono::milliseconds timeout) {
  if (argv.empty()) return Status::InvalidArgument("RunCommand: empty argv");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::IOError(Errno("pipe2"));
  Fd read_end(fds[0]);
  Fd write_end(fds[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), 2);

  std::vector<std::string> env = MergedEnvironment(extra_env);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = argv;
  std::vector<char*> argp;
  for (auto& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);

  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, argp[0], &actions, nullptr, argp.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    return Status::NotFound("cannot run '" + argv[0] + "': " + std::strerror(rc) +
                            " (Slurm's commands come with: apt-get install slurm-client; or run scripts/setup.sh)");
  }
  write_end.Reset();

  CommandResult result;
  const auto deadline = Clock::now() + timeout;
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{read_end.get(), POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) continue;  // re-check the deadline
    const ssize_t got = ::read(read_end.get(), buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EOF: the child (and whatever inherited the pipe) closed it
    result.output.append(buf, static_cast<size_t>(got));
  }
  int status = 0;
  if (timed_out) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return Status::Timeout("'" + JoinArgv(argv) + "' did not finish within " + std::to_string(timeout.count()) +
                           " ms; its output so far:\n" + result.output);
  }
  // The pipe is closed; the child exits about now. Bounded wait all the same.
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return Status::Internal(Errno("waitpid"));
    if (Clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return Status::Timeout("'" + JoinArgv(argv) + "' closed its output but did not exit in time");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  result.exit_code = DecodeWaitStatus(status);
  return result;
}

bool IsTerminalJobState(std::string_view state) {
  static const char* const kTerminal[] = {"COMPLETED", "FAILED",    "CANCELLED", "TIMEOUT",      "NODE_FAIL",
                                          "PREEMPTED", "BOOT_FAIL", "DEADLINE",  "OUT_OF_MEMORY"};
  for (const char* t : kTerminal) {
    if (state == t) return true;
  }
  return false;
}

std::string SlurmJobInfo::state() const {
  for (const auto& c : components) {
    if (c.state != "COMPLETED") return c.state;
  }
  return components.empty() ? std::string("UNKNOWN") : std::string("COMPLETED");
}

int SlurmJobInfo::exit_code() const {
  int code = 0;
  for (const auto& c : components) code = std::max(code, c.exit_code);
  return code;
}

bool SlurmJobInfo::finished() const {
  if (components.empty()) return false;
  for (const auto& c : components) {
    if (!IsTerminalJobState(c.state)) return false;
  }
  return true;
}

StatusOr<SlurmJobInfo> ParseScontrolShowJob(const std::string& job_id, const std::string& text) {
  SlurmJobInfo info;
  info.job_id = job_id;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("JobId=", 0) != 0) continue;
    SlurmJobComponent c;
    c.fields = ParseRecord(line);
    c.job_id = Field(c.fields, "JobId");
    c.het_offset = ToInt(Field(c.fields, "HetJobOffset"), 0);
    c.state = Field(c.fields, "JobState");
    c.reason = Field(c.fields, "Reason");
    const std::string exit = Field(c.fields, "ExitCode");
    const size_t colon = exit.find(':');
    c.exit_code = ToInt(exit.substr(0, colon), -1);
    c.exit_signal = colon == std::string::npos ? 0 : ToInt(exit.substr(colon + 1), 0);
    c.restarts = ToInt(Field(c.fields, "Restarts"), 0);
    c.node_list = Field(c.fields, "NodeList");
    c.std_out = Field(c.fields, "StdOut");
    info.components.push_back(std::move(c));
  }
  if (info.components.empty()) {
    return Status::InvalidArgument("no job record in the output of 'scontrol show job -o " + job_id + "':\n" + text);
  }
  std::sort(info.components.begin(), info.components.end(),
            [](const SlurmJobComponent& a, const SlurmJobComponent& b) { return a.het_offset < b.het_offset; });
  return info;
}

StatusOr<LocalSlurmCluster> LocalSlurmCluster::FromEnvironment() {
  const char* env = std::getenv("MAESTRO_SLURM_DIR");
  const std::string dir = (env != nullptr && *env != '\0') ? std::string(env) : std::string(MAESTRO_SLURM_DEFAULT_DIR);
  LocalSlurmCluster cluster(dir);
  struct stat st {};
  if (::stat(cluster.slurm_conf().c_str(), &st) != 0) {
    return Status::FailedPrecondition(
        "no local Slurm cluster in '" + dir + "' (" + cluster.slurm_conf() +
        " is missing). Run the test through ctest (the slurm_cluster fixture starts it), or start one with: " +
        ScriptPath() + " start " + dir);
  }
  return cluster;
}

LocalSlurmCluster::LocalSlurmCluster(std::string dir) : dir_(std::move(dir)) {}

std::string LocalSlurmCluster::ScriptPath() {
  return MAESTRO_LOCAL_CLUSTER_SCRIPT;
}

std::vector<std::string> LocalSlurmCluster::Environment() const {
  // Keep in step with `local-cluster.sh env`.
  return {"SLURM_CONF=" + slurm_conf(),     "MAESTRO_SLURM_DIR=" + dir_,      "OMPI_MCA_btl=self,tcp",
          "OMPI_MCA_btl_tcp_if_include=lo", "OMPI_MCA_oob_tcp_if_include=lo", "OMPI_MCA_pml=ob1"};
}

StatusOr<CommandResult> LocalSlurmCluster::Run(const std::vector<std::string>& argv,
                                               std::chrono::milliseconds timeout) const {
  return RunCommand(argv, Environment(), timeout);
}

StatusOr<CommandResult> LocalSlurmCluster::RunScript(const std::string& subcommand,
                                                     const std::vector<std::string>& args,
                                                     std::chrono::milliseconds timeout) const {
  std::vector<std::string> argv = {"bash", ScriptPath(), subcommand, dir_};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, {}, timeout);
}

StatusOr<std::string> LocalSlurmCluster::Submit(const std::string& script_path,
                                                const std::vector<std::string>& sbatch_args) const {
  std::vector<std::string> argv = {"sbatch", "--parsable"};
  argv.insert(argv.end(), sbatch_args.begin(), sbatch_args.end());
  argv.push_back(script_path);
  auto run = Run(argv);
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    return Status::FailedPrecondition("sbatch rejected " + script_path + " (exit " + std::to_string(run->exit_code) +
                                      "):\n" + run->output);
  }
  // --parsable prints "<id>" or "<id>;<cluster>"; warnings may come first.
  std::istringstream lines(run->output);
  std::string line;
  std::string id;
  while (std::getline(lines, line)) {
    line = Trim(line);
    const std::string first = line.substr(0, line.find(';'));
    if (!first.empty() && first.find_first_not_of("0123456789") == std::string::npos) id = first;
  }
  if (id.empty()) return Status::Internal("no job id in the output of sbatch --parsable:\n" + run->output);
  return id;
}

StatusOr<SlurmJobInfo> LocalSlurmCluster::ShowJob(const std::string& job_id) const {
  auto run = Run({"scontrol", "show", "job", "-o", job_id});
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    if (run->output.find("Invalid job id") != std::string::npos) {
      return Status::NotFound("Slurm does not know job " + job_id + ": " + Trim(run->output));
    }
    return Status::Unavailable("'scontrol show job " + job_id + "' failed (exit " + std::to_string(run->exit_code) +
                               "): " + Trim(run->output) + "; is the cluster in " + dir_ + " up? (" + ScriptPath() +
                               " status " + dir_ + ")");
  }
  return ParseScontrolShowJob(job_id, run->output);
}

StatusOr<SlurmJobInfo> LocalSlurmCluster::WaitForJobState(const std::string& job_id,
                                                          const std::function<bool(const SlurmJobInfo&)>& done,
                                                          std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  std::string last = "(never shown)";
  for (;;) {
    auto job = ShowJob(job_id);
    if (!job.ok()) return job.status();
    if (done(*job)) return job;
    last.clear();
    for (const auto& c : job->components) {
      last += c.job_id + ":" + c.state + "(" + c.reason + ") ";
    }
    if (Clock::now() >= deadline) {
      return Status::Timeout("job " + job_id + " did not reach the awaited state within " +
                             std::to_string(timeout.count()) + " ms; last seen: " + last + "(logs: " + dir_ + "/log)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

StatusOr<SlurmJobInfo> LocalSlurmCluster::WaitForJob(const std::string& job_id,
                                                     std::chrono::milliseconds timeout) const {
  return WaitForJobState(
      job_id, [](const SlurmJobInfo& j) { return j.finished(); }, timeout);
}

StatusOr<std::string> LocalSlurmCluster::ReadJobOutput(const SlurmJobInfo& job) const {
  if (job.components.empty() || job.components.front().std_out.empty()) {
    return Status::NotFound("job " + job.job_id + " has no StdOut file");
  }
  const std::string& path = job.components.front().std_out;
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot open the output of job " + job.job_id + ": " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Status LocalSlurmCluster::Cancel(const std::string& job_id, const std::string& signal) const {
  std::vector<std::string> argv = {"scancel"};
  if (!signal.empty()) argv.push_back("--signal=" + signal);
  argv.push_back(job_id);
  auto run = Run(argv);
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) return Status::FailedPrecondition("scancel " + job_id + " failed: " + Trim(run->output));
  return Status::Ok();
}

Status LocalSlurmCluster::MakeEligibleNow(const std::string& job_id) const {
  auto run = Run({"scontrol", "update", "JobId=" + job_id, "StartTime=now"});
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    return Status::FailedPrecondition("scontrol update JobId=" + job_id +
                                      " StartTime=now failed: " + Trim(run->output));
  }
  return Status::Ok();
}

Status LocalSlurmCluster::Requeue(const std::string& job_id) const {
  auto run = Run({"scontrol", "requeue", job_id});
  if (!run.ok()) return run.status();
  if (run->exit_code != 0)
    return Status::FailedPrecondition("scontrol requeue " + job_id + " failed: " + Trim(run->output));
  return MakeEligibleNow(job_id);
}

}  // namespace maestro::testing
