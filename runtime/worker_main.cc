// SPDX-License-Identifier: Apache-2.0
// maestro-worker: the process that srun (a Slurm heterogeneous job step) or
// mpirun (`maestro run`, one machine) starts on every rank.
//
//   maestro-worker --version
//   maestro-worker [options] plan.json                      train this rank's section
//   maestro-worker [--comm-timeout S] --selftest plan.json   check groups and links
//   maestro-worker --reference plan.json                     one process, every section
//                                                            (the monolithic reference)
//   maestro-worker --profile FILE plan.json                  every rank measures its section
//                                                            (`maestro profile` runs it)
//
// Start-up (launcher/worker_context.h): PMIx_Init, MPI_Init, the allocation
// checked against the plan, this rank placed, groups and links built. Any
// error after that point ends the whole job (AbortJob), so no rank is left
// waiting for one that gave up.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/crash_report.h"
#include "base/exit_codes.h"
#include "base/log.h"
#include "datalayer/versions.h"
#include "launcher/communicators.h"
#include "launcher/failure.h"
#include "launcher/selftest.h"
#include "launcher/versions.h"
#include "launcher/worker_context.h"
#include "plan/plan.h"
#include "plan/profile.h"
#include "runtime/executor.h"
#include "runtime/profiler.h"
#include "runtime/reference.h"
#include "runtime/runtime_info.h"

namespace {

int ExitCodeFor(const maestro::Status& s) {
  switch (s.code()) {
    case maestro::StatusCode::kTimeout:
    case maestro::StatusCode::kAborted: return maestro::kExitPeerFailure;
    case maestro::StatusCode::kInvalidArgument:
    case maestro::StatusCode::kFailedPrecondition: return maestro::kExitUsage;
    default: return maestro::kExitFailure;
  }
}

int WriteProfile(const std::string& path, const std::vector<maestro::runtime::ProfilePoint>& points) {
  if (auto written = maestro::plan::WriteProfileFile(path, points); !written.ok()) {
    std::fprintf(stderr, "maestro-worker --profile: %s\n", written.ToString().c_str());
    return maestro::kExitFailure;
  }
  for (const auto& p : points) {
    std::printf("%-12s gpus %d micro-batch %3d: %.6f s (forward %.6f s, optimizer %.6f s)\n", p.section.c_str(), p.gpus,
                p.micro_batch, p.seconds, p.forward_seconds, p.optimizer_seconds);
  }
  return maestro::kExitOk;
}

}  // namespace

