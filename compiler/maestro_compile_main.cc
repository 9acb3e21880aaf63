// SPDX-License-Identifier: Apache-2.0
// maestro-compile: spec.toml -> plan.json + job.sbatch + report.
//   maestro-compile spec.toml -o outdir [--dry-run] [--explain] [--json]
//                   [--worker PATH] [--worker-arg ARG]... [--allow-planner-only]
//                   [--profiles FILE] [--local N [--local-gpu NAME]] [--pin SECTION.KEY=VALUE]...
//                   [--runtime-support FEATURES]
//   maestro-compile spec.toml --dry-run [...]      (writes nothing: no -o needed)
//   maestro-compile --model-info config.json [--json] [--seq-len N]
// Exit status: 0 ok, 1 an I/O error, 2 bad input (the message says where).
// -o is required (but with --dry-run, which writes nothing): without it the
// tool would replace plan.json, job.sbatch and report.txt/.json in the current
// folder, which may belong to something else.
// Everything printed goes through base/text.h: a spec's control characters,
// NULs and bytes that are not UTF-8 reach the terminal escaped.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>

#include "base/exit_codes.h"
#include "base/status.h"
#include "base/text.h"
#include "compiler/compile.h"
#include "compiler/model.h"
#include "compiler/spec.h"

namespace {

// Writes `text` whole (a NUL does not end it), its control characters but
// the line breaks escaped.
void Print(std::FILE* to, std::string_view text) {
  const std::string printable = maestro::PrintableLines(text);
  std::fwrite(printable.data(), 1, printable.size(), to);
}

// Prints the message of `status` (after `prefix`); the exit status of bad
// input.
int BadInput(const maestro::Status& status, const char* prefix = "") {
  Print(stderr, std::string(prefix) + status.message() + "\n");
  return maestro::kExitUsage;
}

// A command-line value that goes into job.sbatch or names a file: refused
// when it holds a control character (a newline would start a line of the
// script nobody wrote), and when empty unless `empty_ok`.
CLI::Validator ScriptSafe(bool empty_ok) {
  return CLI::Validator(
      [empty_ok](std::string& value) -> std::string {
        if (value.empty() && !empty_ok) return "must not be empty";
        for (char c : value) {
          const auto u = static_cast<unsigned char>(c);
          if (u < 0x20 || u == 0x7F) {
            return "'" + maestro::PrintableText(value) + "' holds a control character; give it without one";
          }
        }
        return "";
      },
      empty_ok ? "TEXT" : "TEXT (not empty)");
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
    Print(stdout, "model:            " + maestro::PrintableText(path) + " (" +
                      maestro::plan::ModelKindName(desc->kind) + ")\n");
    std::printf("parameters:       %lld\n", static_cast<long long>(f.params));
    std::printf("active params:    %lld\n", static_cast<long long>(f.active_params));
    std::printf("forward FLOPs/token at seq_len %lld: %.6g\n", static_cast<long long>(f.seq_len), f.flops_per_token);
  }
  return maestro::kExitOk;
}

// The local mode's options (`maestro run` compiles with them): --local N
// CPU slots or, with --local-gpu, N of this machine's GPUs.
void AddLocalOptions(CLI::App& app, maestro::compiler::CompileOptions& options) {
  app.add_option("--local", options.local_ranks,
                 "plan for this machine (maestro run): one node of N CPU ranks that the sections share, or N GPUs with "
                 "--local-gpu")
      ->check(CLI::Range(1, 4096));
  app.add_flag("--local-grow", options.local_grow,
               "with --local: plan for the ranks the sections need at the least (one each, or their pins) when N is "
               "smaller (the ranks share the cores)");
  app.add_option("--local-cores", options.local_cores,
                 "with --local: the cores those ranks share (default: one per rank); fewer cores than ranks "
                 "makes the simulated step share them")
      ->check(CLI::Range(1, 4096));
  app.add_option("--local-gpu", options.local_gpu,
                 "with --local: the N ranks are GPUs of this machine named NAME (CUDA's name or a device profile's, "
                 "e.g. h100_sxm), one rank each (maestro run on a machine with GPUs); a type without a device "
                 "profile is priced with the default tables (the report's note)")
      ->check(ScriptSafe(false));
  app.add_option("--local-gpu-memory-gb", options.local_gpu_memory_gb,
                 "with --local-gpu: each GPU's memory in GB (default: the type's)")
      ->check(CLI::Range(1e-3, 1e6));
}

