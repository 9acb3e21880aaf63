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
// Training and --reference take --device auto|cpu|cuda and --precision
// auto|fp32|bf16 (runtime/device_choice.h); profiles run on the CPU.
//
// MAESTRO_HOST_ALLOCATOR=huge-pages puts CPU tensors on runtime/host_allocator.h
// (the memory suite's resident set follows the live tensors).
//
// Start-up (launcher/worker_context.h): PMIx_Init, MPI_Init, the allocation
// checked against the plan, this rank placed, groups and links built. Any
// error after that point ends the whole job (AbortJob), so no rank is left
// waiting for one that gave up.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/crash_report.h"
#include "base/exit_codes.h"
#include "base/files.h"
#include "base/log.h"
#include "datalayer/preemption.h"
#include "datalayer/versions.h"
#include "launcher/communicators.h"
#include "launcher/failure.h"
#include "launcher/selftest.h"
#include "launcher/versions.h"
#include "launcher/worker_context.h"
#include "plan/plan.h"
#include "plan/profile.h"
#include "runtime/evaluation.h"
#include "runtime/executor.h"
#include "runtime/host_allocator.h"
#include "runtime/plan_data.h"
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
  // On a failure the script waits for srun as before.
  (void)maestro::WriteFileAtomically(path, std::to_string(code) + "\n");
}

// The command line.
struct WorkerArgs {
  std::string plan_path;
  bool selftest = false;
  bool version = false;
  double comm_timeout_s = 0;
  maestro::launcher::SelfTestOptions selftest_options;
  bool reference = false;
  maestro::runtime::TrainOptions train;
  bool no_eval = false;
  std::string profile_out;
  int profile_threads = 1;
  bool profile_alone = false;
  std::vector<int> profile_micro_batches;
  int profile_repeats = 5;
  std::string device = "auto";
  std::string precision = "auto";
};

void AddOptions(CLI::App& app, WorkerArgs& a) {
  app.add_option("plan", a.plan_path, "plan.json written by maestro-compile");
  app.add_flag("--selftest", a.selftest, "check every group and link of the plan, print bandwidths");
  app.add_flag("--version", a.version, "print the versions of the linked libraries");
  app.add_option("--comm-timeout", a.comm_timeout_s,
                 "seconds before a communication that does not complete ends the job (default: "
                 "$MAESTRO_COMM_TIMEOUT_S, else 60)")
      ->check(CLI::PositiveNumber);
  app.add_option("--selftest-bytes", a.selftest_options.bandwidth_bytes,
                 "message size of the self-test's bandwidth runs")
      ->check(CLI::PositiveNumber);
  app.add_option("--selftest-iterations", a.selftest_options.bandwidth_iterations,
                 "messages per bandwidth measurement (0: checks only)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--reference", a.reference,
               "train every section in this one process (no MPI): the monolithic reference run");
  app.add_option("--run-dir", a.train.run_dir, "index, spool, checkpoints, metrics (default: the plan's work_dir)");
  app.add_option("--steps", a.train.steps,
                 "train until this global step count (default: the plan's data.steps; 0 on a fresh run: "
                 "write the initial weights to RUN_DIR/initial and train nothing)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stop-after-steps", a.train.stop_after_steps,
                 "behave as if preempted after this many steps: checkpoint, exit 85 (tests)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-eval", a.no_eval,
               "skip the evaluation at the end (caption accuracy; the held-out loss of [data] test_corpus or of the "
               "demo text's held-out chunks)");
  app.add_flag("!--no-spool-reuse", a.train.reuse_spools,
               "read no frozen section's rows back from an earlier epoch or start: compute them every epoch "
               "(a fused plan's frozen components keep no spool; the baseline of maestro-bench kd)");
  app.add_option("--eval-samples", a.train.eval_samples, "evaluate on the first N test samples (default: all)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("!--no-progress", a.train.progress, "no per-step log line");
  app.add_option("--device", a.device,
                 "where each rank computes: auto (its section's GPU when the plan gives it GPUs and this libtorch "
                 "sees one, else the CPU), cpu, or cuda (ranks share the visible GPUs round robin)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--precision", a.precision,
                 "auto (bf16 on a GPU, fp32 on the CPU), fp32, or bf16 (autocast with fp32 master weights, "
                 "gradients and AdamW moments)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16"}));
  app.add_option("--profile", a.profile_out,
                 "measure each section's micro-batch time (every rank its own section, side by side) and write "
                 "the JSON the compiler reads with --profiles to this file (rank 0)");
  app.add_flag("--profile-alone", a.profile_alone,
               "with --profile: measure every section in turn in this one process (TP 1, no MPI)");
  app.add_option("--profile-threads", a.profile_threads, "intra-op threads with --profile-alone (one rank's share)")
      ->check(CLI::PositiveNumber);
  app.add_option("--profile-micro-batches", a.profile_micro_batches,
                 "micro-batch sizes to measure (default 1 2 4 8 16 32 64 and each section's own)")
      ->check(CLI::PositiveNumber)
      ->delimiter(',')
      ->allow_extra_args(false);  // one comma list: never the plan path after it
  app.add_option("--profile-repeats", a.profile_repeats, "timed runs per size (the median is kept)")
      ->check(CLI::PositiveNumber);
}

