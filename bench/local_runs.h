// SPDX-License-Identifier: Apache-2.0
// Real training runs of the plans `maestro run` would train on this machine,
// for the benchmarks that compare two plans (or two schedule policies) in the
// same run: maestro-bench runtime (runtime_bench.cc) and maestro-bench mix
// (mix_bench.cc).
//
// Owns: the local compile (one rank per core sharing the cores, grown to one
// rank per section: LocalCompileOptions, PlannedLocalPlan), a plan trained
// under mpirun into a run folder and its metrics past the warm-up read back
// (RunPlan, ReadMetrics), the rounds in rotated order (RunRotated) and the
// median of their ratios (MedianOf).
// May call: compiler (Compile), plan, cli/subprocess.h (mpirun, the worker).
// Thread safety: none needed (a benchmark runs on one thread); every
// function throws std::runtime_error on failure.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "plan/plan.h"

namespace maestro::bench {

// Steps of a run that do not count (warm-up): ReadMetrics skips them.
inline constexpr int64_t kWarmupSteps = 3;

// Local mode as `maestro run` asks for it on this machine: one rank per core
// (at least 2) sharing the cores, grown to one rank per section, `grouping`.
compiler::CompileOptions LocalCompileOptions(compiler::Grouping grouping);

// The spec at `path`, parsed; throws with the parser's message.
compiler::Spec ParsedSpecFile(const std::string& path);

// `spec` compiled under `options`; throws with the compiler's message.
compiler::CompileResult CompiledOrThrow(const compiler::Spec& spec, const compiler::CompileOptions& options);

// A plan `maestro run` would train on this machine, training `steps` steps
// from fresh weights (init_from cleared: the speed does not depend on them).
struct LocalPlanned {
  plan::Plan plan;
  double predicted_step_seconds = 0;  // the compiler's simulated step of this plan
  bool fused = false;
};
LocalPlanned LocalPlannedOf(const compiler::CompileResult& compiled, int64_t steps);
LocalPlanned PlannedLocalPlan(const std::string& spec_path, int64_t steps, compiler::Grouping grouping);

// Sums of samples and seconds over the steps past the warm-up; sum of the
// per-step overhead fractions; each of those steps' seconds, in step order.
struct RunFigures {
  double samples = 0, seconds = 0, overhead = 0;
  double offline_pass_seconds = 0;  // the offline spool pass before the first step (none: 0)
  int steps = 0;
  std::vector<double> step_seconds;
};
double Rate(const RunFigures& f);  // samples per second

// `plan` written to `path` (plan::SavePlan); returns `path`.
std::string WritePlan(const plan::Plan& plan, const std::string& path);

// The figures of a run's metrics.jsonl, from step `first_step` on (the
// warm-up skipped by default; 0: every step, a whole job's time).
RunFigures ReadMetrics(const std::string& path, int64_t first_step = kWarmupSteps);

// Trains `plan` with one rank per section under mpirun (maestro-worker
// `worker`, its logs on stderr) into <dir>/<name>, the plan at
// <dir>/<name>.json; returns its figures.
RunFigures RunPlan(const std::string& worker, const plan::Plan& plan, const std::string& dir, const std::string& name);

// Runs `runs` in order, rotated left by `round` (mod their count): a shared
// machine drifts between runs, so each round starts with another one.
void RunRotated(std::vector<std::function<void()>> runs, int round);

double MedianOf(std::vector<double> v);

}  // namespace maestro::bench
