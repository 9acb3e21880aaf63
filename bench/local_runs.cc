// SPDX-License-Identifier: Apache-2.0
#include "bench/local_runs.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "cli/subprocess.h"

namespace maestro::bench {

compiler::CompileOptions LocalCompileOptions(compiler::Grouping grouping) {
  compiler::CompileOptions options;
  const int cores = std::max(2, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  options.local_ranks = cores;
  options.local_cores = cores;
  options.local_grow = true;
  options.grouping = grouping;
  return options;
}

compiler::Spec ParsedSpecFile(const std::string& path) {
  auto spec = compiler::ParseSpecFile(path);
  if (!spec.ok()) throw std::runtime_error(spec.status().ToString());
  return std::move(spec).value();
}

compiler::CompileResult CompiledOrThrow(const compiler::Spec& spec, const compiler::CompileOptions& options) {
  auto compiled = compiler::Compile(spec, options);
  if (!compiled.ok()) throw std::runtime_error(compiled.status().ToString());
  return std::move(compiled).value();
}

LocalPlanned LocalPlannedOf(const compiler::CompileResult& compiled, int64_t steps) {
  LocalPlanned out;
  out.plan = compiled.plan;
  out.plan.data.steps = steps;
  for (auto& s : out.plan.sections) {
    s.init_from.clear();
    for (auto& c : s.components) c.init_from.clear();
  }
  out.predicted_step_seconds = compiled.grouping.chosen_step_seconds;
  out.fused = compiled.grouping.fused;
  return out;
}

LocalPlanned PlannedLocalPlan(const std::string& spec_path, int64_t steps, compiler::Grouping grouping) {
  return LocalPlannedOf(CompiledOrThrow(ParsedSpecFile(spec_path), LocalCompileOptions(grouping)), steps);
}

double Rate(const RunFigures& f) {
  return f.samples / f.seconds;
}

std::string WritePlan(const plan::Plan& plan, const std::string& path) {
  if (!plan::SavePlan(plan, path).ok()) throw std::runtime_error("cannot write " + path);
  return path;
}

RunFigures ReadMetrics(const std::string& path, int64_t first_step) {
  RunFigures f;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("offline_pass_s")) f.offline_pass_seconds += j["offline_pass_s"].get<double>();
    if (!j.is_object() || !j.contains("step_seconds") || j["step"].get<int64_t>() < first_step) continue;
    f.samples += j["samples"].get<double>();
    f.seconds += j["step_seconds"].get<double>();
    f.step_seconds.push_back(j["step_seconds"].get<double>());
    if (j.contains("overhead")) f.overhead += j["overhead"].get<double>();
    ++f.steps;
  }
  if (f.steps == 0 || f.seconds <= 0) throw std::runtime_error("no step figures in " + path);
  return f;
}

namespace {

// Trains `plan_path` with one rank per section under mpirun into run_dir.
void RunSectioned(const std::string& worker, const plan::Plan& plan, const std::string& plan_path,
                  const std::string& run_dir) {
  std::vector<std::string> mpirun{
      "mpirun", "--oversubscribe", "--mca", "btl", "self,vader", "-np", std::to_string(plan.world_size())};
  if (geteuid() == 0) mpirun.insert(mpirun.begin() + 1, "--allow-run-as-root");
  for (const std::string& a :
       {worker, std::string("--no-progress"), std::string("--no-eval"), std::string("--run-dir"), run_dir, plan_path}) {
    mpirun.push_back(a);
  }
  // Our stdout is the benchmark's result: the workers' logs go to stderr.
  auto rc = cli::RunProcess(mpirun, cli::ChildStdout::kToStderr);
  if (!rc.ok() || *rc != 0) throw std::runtime_error("a sectioned run failed; is openmpi-bin installed?");
}

}  // namespace

RunFigures RunPlan(const std::string& worker, const plan::Plan& plan, const std::string& dir, const std::string& name) {
  RunSectioned(worker, plan, WritePlan(plan, dir + "/" + name + ".json"), dir + "/" + name);
  return ReadMetrics(dir + "/" + name + "/metrics.jsonl");
}

void RunRotated(std::vector<std::function<void()>> runs, int round) {
  if (runs.empty()) return;
  std::rotate(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(round % static_cast<int>(runs.size())),
              runs.end());
  for (const auto& run : runs) run();
}

double MedianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace maestro::bench
