// SPDX-License-Identifier: Apache-2.0
// maestro-kernel-profile: measures this machine's device (CUDA device 0, or
// the CPU) and writes a device profile for the step model
// (runtime/kernel_profile.h). `maestro profile --kernels -o FILE` runs it.
//
//   maestro-kernel-profile -o FILE [--device auto|cpu|cuda] [--quick] [grid options]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "base/exit_codes.h"
#include "runtime/host_allocator.h"
#include "runtime/kernel_profile.h"

namespace {

int ExitCodeOf(const maestro::Status& status) {
  const auto code = status.code();
  return code == maestro::StatusCode::kInvalidArgument || code == maestro::StatusCode::kNotFound ||
                 code == maestro::StatusCode::kFailedPrecondition
             ? maestro::kExitUsage
             : maestro::kExitFailure;
}

}  // namespace

int main(int argc, char** argv) {
  maestro::runtime::KernelProfileOptions options;
  std::string out;
  std::vector<int64_t> gemm_rows, attention_rows;  // pairs, flat: K N K N ..., heads head_dim ...
  CLI::App app{
      "maestro profile --kernels: measure this machine's device (CUDA device 0 when usable, else the CPU) and write "
      "a device profile (schema maestro.device_profile v1, docs/step_model.md): GEMM and causal-attention "
      "efficiency tables, memory bandwidth, the per-kernel floor, the bf16 peak and one decoder training step, in "
      "the precision the runtime trains in there (bf16 on CUDA, fp32 on the CPU). Defaults: on a GPU the grid of "
      "compiler/devices/h100_sxm.json (estimated under a minute on an H100), on a CPU a small one (seconds)",
      "maestro profile --kernels"};
  app.add_option("-o,--out", out, "the device profile to write (JSON; written atomically; its folder must exist)")
      ->required();
  app.add_option("--device", options.device, "auto (CUDA when usable, else the CPU), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  app.add_flag("--quick", options.quick, "fewer repeats and grid points (CI on a CPU, a first look on a GPU)");
  app.add_option("--threads", options.threads,
                 "CPU intra-op threads (default 1: one CPU slot, as the compiler plans local mode)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "untimed calls per point (default 2, quick 1)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--repeats", options.repeats, "timed samples per point, the median kept (default 5, quick 3)")
      ->check(CLI::PositiveNumber);
  app.add_option("--gemm-m", options.gemm_m, "GEMM tokens M, ascending, e.g. 256,1024,4096")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--gemm-row", gemm_rows, "a GEMM row: K (inner width) and N (output width); repeatable")
      ->expected(2)
      ->take_all()
      ->check(CLI::PositiveNumber);
  app.add_option("--attention-t", options.attention_t, "attention sequence lengths T, ascending")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--attention-row", attention_rows, "an attention row: heads and head_dim; repeatable")
      ->expected(2)
      ->take_all()
      ->check(CLI::PositiveNumber);
  app.add_option("--attention-tokens", options.attention_tokens,
                 "B x T at every attention point (default: 16384 on a GPU, 2048 on a CPU)")
      ->check(CLI::PositiveNumber);
  app.add_option("--copy-mib", options.copy_mib, "MiB copied by the bandwidth probe (default 1024 GPU, 128 CPU)")
      ->check(CLI::PositiveNumber);
  app.add_option("--name", options.name, "the profile's name (default: from the device's model name)");
  app.add_option("--device-name", options.device_name, "the device's model name (default: as the driver says)");
  app.add_option("--peak-tflops", options.peak_tflops,
                 "the device's dense bf16 peak (default: a datasheet value by model name, else the best GEMM "
                 "measured, said so in the file)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  for (size_t i = 0; i + 1 < gemm_rows.size(); i += 2)
    options.gemm_rows.push_back({gemm_rows[i], gemm_rows[i + 1], ""});
  for (size_t i = 0; i + 1 < attention_rows.size(); i += 2) {
    options.attention_rows.push_back({attention_rows[i], attention_rows[i + 1]});
  }
  // The sources name the command as a user types it (without the file).
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-o" || arg == "--out") {
      ++i;
      continue;
    }
    if (arg.rfind("--out=", 0) == 0) continue;
    options.command += " " + arg;
  }

  // The host allocator the worker would train with (MAESTRO_HOST_ALLOCATOR,
  // runtime/host_allocator.h): the profile measures what the runtime does.
  if (auto installed = maestro::runtime::InstallHostAllocator(); !installed.ok()) {
    std::fprintf(stderr, "%s\n", installed.status().message().c_str());
    return ExitCodeOf(installed.status());
  }
  if (auto writable = maestro::runtime::CheckKernelProfileOptions(options); !writable.ok()) {
    std::fprintf(stderr, "%s\n", writable.message().c_str());
    return ExitCodeOf(writable);
  }
  if (auto writable = maestro::runtime::CheckProfileOutputPath(out); !writable.ok()) {
    std::fprintf(stderr, "%s\n", writable.message().c_str());
    return ExitCodeOf(writable);
  }
  auto profile = maestro::runtime::MeasureKernelProfile(
      options, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  if (!profile.ok()) {
    std::fprintf(stderr, "%s\n", profile.status().message().c_str());
    return ExitCodeOf(profile.status());
  }
  if (auto written = maestro::runtime::WriteKernelProfile(out, *profile); !written.ok()) {
    std::fprintf(stderr, "maestro profile --kernels: %s\n", written.message().c_str());
    return maestro::kExitFailure;
  }
  std::printf(
      "maestro profile --kernels: wrote %s (device profile \"%s\", schema maestro.device_profile v1; "
      "docs/step_model.md)\n",
      out.c_str(), profile->at("name").get<std::string>().c_str());
  return maestro::kExitOk;
}