int Run(int argc, char** argv) {
  CLI::App app{"maestro-compile: turn a TOML workload spec into a plan and a Slurm heterogeneous job"};
  std::string spec_path, model_info;
  maestro::compiler::CompileOptions options;
  bool dry_run = false, explain = false, json = false;
  int64_t seq_len = 0;
  std::string profiles;
  app.add_option("spec", spec_path, "workload spec (TOML)");
  options.out_dir.clear();  // required: no default folder to overwrite
  app.add_option("-o,--out", options.out_dir,
                 "output directory (plan.json, job.sbatch, report.txt, report.json); required unless --dry-run")
      ->check(ScriptSafe(false));
  app.add_flag("--dry-run", dry_run, "plan and report, write nothing");
  app.add_flag("--explain", explain, "say why each choice was made");
  app.add_flag("--json", json, "print the report (or --model-info) as JSON");
  app.add_option("--worker", options.worker,
                 "program the job step runs on every rank (default: maestro-worker from PATH)")
      ->check(ScriptSafe(false));
  app.add_flag("--allow-planner-only", options.allow_planner_only,
               "also search configurations the runtime cannot run yet (marked planner-only)");
  using maestro::compiler::Grouping;
  const std::map<std::string, Grouping> groupings{
      {"auto", Grouping::kAuto}, {"sectioned", Grouping::kSectioned}, {"fused", Grouping::kFused}};
  app.add_option("--grouping", options.grouping,
                 "how components become sections: auto (the faster of the sectioned plan and every component fused "
                 "in one section on every GPU, the monolithic configuration), sectioned, or fused")
      ->transform(CLI::CheckedTransformer(groupings, CLI::ignore_case))
      ->capture_default_str();
  app.add_option("--profiles", profiles, "measured section times (JSON array written by the runtime)")
      ->check(ScriptSafe(false));
  std::vector<std::string> pins;
  std::string support;
  CLI::Option* support_option = app.add_option(
      "--runtime-support", support,
      "plan for a runtime with these features instead of this build's (" +
          maestro::compiler::RuntimeSupportText(maestro::compiler::kRuntimeSupport) + "): a comma list of " +
          maestro::compiler::RuntimeSupportText(*maestro::compiler::ParseRuntimeSupport("all")) +
          " (cp: every cp_ row); or all");
  AddLocalOptions(app, options);
  app.add_option("--pin", pins,
                 "SECTION.KEY=VALUE (KEY: tp, dp, pp, micro_batch); overrides the spec's pin; repeatable")
      ->allow_extra_args(false);
  app.add_option("--worker-arg", options.worker_args, "an argument appended to the worker's command line; repeatable")
      ->allow_extra_args(false)
      ->check(ScriptSafe(true));
  app.add_option("--model-info", model_info, "print parameters and FLOPs of a Hugging Face config.json")
      ->check(ScriptSafe(false));
  app.add_option("--seq-len", seq_len, "sequence length for --model-info FLOPs (default: 4096 for decoders)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
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
  if (options.out_dir.empty() && !dry_run) {
    std::fprintf(stderr,
                 "maestro-compile: give the output folder with -o DIR (it writes plan.json, job.sbatch, "
                 "report.txt and report.json there), or --dry-run to write nothing\n");
    return maestro::kExitUsage;
  }
  for (const auto& text : pins) {
    auto pin = maestro::compiler::ParsePin(text);
    if (!pin.ok()) return BadInput(pin.status(), "maestro-compile: ");
    options.pins.push_back(*pin);
  }
  if (support_option->count() > 0) {
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
    Print(stderr, result.status().message() + "\n");
    return result.status().code() == maestro::StatusCode::kInvalidArgument ? maestro::kExitUsage
                                                                           : maestro::kExitFailure;
  }
  for (const std::string& w : result->warnings) Print(stderr, "maestro-compile: warning: " + w + "\n");
  if (json) {
    std::printf("%s\n", result->report_json.c_str());  // JSON escapes its strings itself
  } else {
    Print(stdout, result->report);
    if (explain) Print(stdout, "\nwhy:\n" + result->explain);
  }
  if (!dry_run) {
    maestro::Status s = maestro::compiler::WriteOutputs(*result, options);
    if (!s.ok()) {
      Print(stderr, "maestro-compile: " + s.message() + "\n");
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
    Print(stderr, std::string("maestro-compile: internal error: ") + e.what() + "\n");
    return maestro::kExitFailure;
  }
}
