// SPDX-License-Identifier: Apache-2.0
// maestro-bench runtime: the tiny KD spec trained two ways on this machine, in
// the same run — sectioned (teacher and student on their own ranks under
// mpirun, wavefront-scheduled, 1 intra-op thread per rank on 2 cores) and the
// monolithic reference (one process, every section one after another, torch
// using every core) — and the framework's own overhead.
//   sectioned_vs_monolithic  samples/s sectioned / samples/s monolithic
//   overhead_fraction        time of the sectioned run that is neither model
//                            compute nor waiting on a peer (data loading,
//                            scheduling, bookkeeping), per rank, averaged
// Steps after the first 3 (warm-up) count.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "bench/registry.h"
#include "cli/subprocess.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "plan/plan.h"

namespace {

namespace fs = std::filesystem;
using maestro::plan::Plan;

Plan KdPlan(int64_t steps) {
  auto spec = maestro::compiler::ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/tiny_kd.toml");
  if (!spec.ok()) throw std::runtime_error(spec.status().ToString());
  auto compiled = maestro::compiler::Compile(*spec, {});
  if (!compiled.ok()) throw std::runtime_error(compiled.status().ToString());
  Plan p = compiled->plan;
  int rank = 0;
  for (size_t i = 0; i < p.sections.size(); ++i) {
    auto& s = p.sections[i];
    s.config.tp = s.config.pp = s.config.cp = s.config.dp = 1;
    s.config.micro_batch = s.mode == maestro::plan::SectionMode::kForward ? 8 : 4;
    s.placement = {static_cast<int>(i), rank, 1, 1, 0, s.placement.gpu_type, "", ""};
    ++rank;
    if (s.name == "student" && s.loss.kind != "kd") s.loss.kind = "kd";
  }
  for (auto& e : p.edges) e.fanout = e.fanin = 0;
  p.layout.clear();
  p.links.clear();
  p.data.steps = steps;
  maestro::plan::FillLayout(p);
  return p;
}

// Sum of samples and seconds over the steps past warm-up; mean overhead.
struct RunFigures {
  double samples = 0, seconds = 0, overhead = 0;
  int steps = 0;
};

RunFigures ReadMetrics(const std::string& path) {
  RunFigures f;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step_seconds") || j["step"].get<int64_t>() < 3) continue;
    f.samples += j["samples"].get<double>();
    f.seconds += j["step_seconds"].get<double>();
    if (j.contains("overhead")) f.overhead += j["overhead"].get<double>();
    ++f.steps;
  }
  if (f.steps == 0 || f.seconds <= 0) throw std::runtime_error("no step figures in " + path);
  return f;
}

}  // namespace

MAESTRO_BENCHMARK(runtime, "tiny KD: sectioned (mpirun, wavefront) vs monolithic samples/s, framework overhead") {
  const int64_t steps = options.quick ? 10 : 40;
  const Plan plan = KdPlan(steps);
  char tmpl[] = "/tmp/maestro-runtime-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("cannot create a temporary directory in /tmp");
  const std::string dir = tmpl;
  const std::string plan_path = dir + "/plan.json";
  if (!maestro::plan::SavePlan(plan, plan_path).ok()) throw std::runtime_error("cannot write " + plan_path);
  const std::string worker = maestro::cli::SelfDirectory() + "/maestro-worker";

  std::vector<std::string> mpirun{"mpirun", "--oversubscribe", "--mca", "btl", "self,vader", "-np",
                                  std::to_string(plan.world_size())};
  if (geteuid() == 0) mpirun.insert(mpirun.begin() + 1, "--allow-run-as-root");
  for (const std::string& a : {worker, std::string("--no-progress"), std::string("--run-dir"), dir + "/sectioned",
                               plan_path}) {
    mpirun.push_back(a);
  }
  auto rc = maestro::cli::RunProcess(mpirun);
  if (!rc.ok() || *rc != 0) throw std::runtime_error("the sectioned run failed; is openmpi-bin installed?");
  rc = maestro::cli::RunProcess({worker, "--reference", "--run-dir", dir + "/monolithic", plan_path});
  if (!rc.ok() || *rc != 0) throw std::runtime_error("the monolithic reference run failed");

  const auto sectioned = ReadMetrics(dir + "/sectioned/metrics.jsonl");
  const auto monolithic = ReadMetrics(dir + "/monolithic/metrics.jsonl");
  fs::remove_all(dir);
  const double sectioned_rate = sectioned.samples / sectioned.seconds;
  const double monolithic_rate = monolithic.samples / monolithic.seconds;
  nlohmann::json out;
  out["sectioned_samples_per_s"] = sectioned_rate;
  out["monolithic_samples_per_s"] = monolithic_rate;
  out["sectioned_vs_monolithic"] = sectioned_rate / monolithic_rate;
  out["overhead_fraction"] = sectioned.overhead / sectioned.steps;
  out["steps_measured"] = sectioned.steps;
  out["cores"] = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return out;
}
