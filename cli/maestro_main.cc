// SPDX-License-Identifier: Apache-2.0
// maestro: the user CLI.
//   maestro run spec.toml [-o DIR]       compile for this machine's GPUs (one rank each; --device
//                                        cpu or none found: CPU slots), then train (mpirun); Ctrl-C
//                                        checkpoints at the next step and exits 85 (run the same
//                                        command again to resume), a second Ctrl-C stops at once;
//                                        --dry-run prints the plan, bindings, backends and the
//                                        mpirun command line and starts nothing
//   maestro profile spec.toml [-o DIR]   measure each section's micro-batch times on this
//                                        machine, in the run's layout, and recompile with them
//   maestro profile --kernels -o FILE    this machine's device as a device profile for the step
//                                        model (maestro-kernel-profile: GEMM and attention sweeps,
//                                        bandwidth, one decoder step; docs/step_model.md)
//   maestro doctor                       what this machine has: libraries, BLAS, launchers, GPUs
//   maestro export OUT --section S -o D  a trained section as a Hugging Face folder (maestro-export)
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/exit_codes.h"
#include "base/log.h"
#include "cli/dry_run.h"
#include "cli/issue_calibration.h"
#include "cli/local_devices.h"
#include "cli/profile_calibration.h"
#include "cli/subprocess.h"
#include "datalayer/versions.h"
#include "launcher/gpu_inventory.h"
#include "launcher/versions.h"
#include "plan/plan.h"
#include "plan/profile.h"

namespace {

struct RunArgs {
  std::string spec;
  std::string out_dir = "maestro-out";
  int ranks = 0;       // 0: the cores of this machine, at least 2
  int64_t steps = -1;  // -1: the spec's
  bool fresh = false;
  bool reference = false;
  bool no_eval = false;
  bool no_spool_reuse = false;
  int64_t eval_samples = 0;
  std::string profiles;  // measured profiles for the compiler ("" = analytic)
  std::vector<std::string> pins;
  std::vector<std::string> worker_args;
  std::string grouping = "auto";  // maestro-compile --grouping
  std::string device = "auto";    // auto | cpu | cuda (cli/local_devices.h)
  bool dry_run = false;
};

struct ProfileArgs {
  std::string spec;
  std::string out_dir = "maestro-profile";
  int ranks = 0;
  std::vector<int> micro_batches;
  std::vector<int> gpu_counts;  // more TP degrees to measure the decoder sections at
  int repeats = 5;
  int calibration_steps = 30;  // 0: keep the sweep as measured
  std::vector<std::string> pins;
  // --kernels: no spec; maestro-kernel-profile writes a device profile to -o.
  bool kernels = false;
  std::string device = "auto";
  bool quick = false;
  std::vector<std::string> kernel_args;
};

// The cores this process may run on (its affinity mask: what mpirun's
// children get too), at least 1.
int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

// Compiles `spec` for this machine (one node: `ranks` of the GPUs `devices`
// chose, one rank each; or `ranks` CPU slots, `grow`: at least one per
// section, when the ranks were not chosen by the user) into out_dir; on
// success loads the plan. Returns the exit code to stop with, or -1 to go on.
int CompileForThisMachine(const std::string& spec, const std::string& out_dir, int ranks, bool grow,
                          const std::vector<std::string>& pins, const std::string& profiles, const char* who,
                          maestro::plan::Plan* plan, const std::string& grouping,
                          const maestro::cli::LocalDevices& devices) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) {
    std::fprintf(stderr, "%s: cannot create %s: %s\n", who, out_dir.c_str(), ec.message().c_str());
    return maestro::kExitUsage;
  }
  std::vector<std::string> compile{
      maestro::cli::SelfDirectory() + "/maestro-compile", spec, "-o", out_dir, "--local", std::to_string(ranks)};
  if (devices.gpus) {
    // One rank per GPU; the compiler maps the GPU's name to a device profile.
    compile.insert(compile.end(), {"--local-gpu", devices.gpu_name});
    if (devices.memory_bytes > 0) {
      compile.insert(compile.end(), {"--local-gpu-memory-gb", fmt::format("{:.6g}", devices.memory_bytes / 1e9)});
    }
  } else {
    // The ranks share this machine's cores: the compiler's step simulation
    // shares them too (--local-cores).
    compile.insert(compile.end(), {"--local-cores", std::to_string(UsableCores())});
    if (grow) compile.push_back("--local-grow");
  }
  compile.insert(compile.end(), {"--grouping", grouping});
  for (const auto& pin : pins) compile.insert(compile.end(), {"--pin", pin});
  if (!profiles.empty()) compile.insert(compile.end(), {"--profiles", profiles});
  auto rc = maestro::cli::RunProcess(compile);
  if (!rc.ok()) {
    std::fprintf(stderr, "%s: %s\n", who, rc.status().message().c_str());
    return maestro::kExitUsage;
  }
  if (*rc != 0) return *rc;
  auto loaded = maestro::plan::LoadPlan(out_dir + "/plan.json");
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s: %s\n", who, loaded.status().ToString().c_str());
    return maestro::kExitFailure;
  }
  *plan = std::move(*loaded);
  return -1;
}