namespace {
// The job script (compiler: job.sbatch) names a file in
// $MAESTRO_STEP_EXIT_FILE: rank 0 writes the step's exit code there once
// every rank has finished training, so that the script can end an srun that
// outlives its tasks (Slurm 22.05's pmix plugin can leave srun joining its
// abort agent forever) and still exit with the step's code.
void RecordStepExit(int code) {
  const char* path = std::getenv("MAESTRO_STEP_EXIT_FILE");
  if (path == nullptr || *path == '\0') return;
  const std::string tmp = std::string(path) + ".tmp";
  {
    std::ofstream out(tmp);
    out << code << "\n";
    if (!out) return;  // the script then waits for srun as before
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
}
}  // namespace

int main(int argc, char** argv) {
  maestro::InstallCrashReporter("maestro-worker");
  CLI::App app{"maestro-worker: runs one rank of a Maestro plan (started by srun --mpi=pmix or by `maestro run`)"};
  std::string plan_path;
  bool selftest = false;
  bool version = false;
  double comm_timeout_s = 0;
  maestro::launcher::SelfTestOptions selftest_options;
  app.add_option("plan", plan_path, "plan.json written by maestro-compile");
  app.add_flag("--selftest", selftest, "check every group and link of the plan, print bandwidths");
  app.add_flag("--version", version, "print the versions of the linked libraries");
  app.add_option("--comm-timeout", comm_timeout_s,
                 "seconds before a communication that does not complete ends the job (default: "
                 "$MAESTRO_COMM_TIMEOUT_S, else 60)")
      ->check(CLI::PositiveNumber);
  app.add_option("--selftest-bytes", selftest_options.bandwidth_bytes, "message size of the self-test's bandwidth runs")
      ->check(CLI::PositiveNumber);
  app.add_option("--selftest-iterations", selftest_options.bandwidth_iterations,
                 "messages per bandwidth measurement (0: checks only)")
      ->check(CLI::NonNegativeNumber);
  bool reference = false;
  maestro::runtime::TrainOptions train;
  bool no_eval = false;
  app.add_flag("--reference", reference,
               "train every section in this one process (no MPI): the monolithic reference run");
  app.add_option("--run-dir", train.run_dir, "index, spool, checkpoints, metrics (default: the plan's work_dir)");
  app.add_option("--steps", train.steps, "train until this global step count (default: the plan's data.steps)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stop-after-steps", train.stop_after_steps,
                 "behave as if preempted after this many steps: checkpoint, exit 85 (tests)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-eval", no_eval, "skip the caption-accuracy evaluation at the end");
  app.add_option("--eval-samples", train.eval_samples, "evaluate on the first N test samples (default: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("!--no-progress", train.progress, "no per-step log line");
  std::string profile_out;
  int profile_threads = 1;
  bool profile_alone = false;
  std::vector<int> profile_micro_batches;
  int profile_repeats = 5;
  app.add_option("--profile", profile_out,
                 "measure each section's micro-batch time (every rank its own section, side by side) and write "
                 "the JSON the compiler reads with --profiles to this file (rank 0)");
  app.add_flag("--profile-alone", profile_alone,
               "with --profile: measure every section in turn in this one process (TP 1, no MPI)");
  app.add_option("--profile-threads", profile_threads, "intra-op threads with --profile-alone (one rank's share)")
      ->check(CLI::PositiveNumber);
  app.add_option("--profile-micro-batches", profile_micro_batches,
                 "micro-batch sizes to measure (default 1 2 4 8 16 32 64 and each section's own)")
      ->check(CLI::PositiveNumber)
      ->delimiter(',')
      ->allow_extra_args(false);  // one comma list: never the plan path after it
  app.add_option("--profile-repeats", profile_repeats, "timed runs per size (the median is kept)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  train.evaluate = !no_eval;

  if (version) {
    const auto info = maestro::runtime::GetRuntimeInfo();
    std::printf(
        "maestro-worker 0.1.0\nlibtorch %s (%d threads, cuda %s)\nPMIx %s\nMPI %s\nNCCL %s\nSQLite %s\nHDF5 %s\n",
        info.torch_version.c_str(), info.intra_op_threads, info.cuda_available ? "yes" : "no",
        maestro::launcher::PmixVersion().c_str(), maestro::launcher::MpiVersion().c_str(),
        maestro::launcher::NcclVersion().c_str(), maestro::datalayer::SqliteVersion().c_str(),
        maestro::datalayer::Hdf5Version().c_str());
    return maestro::kExitOk;
  }
  if (plan_path.empty()) {
    std::fprintf(stderr, "maestro-worker: missing plan.json (usage: maestro-worker [--selftest] plan.json)\n");
    return maestro::kExitUsage;
  }
  auto plan = maestro::plan::LoadPlan(plan_path);
  if (!plan.ok()) {
    std::fprintf(stderr, "maestro-worker: %s\n", plan.status().ToString().c_str());
    return maestro::kExitUsage;
  }

  maestro::runtime::ProfileOptions profile_options;
  profile_options.threads = profile_threads;
  if (!profile_micro_batches.empty()) profile_options.micro_batches = profile_micro_batches;
  profile_options.repeats = profile_repeats;
  if (!profile_out.empty() && profile_alone) {
    auto points = maestro::runtime::ProfileSections(*plan, profile_options);
    if (!points.ok()) {
      std::fprintf(stderr, "maestro-worker --profile: %s\n", points.status().ToString().c_str());
      return ExitCodeFor(points.status());
    }
    return WriteProfile(profile_out, *points);
  }
  if (train.run_dir.empty()) train.run_dir = plan->work_dir.empty() ? std::string("run") : plan->work_dir;
  if (reference) {
    maestro::runtime::ReferenceOptions ro;
    ro.run_dir = train.run_dir;
    ro.steps = train.steps;
    ro.metrics_path = train.run_dir + "/metrics.jsonl";
    std::error_code ec;
    std::filesystem::create_directories(train.run_dir, ec);
    auto losses = maestro::runtime::RunReference(*plan, ro);
    if (!losses.ok()) {
      std::fprintf(stderr, "maestro-worker --reference: %s\n", losses.status().ToString().c_str());
      return ExitCodeFor(losses.status());
    }
    for (const auto& l : *losses) std::printf("step %lld loss %.9g\n", static_cast<long long>(l.step), l.loss);
    if (train.evaluate && plan->data.dataset != "text") {
      auto accuracy = maestro::runtime::EvaluateRunCaptions(*plan, train.run_dir, train.eval_samples);
      if (accuracy.ok()) std::printf("caption accuracy %.4f\n", *accuracy);
    }
    return maestro::kExitOk;
  }

  // Timeout: --comm-timeout, else the plan's comm_timeout_s, else MAESTRO_COMM_TIMEOUT_S, else 60 s.
  auto options = maestro::launcher::CommOptionsFromEnv(maestro::launcher::ProcessEnv(), {});
  if (!options.ok()) {
    std::fprintf(stderr, "maestro-worker: %s\n", options.status().ToString().c_str());
    return maestro::kExitUsage;
  }
  if (comm_timeout_s <= 0 && plan->comm_timeout_s > 0) comm_timeout_s = plan->comm_timeout_s;
  if (comm_timeout_s > 0) options->timeout = maestro::launcher::Millis(static_cast<int64_t>(comm_timeout_s * 1000));

  int rank = -1;
  auto context = maestro::launcher::WorkerContext::Start(*plan, *options, &rank);
  if (!context.ok()) {
    if (rank < 0) {  // PMIx never came up: this process is alone
      std::fprintf(stderr, "maestro-worker: %s\n", context.status().ToString().c_str());
      return context.status().code() == maestro::StatusCode::kUnavailable ? maestro::kExitUsage : maestro::kExitFailure;
    }
    maestro::launcher::AbortJob(rank, context.status(), ExitCodeFor(context.status()));
  }
  auto& ctx = **context;
  // After PMIx and MPI, whose own handlers print no frames under srun.
  maestro::SetCrashReportRank(rank);
  maestro::InstallCrashReporter("maestro-worker");
  maestro::Log(maestro::LogLevel::kDebug, "{}", ctx.place().ToString());

  if (selftest) {
    auto summary = maestro::launcher::RunSelfTest(*plan, ctx.place(), ctx.comms(), selftest_options, stdout);
    if (!summary.ok()) maestro::launcher::AbortJob(rank, summary.status(), ExitCodeFor(summary.status()));
    return maestro::kExitOk;
  }

  if (!profile_out.empty()) {
    auto points = maestro::runtime::ProfileRanks(*plan, ctx.place(), ctx.comms(), profile_options);
    if (!points.ok()) maestro::launcher::AbortJob(rank, points.status(), ExitCodeFor(points.status()));
    return rank == 0 ? WriteProfile(profile_out, *points) : maestro::kExitOk;
  }

  // The section runtime: this rank's loop (runtime/executor.h). Any error
  // ends the whole job (AbortJob), so no rank waits for one that gave up.
  auto summary = maestro::runtime::RunTraining(*plan, ctx.place(), ctx.comms(), train);
  if (!summary.ok()) maestro::launcher::AbortJob(rank, summary.status(), ExitCodeFor(summary.status()));
  const int code = summary->preempted ? maestro::kExitRequeue : maestro::kExitOk;
  if (rank == 0) RecordStepExit(code);
  return code;
}
