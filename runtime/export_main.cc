// SPDX-License-Identifier: Apache-2.0
// maestro-export: a trained section of a run as a Hugging Face checkpoint
// folder (runtime/hf_export.h). `maestro export ...` runs it.
//
//   maestro-export OUT --section NAME -o DIR [--step N] [--dtype auto|bf16|fp16|fp32]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "base/exit_codes.h"
#include "base/units.h"
#include "runtime/hf_export.h"

int main(int argc, char** argv) {
  maestro::runtime::ExportOptions options;
  double max_shard_gib = 5.0;
  CLI::App app{
      "maestro export: write a trained section of a run as a Hugging Face checkpoint folder (config.json, "
      "safetensors shards, model.safetensors.index.json), from the run's last committed checkpoint",
      "maestro export"};
  app.add_option("run", options.run, "the `maestro run -o` folder (plan.json + run/), or a run directory")->required();
  app.add_option("--section", options.section, "the training section to export")->required();
  app.add_option("-o,--out", options.out_dir, "the folder to write (must not exist; written atomically)")->required();
  app.add_option("--step", options.step,
                 "export the committed checkpoint of this step (default: the last; the initial weights of a "
                 "`--steps 0` run when none is committed)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--dtype", options.dtype,
                 "tensor dtype: auto (each tensor as the section's `weights` stored it; fp32 without weights), "
                 "bf16, fp16 or fp32")
      ->check(CLI::IsMember({"auto", "bf16", "fp16", "fp32"}));
  app.add_option("--max-shard-gib", max_shard_gib, "largest safetensors shard, GiB (default 5)")
      ->check(CLI::Range(0.001, 1024.0));
  app.add_option("--plan", options.plan_path, "plan.json of the run (default: found beside the run)");
  CLI11_PARSE(app, argc, argv);
  options.max_shard_bytes = static_cast<uint64_t>(max_shard_gib * static_cast<double>(maestro::kGiB));

  auto summary = maestro::runtime::ExportSectionToHf(options);
  if (!summary.ok()) {
    std::fprintf(stderr, "maestro export: %s\n", summary.status().ToString().c_str());
    const auto code = summary.status().code();
    return code == maestro::StatusCode::kInvalidArgument || code == maestro::StatusCode::kNotFound ||
                   code == maestro::StatusCode::kAlreadyExists
               ? maestro::kExitUsage
               : maestro::kExitFailure;
  }
  std::printf("maestro export: section '%s' (%s layout) from %s (%s)\n", options.section.c_str(),
              summary->layout.c_str(), summary->checkpoint.c_str(),
              summary->step < 0 ? "initial weights" : ("after step " + std::to_string(summary->step)).c_str());
  std::printf("  %lld tensors, %s -> %s:", static_cast<long long>(summary->tensors),
              maestro::HumanBytes(static_cast<double>(summary->bytes)).c_str(), options.out_dir.c_str());
  for (const auto& f : summary->files) std::printf(" %s", f.c_str());
  std::printf("\n");
  return maestro::kExitOk;
}