int DefaultRanks(int ranks) {
  return ranks > 0 ? ranks : std::max(2, UsableCores());
}

// What `who` compiles for (cli/local_devices.h): this machine's GPUs, or CPU
// slots (--device cpu, or none found: said once). Returns the exit code to
// stop with, or -1 to go on; on GPUs the ranks will see the chosen GPUs as
// cuda:0..n-1 (CUDA_VISIBLE_DEVICES set here, for every child).
int ChooseDevices(const std::string& device, int ranks, const char* who, maestro::cli::LocalDevices* out) {
  auto choice = maestro::cli::ParseDeviceChoice(device);
  if (!choice.ok()) {
    std::fprintf(stderr, "%s: %s\n", who, choice.status().message().c_str());
    return maestro::kExitUsage;
  }
  maestro::launcher::GpuInventory inventory;
  if (*choice != maestro::cli::DeviceChoice::kCpu) {  // --device cpu asks nothing (as before GPUs were discovered)
    auto found = maestro::launcher::DiscoverLocalGpus();
    if (!found.ok()) {
      std::fprintf(stderr, "%s: %s (or --device cpu)\n", who, found.status().message().c_str());
      return maestro::kExitUsage;
    }
    inventory = std::move(*found);
  }
  auto chosen = maestro::cli::ChooseLocalDevices(*choice, inventory, ranks, std::getenv("CUDA_VISIBLE_DEVICES"));
  if (!chosen.ok()) {
    std::fprintf(stderr, "%s: %s\n", who, chosen.status().message().c_str());
    return maestro::kExitUsage;
  }
  *out = std::move(*chosen);
  if (!out->gpus && *choice == maestro::cli::DeviceChoice::kAuto) {
    std::fprintf(stderr, "%s: %s: %s on the CPU (--device cpu skips the search)\n", who, out->cpu_reason.c_str(),
                 std::string(who) == "maestro run" ? "training" : "profiling");
  }
  if (out->gpus && !out->cuda_visible_devices.empty()) {
    ::setenv("CUDA_VISIBLE_DEVICES", out->cuda_visible_devices.c_str(), 1);
  }
  return -1;
}

// The ranks to compile for: the GPUs chosen, else --ranks or the cores.
int RanksFor(const maestro::cli::LocalDevices& devices, int ranks) {
  return devices.gpus ? static_cast<int>(devices.used.size()) : DefaultRanks(ranks);
}

// mpirun with one process per rank of `plan` on this machine, running `worker`.
std::vector<std::string> MpirunCommand(const maestro::plan::Plan& plan, const std::vector<std::string>& worker) {
  std::vector<std::string> command{"mpirun"};
  if (geteuid() == 0) command.push_back("--allow-run-as-root");
  // Sections of one machine share its cores: ranks may outnumber them.
  command.insert(command.end(),
                 {"--oversubscribe", "--mca", "btl", "self,vader", "-np", std::to_string(plan.world_size())});
  command.insert(command.end(), worker.begin(), worker.end());
  return command;
}

