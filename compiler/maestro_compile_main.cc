// SPDX-License-Identifier: Apache-2.0
// maestro-compile: spec.toml -> plan.json + job.sbatch + report.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "compiler/spec.h"

int main(int argc, char** argv) {
  CLI::App app{"maestro-compile: turn a TOML workload spec into a plan and a Slurm heterogeneous job"};
  std::string spec;
  std::string out_dir = ".";
  app.add_option("spec", spec, "workload spec (TOML)")->required();
  app.add_option("-o,--out", out_dir, "output directory");
  CLI11_PARSE(app, argc, argv);
  auto sections = maestro::compiler::ReadSectionSummaries(spec);
  if (!sections.ok()) {
    std::fprintf(stderr, "%s\n", sections.status().message().c_str());
    return 2;
  }
  for (const auto& s : *sections) std::printf("%-12s %-10s %s\n", s.name.c_str(), s.mode.c_str(), s.model.c_str());
  return 0;
}