int PrintVersion() {
  const auto info = maestro::runtime::GetRuntimeInfo();
  std::printf("maestro-worker 0.1.0\nlibtorch %s (%d threads, cuda %s)\nPMIx %s\nMPI %s\nNCCL %s\nSQLite %s\nHDF5 %s\n",
              info.torch_version.c_str(), info.intra_op_threads, info.cuda_available ? "yes" : "no",
              maestro::launcher::PmixVersion().c_str(), maestro::launcher::MpiVersion().c_str(),
              maestro::launcher::NcclVersion().c_str(), maestro::datalayer::SqliteVersion().c_str(),
              maestro::datalayer::Hdf5Version().c_str());
  return maestro::kExitOk;
}

// --reference: one process, every section, on CUDA device 0 when the plan
// places any section on GPUs (--device auto) and this libtorch sees one.
int RunReferenceMode(const maestro::plan::Plan& plan, const maestro::runtime::TrainOptions& train) {
  maestro::runtime::ComputeFacts facts;
  for (const auto& s : plan.sections) facts.gpus_per_task = std::max(facts.gpus_per_task, s.placement.gpus_per_task);
  facts.local_gpu = facts.gpus_per_task > 0 ? 0 : -1;
  facts.cuda_devices = maestro::runtime::CudaDeviceCount();
  auto compute = maestro::runtime::ChooseCompute(train.device, train.precision, facts);
  if (!compute.ok()) {
    std::fprintf(stderr, "maestro-worker --reference: %s\n", compute.status().ToString().c_str());
    return ExitCodeFor(compute.status());
  }
  if (!compute->note.empty()) std::fprintf(stderr, "maestro-worker --reference: %s\n", compute->note.c_str());
  maestro::runtime::ReferenceOptions ro;
  ro.run_dir = train.run_dir;
  ro.steps = train.steps;
  ro.metrics_path = train.run_dir + "/metrics.jsonl";
  ro.compute = *compute;
  (void)maestro::CreateDirectories(train.run_dir);  // a failure shows when the run opens
  auto losses = maestro::runtime::RunReference(plan, ro);
  if (!losses.ok()) {
    std::fprintf(stderr, "maestro-worker --reference: %s\n", losses.status().ToString().c_str());
    return ExitCodeFor(losses.status());
  }
  for (const auto& l : *losses) std::printf("step %lld loss %.9g\n", static_cast<long long>(l.step), l.loss);
  if (train.evaluate && maestro::runtime::BuiltInDatasetOf(plan) == "fashion_mnist_captions") {
    auto accuracy = maestro::runtime::EvaluateRunCaptions(plan, train.run_dir, train.eval_samples, *compute);
    if (accuracy.ok()) std::printf("caption accuracy %.4f\n", *accuracy);
  }
  // --steps 0 trains nothing and evaluates nothing (its weights are the initial ones).
  if (train.evaluate && maestro::runtime::EvaluatesHeldOut(plan) && train.steps != 0) {
    auto heldout = maestro::runtime::EvaluateRunHeldOut(plan, train.run_dir, train.eval_samples, *compute);
    if (!heldout.ok()) {
      std::fprintf(stderr, "maestro-worker --reference: %s\n", heldout.status().ToString().c_str());
      return ExitCodeFor(heldout.status());
    }
    std::printf("%s\n", maestro::runtime::HeldOutLine(*heldout).c_str());
  }
  return maestro::kExitOk;
}