// Runs `command` (mpirun and the ranks) so that Ctrl-C is a preemption
// (cli/subprocess.h, RunInterruptible): the first one makes every rank
// checkpoint at the next step boundary (SIGUSR1, which mpirun passes on) and
// exit kExitRequeue; a second one stops them at once (kExitInterrupted).
// Returns the exit code of `maestro run`.
int TrainUnderMpirun(const std::vector<std::string>& command) {
  maestro::cli::InterruptOptions interrupts;
  interrupts.request_signal = SIGUSR1;
  interrupts.on_request =
      "\nmaestro run: interrupted: checkpointing after the step in progress, then stopping "
      "(Ctrl-C again stops at once, without waiting for it)\n";
  interrupts.on_abort = "\nmaestro run: interrupted again: stopping every rank now, without waiting for a checkpoint\n";
  auto run = maestro::cli::RunInterruptible(command, interrupts);
  if (!run.ok()) {
    std::fprintf(stderr, "maestro run: %s (is openmpi-bin installed? scripts/setup.sh installs it)\n",
                 run.status().message().c_str());
    return maestro::kExitFailure;
  }
  const int rc = run->exit_code;
  if (run->interrupts >= 2) {
    std::fprintf(stderr,
                 "maestro run: stopped by a second Ctrl-C; run the same command again to resume from the last "
                 "checkpoint written, if any\n");
    return maestro::kExitInterrupted;
  }
  if (rc == maestro::kExitRequeue) {
    std::fprintf(stderr, "maestro run: %s; run the same command again to resume at the next step\n",
                 run->interrupts > 0 ? "interrupted: checkpoint written" : "stopped after a checkpoint");
  } else if (run->interrupts > 0 && rc != maestro::kExitOk) {
    std::fprintf(stderr,
                 "maestro run: interrupted; the ranks stopped before they could checkpoint (exit code %d); the run "
                 "keeps its last checkpoint, if any\n",
                 rc);
  }
  return rc;
}

int RunCommand(const RunArgs& args) {
  namespace fs = std::filesystem;
  const std::string bin = maestro::cli::SelfDirectory();
  maestro::cli::LocalDevices devices;
  if (int rc = ChooseDevices(args.device, args.ranks, "maestro run", &devices); rc >= 0) return rc;

  // 1. Compile for this machine: one node, one rank per GPU or `ranks` CPU slots.
  maestro::plan::Plan plan;
  if (int rc = CompileForThisMachine(args.spec, args.out_dir, RanksFor(devices, args.ranks), args.ranks == 0, args.pins,
                                     args.profiles, "maestro run", &plan, args.grouping, devices);
      rc >= 0) {
    return rc;
  }
  const std::string plan_path = args.out_dir + "/plan.json";
  const std::string run_dir = args.out_dir + "/run";

  // 2. Train: the reference in this process's child, or every rank under mpirun.
  std::vector<std::string> worker{bin + "/maestro-worker", "--run-dir", run_dir};
  if (args.steps >= 0) worker.insert(worker.end(), {"--steps", std::to_string(args.steps)});
  if (args.no_eval) worker.push_back("--no-eval");
  if (args.no_spool_reuse) worker.push_back("--no-spool-reuse");
  if (args.eval_samples > 0) worker.insert(worker.end(), {"--eval-samples", std::to_string(args.eval_samples)});
  worker.insert(worker.end(), args.worker_args.begin(), args.worker_args.end());
  std::vector<std::string> command;
  if (args.reference) {
    command = worker;
    command.insert(command.begin() + 1, "--reference");
  } else {
    command = MpirunCommand(plan, worker);
  }
  command.push_back(plan_path);
  if (args.dry_run) {  // the account of what would start; nothing does
    maestro::cli::DryRunInput in;
    in.plan = &plan;
    in.plan_path = plan_path;
    in.devices = devices;
    in.command = command;
    auto comm = maestro::launcher::CommOptionsFromEnv(maestro::launcher::ProcessEnv(), {});
    if (!comm.ok()) {
      std::fprintf(stderr, "maestro run: %s\n", comm.status().message().c_str());
      return maestro::kExitUsage;
    }
    in.backend = comm->backend;
    in.child_visible = std::getenv("CUDA_VISIBLE_DEVICES");
    std::printf("\nmaestro run --dry-run: nothing was started\n%s", maestro::cli::DryRunText(in).c_str());
    return maestro::kExitOk;
  }
  std::error_code ec;
  if (args.fresh) fs::remove_all(run_dir, ec);
  fs::create_directories(run_dir, ec);
  if (devices.gpus && devices.source.rfind(maestro::launcher::kFakeGpusEnv, 0) == 0) {
    std::fprintf(stderr,
                 "maestro run: warning: %s stands in for this machine's GPUs: the plan is for them; a rank whose "
                 "libtorch sees no CUDA device computes on the CPU\n",
                 devices.source.c_str());
  }
  std::fprintf(
      stderr, "maestro run: %d ranks, %zu sections, on %s; metrics in %s/metrics.jsonl, trace in %s/trace.json\n",
      plan.world_size(), plan.sections.size(),
      devices.gpus
          ? fmt::format("{} of the {} GPU(s) found, one rank each", plan.world_size(), devices.used.size()).c_str()
          : "the CPU",
      run_dir.c_str(), run_dir.c_str());
  if (args.reference) {  // one process without the preemption protocol: Ctrl-C stops it
    auto rc = maestro::cli::RunProcess(command);
    if (!rc.ok()) {
      std::fprintf(stderr, "maestro run: %s\n", rc.status().message().c_str());
      return maestro::kExitFailure;
    }
    return *rc;
  }
  return TrainUnderMpirun(command);
}

