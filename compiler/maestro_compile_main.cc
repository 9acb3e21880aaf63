// SPDX-License-Identifier: Apache-2.0
// maestro-compile: spec.toml -> plan.json + job.sbatch + report.
//   maestro-compile spec.toml -o outdir [--dry-run] [--explain] [--json]
//                   [--worker PATH] [--worker-arg ARG]... [--allow-planner-only]
//                   [--profiles FILE] [--local N] [--pin SECTION.KEY=VALUE]...
//                   [--runtime-support FEATURES]
//   maestro-compile --model-info config.json [--json] [--seq-len N]
// Exit status: 0 ok, 1 an I/O error, 2 bad input (the message says where).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>

#include "base/exit_codes.h"
#include "base/status.h"
#include "compiler/compile.h"
#include "compiler/model.h"
#include "compiler/spec.h"

namespace {

// Prints the message of `status` (after `prefix`); the exit status of bad
// input.
int BadInput(const maestro::Status& status, const char* prefix = "") {
  std::fprintf(stderr, "%s%s\n", prefix, status.message().c_str());
  return maestro::kExitUsage;
}

int ModelInfo(const std::string& path, bool json, int64_t seq_len) {
  auto desc = maestro::compiler::ModelFromHfConfigFile(path);
  if (!desc.ok()) return BadInput(desc.status(), "maestro-compile: ");
  const auto f = maestro::compiler::ComputeModelFacts(*desc, seq_len);
  if (json) {
    nlohmann::json j = {{"params", f.params},
                        {"active_params", f.active_params},
                        {"flops_per_token", f.flops_per_token},
                        {"seq_len", f.seq_len},
                        {"kind", maestro::plan::ModelKindName(desc->kind)}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("model:            %s (%s)\n", path.c_str(), maestro::plan::ModelKindName(desc->kind));
    std::printf("parameters:       %lld\n", static_cast<long long>(f.params));
    std::printf("active params:    %lld\n", static_cast<long long>(f.active_params));
    std::printf("forward FLOPs/token at seq_len %lld: %.6g\n", static_cast<long long>(f.seq_len), f.flops_per_token);
  }
  return maestro::kExitOk;
}

int Run(int argc, char** argv) {
  CLI::App app{"maestro-compile: turn a TOML workload spec into a plan and a Slurm heterogeneous job"};
  std::string spec_path, model_info;
  maestro::compiler::CompileOptions options;
  bool dry_run = false, explain = false, json = false;
  int64_t seq_len = 0;
  std::string profiles;
  app.add_option("spec", spec_path, "workload spec (TOML)");
  app.add_option("-o,--out", options.out_dir, "output directory (plan.json, job.sbatch, report.txt)");
  app.add_flag("--dry-run", dry_run, "plan and report, write nothing");
  app.add_flag("--explain", explain, "say why each choice was made");
  app.add_flag("--json", json, "print the report (or --model-info) as JSON");
  app.add_option("--worker", options.worker,
                 "program the job step runs on every rank (default: maestro-worker from PATH)");
  app.add_flag("--allow-planner-only", options.allow_planner_only,
               "also search configurations the runtime cannot run yet (marked planner-only)");
  app.add_option("--profiles", profiles, "measured section times (JSON array written by the runtime)");
  std::vector<std::string> pins;
  std::string support;
  app.add_option("--runtime-support", support,
                 "plan for a runtime with these features instead of this build's: comma list of dp, micro_batch, "
                 "tp_decoder, pp_decoder, tp_encoder, pp_encoder, cp, ep, moe, recompute, zero1; or all");
  app.add_option("--local", options.local_ranks,
                 "plan for this machine (maestro run): one node of N CPU ranks that the sections share")
      ->check(CLI::Range(1, 4096));
  app.add_flag("--local-grow", options.local_grow,
               "with --local: plan for the ranks the sections need at the least (one each, or their pins) when N is "
               "smaller (the ranks share the cores)");
  app.add_option("--local-cores", options.local_cores,
                 "with --local: the cores those ranks share (default: one per rank); fewer cores than ranks "
                 "makes the simulated step share them")
      ->check(CLI::Range(1, 4096));
  app.add_option("--pin", pins,
                 "SECTION.KEY=VALUE (KEY: tp, dp, pp, micro_batch); overrides the spec's pin; repeatable")
      ->allow_extra_args(false);
  app.add_option("--worker-arg", options.worker_args, "an argument appended to the worker's command line; repeatable")
      ->allow_extra_args(false);
  app.add_option("--model-info", model_info, "print parameters and FLOPs of a Hugging Face config.json");
  app.add_option("--seq-len", seq_len, "sequence length for --model-info FLOPs (default: 4096 for decoders)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? maestro::kExitOk : maestro::kExitUsage;
  }
  if (!model_info.empty()) return ModelInfo(model_info, json, seq_len);
  if (spec_path.empty()) {
    std::fprintf(stderr,
                 "maestro-compile: give a spec (maestro-compile spec.toml -o outdir) or --model-info config.json\n");
    return maestro::kExitUsage;
  }
  for (const auto& text : pins) {
    auto pin = maestro::compiler::ParsePin(text);
    if (!pin.ok()) return BadInput(pin.status(), "maestro-compile: ");
    options.pins.push_back(*pin);
  }
  if (!support.empty()) {
    auto parsed = maestro::compiler::ParseRuntimeSupport(support);
    if (!parsed.ok()) return BadInput(parsed.status(), "maestro-compile: ");
    options.support = *parsed;
    options.support_given = true;
  }
  auto spec = maestro::compiler::ParseSpecFile(spec_path);
  if (!spec.ok()) return BadInput(spec.status());
  if (!profiles.empty()) {
    auto p = maestro::compiler::ReadProfilesJson(profiles);
    if (!p.ok()) return BadInput(p.status());
    options.extra_profiles = *p;
  }
  auto result = maestro::compiler::Compile(*spec, options);
  if (!result.ok()) {
    std::fprintf(stderr, "%s\n", result.status().message().c_str());
    return result.status().code() == maestro::StatusCode::kInvalidArgument ? maestro::kExitUsage
                                                                           : maestro::kExitFailure;
  }
  if (json) {
    std::printf("%s\n", result->report_json.c_str());
  } else {
    std::printf("%s", result->report.c_str());
    if (explain) std::printf("\nwhy:\n%s", result->explain.c_str());
  }
  if (!dry_run) {
    maestro::Status s = maestro::compiler::WriteOutputs(*result, options);
    if (!s.ok()) {
      std::fprintf(stderr, "maestro-compile: %s\n", s.message().c_str());
      return maestro::kExitFailure;
    }
  }
  return maestro::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    // A bug, not bad input: say so without a stack trace.
    std::fprintf(stderr, "maestro-compile: internal error: %s\n", e.what());
    return maestro::kExitFailure;
  }
}
