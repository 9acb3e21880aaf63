// SPDX-License-Identifier: Apache-2.0
// maestro-bench simulator: how well the compiler's step simulator, fed with a
// profile measured on this machine, predicts the step time of real runs of
// the tiny specs — the user's path, end to end:
//   maestro profile spec.toml -o DIR --ranks R --pin ...      (measure, recompile)
//   maestro run spec.toml -o DIR --ranks R --pin ... --profiles DIR/profile.json
// Cases: tiny VLM and tiny KD, each with fan-out 1 (one rank per section) and
// fan-out 2 (the downstream section on two DP ranks: 3 ranks on this
// machine's cores); micro-batch sizes are pinned too, so that what is
// measured is the simulator, not the planner changing its mind between noisy
// profiles. Per case: predicted = plan.json's predicted_step_seconds
// (the wavefront simulation of the plan with the measured costs); measured =
// the median step_seconds of metrics.jsonl after the warm-up steps.
//   max_abs_error   max over cases of |predicted - measured| / measured (goal <= 0.15)
//   cases.<name>    predicted, measured, relative_error, steps
// The tiny KD needs a trained teacher: the bench trains specs/tiny_teacher.toml
// for a few steps first (its weights do not change the KD's speed).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/registry.h"
#include "cli/subprocess.h"
#include "plan/plan.h"

namespace {

namespace fs = std::filesystem;

struct SimulatorCase {
  std::string name;
  std::string spec;
  int ranks;
  std::vector<std::string> pins;
};

void Run(const std::vector<std::string>& argv, const std::string& what) {
  // Our stdout is the benchmark's JSON: the tools' reports go to stderr.
  auto rc = maestro::cli::RunProcess(argv, maestro::cli::ChildStdout::kToStderr);
  if (!rc.ok()) throw std::runtime_error(what + ": " + rc.status().ToString());
  if (*rc != 0) throw std::runtime_error(what + " exited with status " + std::to_string(*rc));
}

// Median step_seconds over the steps at index >= warmup.
double MedianStepSeconds(const std::string& metrics, int64_t warmup, int* counted) {
  std::ifstream in(metrics);
  std::vector<double> seconds;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step_seconds") || j.value("step", int64_t{0}) < warmup) continue;
    seconds.push_back(j["step_seconds"].get<double>());
  }
  if (seconds.empty()) throw std::runtime_error("no steps past warm-up in " + metrics);
  std::sort(seconds.begin(), seconds.end());
  *counted = static_cast<int>(seconds.size());
  const size_t n = seconds.size();
  return n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
}

}  // namespace

MAESTRO_BENCHMARK(simulator, "simulated vs measured step time of the tiny specs, compiled with a measured profile") {
  const int64_t warmup = 5;
  const int64_t steps = options.quick ? 20 : 100;
  const std::string bin = maestro::cli::SelfDirectory();
  const std::string source = MAESTRO_SOURCE_DIR;
  char tmpl[] = "/tmp/maestro-simulator-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("cannot create a temporary directory in /tmp");
  const std::string dir = tmpl;
  // The specs name their teacher's run directory relative to themselves
  // (../out/tiny_teacher/run): copies keep everything under `dir`.
  fs::create_directories(dir + "/specs");
  for (const char* name : {"tiny_vlm.toml", "tiny_kd.toml", "tiny_teacher.toml"}) {
    fs::copy_file(source + "/specs/" + name, dir + "/specs/" + name);
  }
  Run({bin + "/maestro", "run", dir + "/specs/tiny_teacher.toml", "-o", dir + "/out/tiny_teacher", "--steps", "3",
       "--no-eval"},
      "training the tiny teacher");

  const std::vector<SimulatorCase> cases = {
      {"tiny_vlm_fanout1", "tiny_vlm.toml", 2, {"vit.dp=1", "llm.dp=1", "vit.micro_batch=16", "llm.micro_batch=16"}},
      {"tiny_vlm_fanout2", "tiny_vlm.toml", 3, {"vit.dp=1", "llm.dp=2", "vit.micro_batch=16", "llm.micro_batch=16"}},
      {"tiny_kd_fanout1",
       "tiny_kd.toml",
       2,
       {"teacher.dp=1", "student.dp=1", "teacher.micro_batch=4", "student.micro_batch=4"}},
      {"tiny_kd_fanout2",
       "tiny_kd.toml",
       3,
       {"teacher.dp=1", "student.dp=2", "teacher.micro_batch=4", "student.micro_batch=4"}},
  };
  nlohmann::json out;
  out["cases"] = nlohmann::json::object();
  double max_error = 0.0;
  for (const auto& c : cases) {
    const std::string out_dir = dir + "/" + c.name;
    const std::string spec = dir + "/specs/" + c.spec;
    std::vector<std::string> common{"-o", out_dir, "--ranks", std::to_string(c.ranks)};
    for (const auto& pin : c.pins) common.insert(common.end(), {"--pin", pin});

    std::vector<std::string> profile{bin + "/maestro", "profile", spec};
    profile.insert(profile.end(), common.begin(), common.end());
    Run(profile, "maestro profile (" + c.name + ")");

    std::vector<std::string> run{bin + "/maestro", "run", spec};
    run.insert(run.end(), common.begin(), common.end());
    // Sectioned: the pins agree, so auto could fuse them; the bench compares
    // each section's measured time with the simulator's.
    run.insert(run.end(), {"--profiles", out_dir + "/profile.json", "--steps", std::to_string(steps), "--no-eval",
                           "--fresh", "--grouping", "sectioned"});
    Run(run, "maestro run (" + c.name + ")");

    auto plan = maestro::plan::LoadPlan(out_dir + "/plan.json");
    if (!plan.ok()) throw std::runtime_error(plan.status().ToString());
    for (const auto& s : plan->sections) {
      if (!s.cost.measured)
        throw std::runtime_error(c.name + ": section " + s.name + " was not planned from the profile");
    }
    int counted = 0;
    const double measured = MedianStepSeconds(out_dir + "/run/metrics.jsonl", warmup, &counted);
    const double predicted = plan->predicted_step_seconds;
    const double error = (predicted - measured) / measured;
    max_error = std::max(max_error, std::abs(error));
    out["cases"][c.name] = {{"predicted_step_seconds", predicted},
                            {"measured_step_seconds", measured},
                            {"relative_error", error},
                            {"steps_measured", counted},
                            {"ranks", c.ranks}};
  }
  fs::remove_all(dir);
  out["max_abs_error"] = max_error;
  out["cores"] = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return out;
}