// Trains `plan` (compiled with the sweep) for a few steps in out_dir/calibration
// and scales profile.json to what each section cost in that run
// (cli/profile_calibration.h). Returns the exit code to stop with, or -1 to
// go on.
int CalibrateInRun(const ProfileArgs& args, const maestro::plan::Plan& plan, const std::string& profile) {
  namespace fs = std::filesystem;
  const int64_t warmup = 5;
  const std::string run_dir = args.out_dir + "/calibration";
  std::error_code ec;
  fs::remove_all(run_dir, ec);
  const std::vector<std::string> worker{maestro::cli::SelfDirectory() + "/maestro-worker",
                                        "--no-progress",
                                        "--no-eval",
                                        "--run-dir",
                                        run_dir,
                                        "--steps",
                                        std::to_string(warmup + args.calibration_steps),
                                        args.out_dir + "/plan.json"};
  std::fprintf(stderr, "maestro profile: calibrating: %d steps of the plan in %s\n", args.calibration_steps,
               run_dir.c_str());
  auto rc = maestro::cli::RunProcess(MpirunCommand(plan, worker));
  if (!rc.ok() || *rc != 0) {
    std::fprintf(stderr, "maestro profile: the calibration run failed (%s); see the messages above\n",
                 rc.ok() ? ("exit code " + std::to_string(*rc)).c_str() : rc.status().message().c_str());
    return maestro::kExitFailure;
  }
  std::ifstream trace_in(run_dir + "/trace.json");
  auto points = maestro::plan::ReadProfileFile(profile);
  auto trace = nlohmann::json::parse(trace_in, nullptr, /*allow_exceptions=*/false);
  if (!points.ok() || trace.is_discarded()) {
    std::fprintf(stderr, "maestro profile: cannot read %s or %s/trace.json\n", profile.c_str(), run_dir.c_str());
    return maestro::kExitFailure;
  }
  auto calibration = maestro::cli::CalibrateProfile(plan, trace, warmup, &*points);
  if (!calibration.ok()) {
    std::fprintf(stderr, "maestro profile: %s\n", calibration.status().ToString().c_str());
    return maestro::kExitFailure;
  }
  for (const auto& c : *calibration) {
    if (c.sizes == 0) {
      std::fprintf(stderr, "  %-12s no micro-batch size ran %d times: the sweep is kept\n", c.section.c_str(),
                   maestro::cli::kMinOps);
      continue;
    }
    std::fprintf(stderr,
                 "  %-12s %d micro-batches of %d size(s) %d..%d: %.3g s + %.3g s/sample alone on a core; at the "
                 "planned size sweep %.5f s -> %.5f s (x%.3f); optimizer %.5f s\n",
                 c.section.c_str(), c.ops, c.sizes, c.smallest, c.largest, c.fixed_seconds, c.seconds_per_sample,
                 c.sweep_seconds, c.in_run_seconds, c.ratio, c.optimizer_seconds);
  }
  if (auto written = maestro::plan::WriteProfileFile(profile, *points); !written.ok()) {
    std::fprintf(stderr, "maestro profile: %s\n", written.ToString().c_str());
    return maestro::kExitFailure;
  }
  return -1;
}

