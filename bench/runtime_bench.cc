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
//   wavefront_vs_fifo        the tiny VLM (ViT rank + decoder rank, image
//                            fraction 0.7) measured with the wavefront schedule
//                            vs FIFO (data order): samples/s ratio; without
//                            the Fashion-MNIST demo images it is not run and
//                            wavefront_vs_fifo_skipped says why
//   tiny_vlm_best_vs_monolithic  the tiny VLM as `maestro run` plans it for
//                            this machine (the planner's grouping: sectioned
//                            or fused, tiny_vlm_best_grouping) vs the
//                            monolithic reference: samples/s ratio
// Steps after the first 3 (warm-up) count.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "bench/registry.h"
#include "cli/subprocess.h"
#include "compiler/compile.h"
#include "compiler/spec.h"
#include "datasets/demo_data.h"
#include "plan/plan.h"

namespace {

namespace fs = std::filesystem;
using maestro::plan::Plan;

Plan LocalPlan(const std::string& spec_name, int64_t steps) {
  auto spec = maestro::compiler::ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/" + spec_name);
  if (!spec.ok()) throw std::runtime_error(spec.status().ToString());
  maestro::compiler::CompileOptions options;
  options.grouping = maestro::compiler::Grouping::kSectioned;  // one rank per section, placed below
  auto compiled = maestro::compiler::Compile(*spec, options);
  if (!compiled.ok()) throw std::runtime_error(compiled.status().ToString());
  Plan p = compiled->plan;
  int rank = 0;
  for (size_t i = 0; i < p.sections.size(); ++i) {
    auto& s = p.sections[i];
    s.config.tp = s.config.pp = s.config.cp = s.config.dp = 1;
    // A frozen section the planner ran ahead by more than one batch to
    // stream its pipeline (docs/run_ahead.md) has none here: one batch is
    // what it needs at PP 1 (compiler/run_ahead.h).
    s.run_ahead = std::min(s.run_ahead, 1);
    const bool trains_decoder =
        s.mode == maestro::plan::SectionMode::kTrain && s.model.kind == maestro::plan::ModelKind::kDecoder;
    s.config.micro_batch = trains_decoder ? static_cast<int>(std::max<int64_t>(4, p.data.global_batch / 4)) : 8;
    s.placement = {static_cast<int>(i), rank, 1, 1, 0, s.placement.gpu_type, "", ""};
    ++rank;
    s.init_from.clear();  // teacher weights from the seed: the speed does not depend on them
    if (s.name == "student" && s.loss.kind != "kd") s.loss.kind = "kd";
  }
  for (auto& e : p.edges) e.fanout = e.fanin = 0;
  p.layout.clear();
  p.links.clear();
  p.data.steps = steps;
  maestro::plan::FillLayout(p);
  return p;
}

// The plan `maestro run` trains on this machine: local mode on its cores,
// the planner's own grouping and configuration.
Plan ChosenLocalPlan(const std::string& spec_name, int64_t steps) {
  auto spec = maestro::compiler::ParseSpecFile(std::string(MAESTRO_SOURCE_DIR) + "/specs/" + spec_name);
  if (!spec.ok()) throw std::runtime_error(spec.status().ToString());
  maestro::compiler::CompileOptions options;
  const int cores = std::max(2, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  options.local_ranks = cores;
  options.local_cores = cores;
  options.local_grow = true;
  auto compiled = maestro::compiler::Compile(*spec, options);
  if (!compiled.ok()) throw std::runtime_error(compiled.status().ToString());
  Plan p = compiled->plan;
  p.data.steps = steps;
  return p;
}

// Sum of samples and seconds over the steps past warm-up; mean overhead.
struct RunFigures {
  double samples = 0, seconds = 0, overhead = 0;
  int steps = 0;
};

std::string WritePlan(const Plan& plan, const std::string& path) {
  if (!maestro::plan::SavePlan(plan, path).ok()) throw std::runtime_error("cannot write " + path);
  return path;
}

// Trains `plan_path` with one rank per section under mpirun into run_dir.
void RunSectioned(const std::string& worker, const Plan& plan, const std::string& plan_path,
                  const std::string& run_dir) {
  std::vector<std::string> mpirun{
      "mpirun", "--oversubscribe", "--mca", "btl", "self,vader", "-np", std::to_string(plan.world_size())};
  if (geteuid() == 0) mpirun.insert(mpirun.begin() + 1, "--allow-run-as-root");
  for (const std::string& a :
       {worker, std::string("--no-progress"), std::string("--no-eval"), std::string("--run-dir"), run_dir, plan_path}) {
    mpirun.push_back(a);
  }
  // Our stdout is the benchmark's result: the workers' logs go to stderr.
  auto rc = maestro::cli::RunProcess(mpirun, maestro::cli::ChildStdout::kToStderr);
  if (!rc.ok() || *rc != 0) throw std::runtime_error("a sectioned run failed; is openmpi-bin installed?");
}

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
  const Plan plan = LocalPlan("tiny_kd.toml", steps);
  char tmpl[] = "/tmp/maestro-runtime-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("cannot create a temporary directory in /tmp");
  const std::string dir = tmpl;
  const std::string plan_path = WritePlan(plan, dir + "/plan.json");
  const std::string worker = maestro::cli::SelfDirectory() + "/maestro-worker";

  RunSectioned(worker, plan, plan_path, dir + "/sectioned");
  // The reference prints `step N loss` lines: to stderr, like every log.
  auto rc = maestro::cli::RunProcess({worker, "--reference", "--no-eval", "--run-dir", dir + "/monolithic", plan_path},
                                     maestro::cli::ChildStdout::kToStderr);
  if (!rc.ok() || *rc != 0) throw std::runtime_error("the monolithic reference run failed");

  nlohmann::json out;
  // The wavefront schedule vs data order on the VLM, where the order matters
  // (it trains on Fashion-MNIST: without it, the KD figures still come).
  const maestro::Status images = maestro::datasets::FindFashionMnist(maestro::datasets::DefaultFashionMnistDir());
  if (images.ok()) {
    Plan vlm = LocalPlan("tiny_vlm.toml", steps);
    vlm.schedule_policy = "wavefront";
    RunSectioned(worker, vlm, WritePlan(vlm, dir + "/vlm_wavefront.json"), dir + "/vlm_wavefront");
    vlm.schedule_policy = "fifo";
    RunSectioned(worker, vlm, WritePlan(vlm, dir + "/vlm_fifo.json"), dir + "/vlm_fifo");
    const auto wavefront = ReadMetrics(dir + "/vlm_wavefront/metrics.jsonl");
    const auto fifo = ReadMetrics(dir + "/vlm_fifo/metrics.jsonl");
    out["wavefront_vs_fifo"] = (wavefront.samples / wavefront.seconds) / (fifo.samples / fifo.seconds);
    // The planner's choice against the monolithic reference (every option
    // the runtime has: one process, torch on every core), same steps.
    const Plan best = ChosenLocalPlan("tiny_vlm.toml", steps);
    const std::string best_path = WritePlan(best, dir + "/vlm_best.json");
    RunSectioned(worker, best, best_path, dir + "/vlm_best");
    auto vlm_rc =
        maestro::cli::RunProcess({worker, "--reference", "--no-eval", "--run-dir", dir + "/vlm_reference", best_path},
                                 maestro::cli::ChildStdout::kToStderr);
    if (!vlm_rc.ok() || *vlm_rc != 0) throw std::runtime_error("the VLM's monolithic reference run failed");
    const auto chosen = ReadMetrics(dir + "/vlm_best/metrics.jsonl");
    const auto reference = ReadMetrics(dir + "/vlm_reference/metrics.jsonl");
    out["tiny_vlm_best_vs_monolithic"] = (chosen.samples / chosen.seconds) / (reference.samples / reference.seconds);
    out["tiny_vlm_best_grouping"] = best.sections.size() == 1 && best.sections[0].fused() ? "fused" : "sectioned";
  } else {
    out["wavefront_vs_fifo_skipped"] = "needs the Fashion-MNIST demo images: " + images.ToString();
  }

  const auto sectioned = ReadMetrics(dir + "/sectioned/metrics.jsonl");
  const auto monolithic = ReadMetrics(dir + "/monolithic/metrics.jsonl");
  fs::remove_all(dir);
  const double sectioned_rate = sectioned.samples / sectioned.seconds;
  const double monolithic_rate = monolithic.samples / monolithic.seconds;
  out["sectioned_samples_per_s"] = sectioned_rate;
  out["monolithic_samples_per_s"] = monolithic_rate;
  out["sectioned_vs_monolithic"] = sectioned_rate / monolithic_rate;
  out["overhead_fraction"] = sectioned.overhead / sectioned.steps;
  out["steps_measured"] = sectioned.steps;
  out["cores"] = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return out;
}
