// SPDX-License-Identifier: Apache-2.0
// maestro: the user CLI.
//   maestro run spec.toml [-o DIR]   compile, then train on this machine (mpirun)
//   maestro doctor                   what this machine has: libraries, BLAS, launchers
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "base/log.h"
#include "cli/subprocess.h"
#include "datalayer/versions.h"
#include "launcher/versions.h"

namespace {

int RunCommand(const std::string& spec, const std::string& out_dir) {
  const std::string bin = maestro::cli::SelfDirectory();
  std::filesystem::create_directories(out_dir);
  auto rc = maestro::cli::RunProcess({bin + "/maestro-compile", spec, "-o", out_dir});
  if (!rc.ok()) {
    std::fprintf(stderr, "maestro run: %s\n", rc.status().message().c_str());
    return 2;
  }
  if (*rc != 0) return *rc;
  std::fprintf(stderr,
               "maestro run: compiled %s into %s. Training on this machine arrives with the runtime (issue 7).\n",
               spec.c_str(), out_dir.c_str());
  return 0;
}

int DoctorCommand() {
  const std::string bin = maestro::cli::SelfDirectory();
  std::printf("PMIx     %s\nMPI      %s\nNCCL     %s\nSQLite   %s\nHDF5     %s\n",
              maestro::launcher::PmixVersion().c_str(), maestro::launcher::MpiVersion().c_str(),
              maestro::launcher::NcclVersion().c_str(), maestro::datalayer::SqliteVersion().c_str(),
              maestro::datalayer::Hdf5Version().c_str());
  std::fflush(stdout);
  auto rc = maestro::cli::RunProcess({bin + "/maestro-worker", "--version"});
  return rc.ok() ? *rc : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"maestro: train compound LLM workloads (distillation, multimodal) section by section"};
  app.require_subcommand(1);

  std::string spec;
  std::string out_dir = "maestro-out";
  auto* run = app.add_subcommand("run", "compile a spec and train it on this machine (the embedded default)");
  run->add_option("spec", spec, "workload spec (TOML)")->required()->check(CLI::ExistingFile);
  run->add_option("-o,--out", out_dir, "output directory (plan, checkpoints, metrics)")->capture_default_str();

  auto* doctor = app.add_subcommand("doctor", "print what this machine offers Maestro (libraries, BLAS, launchers)");

  CLI11_PARSE(app, argc, argv);
  if (*run) return RunCommand(spec, out_dir);
  if (*doctor) return DoctorCommand();
  return 0;
}