// The sweep of `plan` (compiled into dir/plan.json): every rank times its
// own section, side by side, into dir/profile.json; `points` gets them as
// times alone on a core (scaled by cores / ranks when the ranks outnumber
// the cores: every rank computed at once). Returns the exit code to stop
// with, or -1 to go on.
int SweepPlan(const ProfileArgs& args, const maestro::plan::Plan& plan, const std::string& dir,
              std::vector<maestro::plan::ProfilePoint>* points) {
  const std::string measured = dir + "/profile.json";
  std::vector<std::string> worker{maestro::cli::SelfDirectory() + "/maestro-worker", "--profile", measured,
                                  "--profile-repeats", std::to_string(args.repeats)};
  if (!args.micro_batches.empty()) {
    std::string sizes;
    for (int b : args.micro_batches) sizes += (sizes.empty() ? "" : ",") + std::to_string(b);
    worker.insert(worker.end(), {"--profile-micro-batches", sizes});
  }
  worker.push_back(dir + "/plan.json");
  std::fprintf(stderr, "maestro profile: %d ranks measure their sections side by side\n", plan.world_size());
  auto rc = maestro::cli::RunProcess(MpirunCommand(plan, worker));
  if (!rc.ok()) {
    std::fprintf(stderr, "maestro profile: %s (is openmpi-bin installed? scripts/setup.sh installs it)\n",
                 rc.status().message().c_str());
    return maestro::kExitFailure;
  }
  if (*rc != 0) return *rc;
  auto read = maestro::plan::ReadProfileFile(measured);
  if (!read.ok()) {
    std::fprintf(stderr, "maestro profile: %s\n", read.status().ToString().c_str());
    return maestro::kExitFailure;
  }
  if (plan.shared_cores > 0 && plan.world_size() > plan.shared_cores) {
    maestro::cli::ScaleSweepToOneCore(plan.shared_cores, plan.world_size(), &*read);
    std::fprintf(stderr, "maestro profile: %d ranks shared %d cores in the sweep: its times x%.3f (alone on a core)\n",
                 plan.world_size(), plan.shared_cores, static_cast<double>(plan.shared_cores) / plan.world_size());
  }
  *points = std::move(*read);
  return -1;
}

// Compile -> every rank measures its own section, side by side, in the
// run's layout (and the decoder sections at --gpu-counts) -> compile with the
// sweep -> calibrate in a run of that plan -> compile again.
int ProfileCommand(const ProfileArgs& args) {
  maestro::cli::LocalDevices devices;
  if (int rc = ChooseDevices(args.device, args.ranks, "maestro profile", &devices); rc >= 0) return rc;
  const int ranks = RanksFor(devices, args.ranks);
  maestro::plan::Plan plan;
  if (int rc = CompileForThisMachine(args.spec, args.out_dir, ranks, args.ranks == 0, args.pins, "", "maestro profile",
                                     &plan, "sectioned", devices);
      rc >= 0) {
    if (devices.gpus) {
      // maestro run may fuse the workload on too few GPUs; a profile measures
      // each section on GPUs of its own.
      std::fprintf(stderr,
                   "maestro profile: measures every section on GPUs of its own (the sectioned plan); where this "
                   "machine has too few, profile on the CPU with `maestro profile --device cpu`\n");
    }
    return rc;
  }
  const std::string profile = args.out_dir + "/profile.json";
  std::vector<maestro::plan::ProfilePoint> points;
  if (int code = SweepPlan(args, plan, args.out_dir, &points); code >= 0) return code;
  // Other GPU counts: every decoder section (the sections TP splits) again
  // at TP t, on a plan of one replica per section.
  for (int t : args.gpu_counts) {
    std::vector<std::string> pins = args.pins;
    int variant_ranks = 0;
    bool new_count = false;
    for (const auto& sp : plan.sections) {
      const bool decoder = sp.model.kind == maestro::plan::ModelKind::kDecoder;
      const int tp = decoder ? t : sp.config.tp;
      if (decoder) pins.push_back(sp.name + ".tp=" + std::to_string(t));
      pins.push_back(sp.name + ".dp=1");
      variant_ranks += tp * sp.config.pp * sp.config.cp;
      new_count = new_count || (decoder && sp.config.tp * sp.config.pp * sp.config.cp != t);
    }
    if (!new_count) continue;
    const std::string dir = args.out_dir + "/gpus-" + std::to_string(t);
    maestro::plan::Plan variant;
    std::fprintf(stderr, "maestro profile: the decoder sections at %d GPU(s) (TP %d)\n", t, t);
    if (int code = CompileForThisMachine(args.spec, dir, variant_ranks, false, pins, "", "maestro profile", &variant,
                                         "sectioned", devices);
        code >= 0) {
      return code;
    }
    std::vector<maestro::plan::ProfilePoint> more;
    if (int code = SweepPlan(args, variant, dir, &more); code >= 0) return code;
    // Only (section, GPU count) pairs not measured before this sweep.
    const std::vector<maestro::plan::ProfilePoint> before = points;
    for (const auto& q : more) {
      const bool known = std::any_of(before.begin(), before.end(), [&](const maestro::plan::ProfilePoint& p) {
        return p.section == q.section && p.gpus == q.gpus;
      });
      if (!known) points.push_back(q);
    }
  }
  // The sweep as measured stays in profile-sweep.json; calibration rounds
  // rewrite profile.json.
  for (const std::string& path : {profile, args.out_dir + "/profile-sweep.json"}) {
    if (auto written = maestro::plan::WriteProfileFile(path, points); !written.ok()) {
      std::fprintf(stderr, "maestro profile: %s\n", written.ToString().c_str());
      return maestro::kExitFailure;
    }
  }
  if (int code = CompileForThisMachine(args.spec, args.out_dir, ranks, args.ranks == 0, args.pins, profile,
                                       "maestro profile", &plan, "sectioned", devices);
      code >= 0) {
    return code;
  }
  // Calibrate in a real run of the plan; a calibrated profile may change the
  // plan (another micro-batch size), whose sizes are then calibrated too: at
  // most three rounds, until the plan stays the same.
  for (int round = 0; args.calibration_steps > 0 && round < 3; ++round) {
    if (int code = CalibrateInRun(args, plan, profile); code >= 0) return code;
    const maestro::plan::Plan calibrated_with = plan;
    if (int code = CompileForThisMachine(args.spec, args.out_dir, ranks, args.ranks == 0, args.pins, profile,
                                         "maestro profile", &plan, "sectioned", devices);
        code >= 0) {
      return code;
    }
    bool same = true;
    for (size_t i = 0; i < plan.sections.size(); ++i) {
      const auto& a = plan.sections[i].config;
      const auto& b = calibrated_with.sections[i].config;
      same = same && a.micro_batch == b.micro_batch && a.dp == b.dp && a.tp == b.tp && a.pp == b.pp;
    }
    if (same) break;
    std::fprintf(stderr, "maestro profile: the calibrated profile changed the plan; calibrating it again\n");
  }
  std::fprintf(stderr,
               "maestro profile: wrote %s; %s/plan.json now predicts %.4f s per step with it "
               "(maestro run --profiles %s trains with this plan)\n",
               profile.c_str(), args.out_dir.c_str(), plan.predicted_step_seconds, profile.c_str());
  return maestro::kExitOk;
}