// Every rank of the plan: start-up, then the self-test, the profile or training.
int RunRank(const maestro::plan::Plan& plan, WorkerArgs& args,
            const maestro::runtime::ProfileOptions& profile_options) {
  // Timeout: --comm-timeout, else the plan's comm_timeout_s, else MAESTRO_COMM_TIMEOUT_S, else 60 s.
  auto options = maestro::launcher::CommOptionsFromEnv(maestro::launcher::ProcessEnv(), {});
  if (!options.ok()) {
    std::fprintf(stderr, "maestro-worker: %s\n", options.status().ToString().c_str());
    return maestro::kExitUsage;
  }
  double comm_timeout_s = args.comm_timeout_s;
  if (comm_timeout_s <= 0 && plan.comm_timeout_s > 0) comm_timeout_s = plan.comm_timeout_s;
  if (comm_timeout_s > 0) options->timeout = maestro::launcher::Millis(static_cast<int64_t>(comm_timeout_s * 1000));

  int rank = -1;
  auto context = maestro::launcher::WorkerContext::Start(plan, *options, &rank);
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

  if (args.selftest) {
    auto summary = maestro::launcher::RunSelfTest(plan, ctx.place(), ctx.comms(), args.selftest_options, stdout);
    if (!summary.ok()) maestro::launcher::AbortJob(rank, summary.status(), ExitCodeFor(summary.status()));
    return maestro::kExitOk;
  }

  if (!args.profile_out.empty()) {
    auto points = maestro::runtime::ProfileRanks(plan, ctx.place(), ctx.comms(), profile_options);
    if (!points.ok()) maestro::launcher::AbortJob(rank, points.status(), ExitCodeFor(points.status()));
    return rank == 0 ? WriteProfile(args.profile_out, *points) : maestro::kExitOk;
  }

  // The section runtime: this rank's loop (runtime/executor.h). Any error
  // ends the whole job (AbortJob), so no rank waits for one that gave up.
  auto summary = maestro::runtime::RunTraining(plan, ctx.place(), ctx.comms(), args.train);
  if (!summary.ok()) maestro::launcher::AbortJob(rank, summary.status(), ExitCodeFor(summary.status()));
  const int code = summary->preempted ? maestro::kExitRequeue : maestro::kExitOk;
  if (rank == 0) RecordStepExit(code);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  maestro::InstallCrashReporter("maestro-worker");
  CLI::App app{"maestro-worker: runs one rank of a Maestro plan (started by srun --mpi=pmix or by `maestro run`)"};
  WorkerArgs args;
  AddOptions(app, args);
  CLI11_PARSE(app, argc, argv);
  args.train.evaluate = !args.no_eval;
  // CLI11 checked the words; the parsers cannot fail on them.
  args.train.device = *maestro::runtime::ParseDeviceRequest(args.device);
  args.train.precision = *maestro::runtime::ParsePrecisionRequest(args.precision);

  if (args.version) return PrintVersion();
  // Training: a SIGUSR1 (`maestro run`'s Ctrl-C, Slurm's signal) during the
  // start-up is kept until the loop can checkpoint (datalayer/preemption.h).
  if (!args.selftest && !args.reference && args.profile_out.empty()) {
    maestro::datalayer::KeepEarlyPreemptionRequests();
  }
  // Before the first tensor: MAESTRO_HOST_ALLOCATOR=huge-pages puts CPU
  // tensors of 2 MiB or more on huge pages, unmapped when freed
  // (runtime/host_allocator.h).
  if (auto installed = maestro::runtime::InstallHostAllocator(); !installed.ok()) {
    std::fprintf(stderr, "maestro-worker: %s\n", installed.status().ToString().c_str());
    return maestro::kExitUsage;
  }
  if (args.plan_path.empty()) {
    std::fprintf(stderr, "maestro-worker: missing plan.json (usage: maestro-worker [--selftest] plan.json)\n");
    return maestro::kExitUsage;
  }
  auto plan = maestro::plan::LoadPlan(args.plan_path);
  if (!plan.ok()) {
    std::fprintf(stderr, "maestro-worker: %s\n", plan.status().ToString().c_str());
    return maestro::kExitUsage;
  }

  maestro::runtime::ProfileOptions profile_options;
  profile_options.threads = args.profile_threads;
  if (!args.profile_micro_batches.empty()) profile_options.micro_batches = args.profile_micro_batches;
  profile_options.repeats = args.profile_repeats;
  if (!args.profile_out.empty() && args.profile_alone) {
    auto points = maestro::runtime::ProfileSections(*plan, profile_options);
    if (!points.ok()) {
      std::fprintf(stderr, "maestro-worker --profile: %s\n", points.status().ToString().c_str());
      return ExitCodeFor(points.status());
    }
    return WriteProfile(args.profile_out, *points);
  }
  if (args.train.run_dir.empty()) {
    args.train.run_dir = plan->work_dir.empty() ? std::string("run") : plan->work_dir;
  }
  if (args.reference) return RunReferenceMode(*plan, args.train);
  return RunRank(*plan, args, profile_options);
}
