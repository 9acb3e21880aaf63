// SPDX-License-Identifier: Apache-2.0
// maestro-worker: the process that srun (a Slurm heterogeneous job step) or
// mpirun (`maestro run`, one machine) starts on every rank.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "base/log.h"
#include "datalayer/versions.h"
#include "launcher/versions.h"
#include "plan/plan.h"
#include "runtime/runtime_info.h"

int main(int argc, char** argv) {
  CLI::App app{"maestro-worker: runs one rank of a Maestro plan (started by srun --mpi=pmix or by `maestro run`)"};
  std::string plan_path;
  bool selftest = false;
  bool version = false;
  app.add_option("plan", plan_path, "plan.json written by maestro-compile");
  app.add_flag("--selftest", selftest, "check every group and link of the plan, print bandwidths");
  app.add_flag("--version", version, "print the versions of the linked libraries");
  CLI11_PARSE(app, argc, argv);

  if (version) {
    const auto info = maestro::runtime::GetRuntimeInfo();
    std::printf("maestro-worker 0.1.0\nlibtorch %s (%d threads, cuda %s)\nPMIx %s\nMPI %s\nNCCL %s\nSQLite %s\nHDF5 %s\n",
                info.torch_version.c_str(), info.intra_op_threads, info.cuda_available ? "yes" : "no",
                maestro::launcher::PmixVersion().c_str(), maestro::launcher::MpiVersion().c_str(),
                maestro::launcher::NcclVersion().c_str(), maestro::datalayer::SqliteVersion().c_str(),
                maestro::datalayer::Hdf5Version().c_str());
    return 0;
  }
  if (plan_path.empty()) {
    std::fprintf(stderr, "maestro-worker: missing plan.json (usage: maestro-worker [--selftest] plan.json)\n");
    return 2;
  }
  auto plan = maestro::plan::LoadPlan(plan_path);
  if (!plan.ok()) {
    std::fprintf(stderr, "maestro-worker: %s\n", plan.status().ToString().c_str());
    return 2;
  }
  std::fprintf(stderr, "maestro-worker: the PMIx bootstrap and the runtime are not built yet (issues 4 and 7)\n");
  return 3;
}