// maestro profile --kernels -o FILE: maestro-kernel-profile measures this
// machine's device (runtime/kernel_profile.h) and writes FILE.
int KernelProfileCommand(const ProfileArgs& args, bool repeats_given) {
  std::vector<std::string> command{maestro::cli::SelfDirectory() + "/maestro-kernel-profile", "-o", args.out_dir,
                                   "--device", args.device};
  if (args.quick) command.push_back("--quick");
  if (repeats_given) command.insert(command.end(), {"--repeats", std::to_string(args.repeats)});
  command.insert(command.end(), args.kernel_args.begin(), args.kernel_args.end());
  auto rc = maestro::cli::RunProcess(command);
  if (!rc.ok()) {
    std::fprintf(stderr, "maestro profile --kernels: %s\n", rc.status().message().c_str());
    return maestro::kExitFailure;
  }
  if (*rc != 0) return *rc;
  // On a GPU: the issue probe's time over the step model's count of its
  // kernels (cli/issue_calibration.h).
  auto added = maestro::cli::AddIssueCostToFile(args.out_dir);
  if (!added.ok()) {
    std::fprintf(stderr, "maestro profile --kernels: %s\n", added.status().message().c_str());
    return maestro::kExitFailure;
  }
  if (*added) std::fprintf(stderr, "maestro profile --kernels: added training_issue_us (the issue probe)\n");
  return maestro::kExitOk;
}

int DoctorCommand() {
  const std::string bin = maestro::cli::SelfDirectory();
  std::printf("PMIx     %s\nMPI      %s\nNCCL     %s\nSQLite   %s\nHDF5     %s\n",
              maestro::launcher::PmixVersion().c_str(), maestro::launcher::MpiVersion().c_str(),
              maestro::launcher::NcclVersion().c_str(), maestro::datalayer::SqliteVersion().c_str(),
              maestro::datalayer::Hdf5Version().c_str());
  // The GPUs this machine offers (launcher/gpu_inventory.h; MAESTRO_FAKE_GPUS
  // stands in for them in tests).
  auto gpus = maestro::launcher::DiscoverLocalGpus();
  if (!gpus.ok()) {
    std::fprintf(stderr, "maestro doctor: %s\n", gpus.status().message().c_str());
    return maestro::kExitUsage;
  }
  std::printf("GPUs     %s\n", maestro::launcher::DescribeGpus(*gpus).c_str());
  // Which device profile each type maps to, and why a GPU would not be used.
  for (const auto& line : maestro::cli::GpuUseLines(*gpus)) std::printf("         %s\n", line.c_str());
  std::fflush(stdout);
  auto rc = maestro::cli::RunProcess({bin + "/maestro-worker", "--version"});
  return rc.ok() ? *rc : 1;
}

