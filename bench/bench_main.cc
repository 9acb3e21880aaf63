// SPDX-License-Identifier: Apache-2.0
// maestro-bench: `maestro-bench list`, `maestro-bench <name> [--json] [--quick]`.
// Standard output carries the result and nothing else: one JSON document with
// --json, else a table. While a benchmark runs, file descriptor 1 points at
// standard error, so whatever it prints — its own logs, a library's, the
// children it starts (which inherit descriptor 1) — lands on stderr.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "bench/registry.h"
#include "cli/subprocess.h"

namespace {

// For its lifetime, descriptor 1 (and stdio's stdout, std::cout) writes to
// standard error; the destructor points it back at the real standard output.
class StdoutToStderr {
 public:
  StdoutToStderr() {
    std::fflush(stdout);
    saved_ = ::dup(STDOUT_FILENO);
    if (saved_ < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      throw std::runtime_error(std::string("cannot point standard output at standard error: ") + std::strerror(errno));
    }
  }
  ~StdoutToStderr() {
    std::fflush(stdout);
    ::dup2(saved_, STDOUT_FILENO);
    ::close(saved_);
  }
  StdoutToStderr(const StdoutToStderr&) = delete;
  StdoutToStderr& operator=(const StdoutToStderr&) = delete;

 private:
  int saved_ = -1;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"maestro-bench: Maestro's benchmarks; each reports ratios against a baseline measured in the same run"};
  std::string name;
  bool json = false;
  maestro::bench::BenchOptions options;
  app.add_option("name", name, "benchmark to run, or `list`")->required();
  app.add_flag("--json", json, "print the result as one JSON object on stdout (logs go to stderr)");
  app.add_flag("--quick", options.quick, "smaller sizes (a smoke run)");
  app.add_option("args", options.args, "benchmark-specific arguments (after --)");
  CLI11_PARSE(app, argc, argv);

  const auto& reg = maestro::bench::Registry();
  if (name == "list") {
    for (const auto& [n, e] : reg) std::printf("%-12s %s\n", n.c_str(), e.description.c_str());
    return 0;
  }
  auto it = reg.find(name);
  if (it == reg.end()) {
    std::fprintf(stderr, "maestro-bench: no benchmark named '%s'; `maestro-bench list` shows them\n", name.c_str());
    return 2;
  }
  // The ranks a benchmark starts (mpirun, maestro-worker) run as `maestro
  // run` and `maestro profile` start theirs, with glibc's huge-page malloc:
  // a benchmark measures what a user runs, and its predictions come from
  // profiles made that way (without it the kd bench's runs measured 10-20%
  // slower than `maestro run` of the same plan).
  maestro::cli::PreferHugePagesForChildren();
  nlohmann::json out;
  try {
    const StdoutToStderr logs_to_stderr;
    out = it->second.fn(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "maestro-bench %s: %s\n", name.c_str(), e.what());
    return 1;
  }
  out["benchmark"] = name;
  // What the ranks it started ran under (the line above PreferHugePagesForChildren).
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  out["ranks_glibc_tunables"] = tunables != nullptr ? tunables : "";
  if (json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    for (const auto& [k, v] : out.items()) std::printf("%-32s %s\n", k.c_str(), v.dump().c_str());
  }
  return 0;
}