// `maestro run` and its options, parsed into *args.
CLI::App* AddRunCommand(CLI::App& app, RunArgs* args) {
  CLI::App* run = app.add_subcommand("run", "compile a spec and train it on this machine (the embedded default)");
  run->footer(
      "Ctrl-C checkpoints after the step in progress and exits 85: run the same command again to resume at the next "
      "step. A second Ctrl-C stops every rank at once, without waiting for a checkpoint (exit 130).");
  run->add_option("spec", args->spec, "workload spec (TOML)")->required()->check(CLI::ExistingFile);
  run->add_option("-o,--out", args->out_dir, "output directory (plan, report, run/: index, checkpoints, metrics)")
      ->capture_default_str();
  run->add_option("--ranks", args->ranks,
                  "on GPUs: the first N GPUs (default: all of them; more is refused); on the CPU: the ranks to plan "
                  "for (default: the cores, at least 2 and at least one per section)")
      ->check(CLI::PositiveNumber);
  run->add_option("--steps", args->steps,
                  "train until this step (default: the spec's job.steps); 0 on a fresh run writes the initial "
                  "weights (for `maestro export`) and trains nothing")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--pin", args->pins, "pin a section's configuration, e.g. --pin llm.dp=2 (repeatable)");
  run->add_option("--grouping", args->grouping,
                  "auto: the faster of the sectioned plan and every component fused in one section on every rank "
                  "(the report says why); sectioned or fused: that one")
      ->check(CLI::IsMember({"auto", "sectioned", "fused"}))
      ->capture_default_str();
  run->add_flag("--fresh", args->fresh, "start over: remove the run directory first (default: resume it)");
  run->add_flag("--reference", args->reference,
                "train every section in one process (the monolithic reference), for comparison");
  run->add_flag("--no-eval", args->no_eval, "skip the final evaluation");
  run->add_flag("--no-spool-reuse", args->no_spool_reuse,
                "compute a frozen section's outputs again every epoch instead of reading them from the spool "
                "(with --grouping fused: the fused plan as it ran before spools, for comparison)");
  run->add_option("--eval-samples", args->eval_samples, "evaluate on the first N test samples (default: all)");
  run->add_option("--worker-arg", args->worker_args, "extra argument for maestro-worker (repeatable)");

  run->add_option("--device", args->device,
                  "auto: this machine's GPUs, one rank each, NCCL between them (none found: the CPU, said once); "
                  "cpu: CPU ranks sharing the cores, as without GPUs; cuda: the GPUs or an error. "
                  "MAESTRO_FAKE_GPUS=8xh100_sxm stands in for the GPUs (tests; docs/launcher.md)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  run->add_flag("--dry-run", args->dry_run,
                "compile (writes DIR/plan.json and the report), then print the plan, the device each rank binds, the "
                "backend each group and link gets and the exact mpirun command line; start nothing, exit 0");
  run->add_option("--profiles", args->profiles,
                  "measured section profiles for the compiler (what `maestro profile` wrote)")
      ->check(CLI::ExistingFile);
  return run;
}

// `maestro profile` and the options main asks about after parsing.
struct ProfileCommandLine {
  CLI::App* command = nullptr;
  CLI::Option* spec = nullptr;     // given: the spec mode
  CLI::Option* repeats = nullptr;  // given: passed on to maestro-kernel-profile
};

// `maestro profile`: the options of the spec mode and of --kernels (which
// exclude each other), parsed into *args.
ProfileCommandLine AddProfileCommand(CLI::App& app, ProfileArgs* args) {
  auto* profile = app.add_subcommand(
      "profile",
      "measure each section's micro-batch times on this machine and recompile the spec with them; or, with "
      "--kernels -o FILE, measure this machine's device (GEMM, attention, bandwidth, one decoder step) into a "
      "device profile for the step model");
  auto* profile_spec =
      profile->add_option("spec", args->spec, "workload spec (TOML); not with --kernels")->check(CLI::ExistingFile);
  auto* profile_out =
      profile
          ->add_option("-o,--out", args->out_dir,
                       "output directory (plan, report, profile.json); with --kernels: the device profile to write")
          ->capture_default_str();
  auto* kernels =
      profile->add_flag("--kernels", args->kernels,
                        "measure this machine's device instead of a spec's sections: GEMM and causal-attention "
                        "tables, memory bandwidth, the per-kernel floor and one decoder training step, written to "
                        "-o FILE as a device profile (docs/step_model.md; maestro-kernel-profile --help lists the "
                        "grid options)");
  kernels->excludes(profile_spec)->needs(profile_out);
  profile
      ->add_option("--device", args->device,
                   "auto (default): this machine's GPUs when there are any, else the CPU; cpu; cuda. With --kernels: "
                   "the device measured; with a spec: what the plan runs on, as for maestro run")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  profile->add_flag("--quick", args->quick, "with --kernels: fewer repeats and grid points (CI on a CPU)")
      ->needs(kernels);
  profile
      ->add_option("--kernel-arg", args->kernel_args,
                   "with --kernels: an extra argument for maestro-kernel-profile, e.g. --kernel-arg=--gemm-m=256,1024 "
                   "(repeatable)")
      ->needs(kernels);
  auto* profile_ranks =
      profile
          ->add_option("--ranks", args->ranks,
                       "on GPUs: the first N GPUs (default: all); on the CPU: the ranks to plan for (default: the "
                       "cores, at least 2 and at least one per section)")
          ->check(CLI::PositiveNumber);
  auto* profile_pins =
      profile->add_option("--pin", args->pins, "pin a section's configuration, e.g. --pin llm.dp=2 (repeatable)");
  auto* profile_micro_batches =
      profile
          ->add_option("--micro-batches", args->micro_batches,
                       "micro-batch sizes to measure (default 1,2,4,8,16,32,64 and each section's own)")
          ->delimiter(',')
          ->allow_extra_args(false)
          ->check(CLI::PositiveNumber);
  auto* profile_gpu_counts =
      profile
          ->add_option("--gpu-counts", args->gpu_counts,
                       "also measure every decoder section at these GPU counts (TP degrees), e.g. 1,2; the compiler "
                       "then plans TP from measurements too")
          ->delimiter(',')
          ->allow_extra_args(false)
          ->check(CLI::PositiveNumber);
  auto* profile_repeats =
      profile->add_option("--repeats", args->repeats, "timed runs per size (or kernel point); the median is kept")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  auto* profile_calibration =
      profile
          ->add_option("--calibration-steps", args->calibration_steps,
                       "train the compiled plan this many steps (after 5 of warm-up) and scale each section's "
                       "profile to its in-run time; 0: keep the sweep as measured")
          ->check(CLI::NonNegativeNumber)
          ->capture_default_str();
  // The spec mode's options mean nothing to --kernels.
  for (auto* spec_only :
       {profile_ranks, profile_pins, profile_micro_batches, profile_gpu_counts, profile_calibration}) {
    kernels->excludes(spec_only);
  }
  return ProfileCommandLine{profile, profile_spec, profile_repeats};
}

// maestro export ...: `args` (everything after `export`) go to maestro-export.
int ExportCommand(const std::vector<std::string>& args) {
  std::vector<std::string> command{maestro::cli::SelfDirectory() + "/maestro-export"};
  for (const auto& arg : args) command.push_back(arg);
  auto rc = maestro::cli::RunProcess(command);
  if (!rc.ok()) {
    std::fprintf(stderr, "maestro export: %s\n", rc.status().message().c_str());
    return maestro::kExitFailure;
  }
  return *rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"maestro: train compound LLM workloads (distillation, multimodal) section by section"};
  app.require_subcommand(1);

  RunArgs run_args;
  CLI::App* run = AddRunCommand(app, &run_args);
  ProfileArgs profile_args;
  const ProfileCommandLine profile = AddProfileCommand(app, &profile_args);
  auto* doctor = app.add_subcommand("doctor",
                                    "print what this machine offers Maestro (libraries, BLAS, launchers, GPUs; "
                                    "MAESTRO_FAKE_GPUS stands in for them)");

  // Everything after `export` goes to maestro-export (its --help lists the options).
  auto* export_cmd = app.add_subcommand(
      "export",
      "write a trained section as a Hugging Face checkpoint folder: maestro export OUT --section NAME -o DIR");
  export_cmd->prefix_command();
  export_cmd->set_help_flag();

  CLI11_PARSE(app, argc, argv);
  maestro::cli::PreferHugePagesForChildren();
  if (*run) return RunCommand(run_args);
  if (*profile.command) {
    if (profile_args.kernels) return KernelProfileCommand(profile_args, profile.repeats->count() > 0);
    if (profile.spec->count() == 0) {
      return profile.command->exit(
          CLI::RequiredError("profile: a spec (maestro profile spec.toml) or --kernels -o FILE"));
    }
    return ProfileCommand(profile_args);
  }
  if (*doctor) return DoctorCommand();
  if (*export_cmd) return ExportCommand(export_cmd->remaining());
  return 0;
}
