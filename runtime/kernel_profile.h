// SPDX-License-Identifier: Apache-2.0
// Calibrating this machine's device: `maestro profile --kernels -o FILE`
// (through maestro-kernel-profile) measures, on CUDA device 0 or on the CPU,
// what the step model (compiler/step_model.h) prices a training step with,
// and writes it as a device profile: schema "maestro.device_profile"
// version 1, exactly what compiler/device_profile.h parses
// (docs/step_model.md, "Calibrating your own GPUs").
//
// Measured, in the precision the runtime trains in on that device (bf16 on
// CUDA; fp32 on the CPU, runtime/models/layers.h):
//  - gemm: y = x W^T (at::linear), x (M, K), W (N, K), FLOPs 2 M K N, for
//    every (K, N) row at every M;
//  - attention: causal SDPA (runtime/torch_compat.h, what the models call)
//    on q, k, v (B, heads, T, head_dim) with B = tokens / T, forward and
//    forward + backward; FLOPs forward 4 B T (T/2) heads head_dim, forward +
//    backward 3 x forward (the convention the file declares);
//  - memory_bandwidth_tb_per_s: a large tensor.copy_, bytes read + written;
//  - kernel_launch_us: a + b on one-element tensors, per op (eager's floor);
//  - issue_probe: one small ViT's training step (plan/issue_probe.h) in the
//    runtime's precision, forward and backward timed apart; `maestro
//    profile` turns it into training_issue_us on a GPU (what a tracked
//    kernel costs the CPU to issue: cli/issue_calibration.h);
//  - peak_bf16_tflops: a datasheet value by CUDA device name when known,
//    else (and on the CPU) the best GEMM rate measured, said so in its source;
//  - validation: one decoder's training step (runtime/section_speed.h).
// Every time is the median of `repeats` samples after `warmup` calls; a
// sample runs the op enough times back to back to last >= 2 ms, the device
// synchronized around it (torch::cuda::synchronize on CUDA).
//
// No torch types here: the executable and tests include it without torch.
// May call: libtorch (in the .cc), runtime/section_speed, plan (issue_probe), base (files,
// read_file), nlohmann-json. Thread-safety: one call at a time (it sets the
// intra-op thread count on the CPU).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace maestro::runtime {

// One row of the GEMM table: K inner width, N output width.
struct GemmRowShape {
  int64_t k = 0, n = 0;
  std::string label;  // "" -> "K x N"
};

// One row of the attention table.
struct AttentionRowShape {
  int64_t heads = 0, head_dim = 0;
};

// One decoder step measured as the file's validation case.
struct ValidationDecoder {
  std::string model;  // the name the file gives it
  int64_t hidden = 0, layers = 0, heads = 0, kv_heads = 0, ffn_hidden = 0, vocab = 0;
  bool tie_embeddings = true;
  int micro_batch = 0, seq_len = 0;
};

struct KernelProfileOptions {
  std::string device = "auto";  // "auto" (CUDA when usable, else CPU), "cpu" or "cuda"
  bool quick = false;           // fewer repeats and points (CI on a CPU; a first look on a GPU)
  int threads = 1;              // CPU intra-op threads; 1 = one CPU slot as the compiler plans local mode
  int warmup = -1;              // untimed calls per point; -1: 2 (quick 1)
  int repeats = -1;             // timed samples per point, the median kept; -1: 5 (quick 3)
  // Grids; empty / 0 takes the device's default (DefaultKernelProfileGrid).
  std::vector<int64_t> gemm_m;
  std::vector<GemmRowShape> gemm_rows;
  std::vector<int64_t> attention_t;
  std::vector<AttentionRowShape> attention_rows;
  int64_t attention_tokens = 0;  // B x T at every attention point
  int64_t copy_mib = 0;          // MiB copied by the bandwidth probe
  ValidationDecoder validation;  // model "" takes the default
  std::string name;              // the profile's name; "": from the device ("cpu", "nvidia_h100_80gb_hbm3")
  std::string device_name;       // overrides the detected device name
  double peak_tflops = 0;        // > 0: overrides the peak (its source says "given with --peak-tflops")
  std::string command = "maestro profile --kernels";  // the command line recorded in every source
};

// `options` with every empty grid filled with the default for `device`
// ("cpu" or "cuda"). GPU: the rows of compiler/devices/h100_sxm.json (M 256
// .. 32768; quick: M 1024 .. 16384), attention 32 x 64, 32 x 128, 16 x 80 at
// T 256 .. 16384 over 16384 tokens, a 1 GiB copy, Llama-3.2-1B at 1 x 2048.
// CPU: K, N in {64, 256, 1024}, M 64 .. 2048 (quick: .. 1024), attention
// 4 x 32, 4 x 64 at T 64 .. 512 over 2048 tokens, a 128 MiB copy (quick 64),
// a 2-layer decoder (hidden 256, vocab 1024) at 2 x 128.
KernelProfileOptions DefaultKernelProfileGrid(const KernelProfileOptions& options, const std::string& device);

// InvalidArgument naming the option when a grid is not usable (a size <= 0,
// a repeated row or point, heads x head_dim too big for the tokens, ...).
Status CheckKernelProfileOptions(const KernelProfileOptions& options);

// Fails early (before minutes of measuring) when `path` cannot be written:
// its folder is missing or not a folder, or `path` is a folder. The message
// names the path and the fix.
Status CheckProfileOutputPath(const std::string& path);

// Measures this machine's device and returns the device profile document.
// FailedPrecondition when device is "cuda" and CUDA is not usable (says
// why); InvalidArgument for bad options; Internal when torch fails at a
// point (names the point, e.g. out of memory at attention 32 x 128, T 16384).
// `progress` (may be empty) gets one line per table row.
StatusOr<nlohmann::json> MeasureKernelProfile(const KernelProfileOptions& options,
                                              const std::function<void(const std::string&)>& progress);

// Writes `profile` to `path` atomically (path.tmp, then rename): on any
// error `path` is as it was and no temporary file is left.
Status WriteKernelProfile(const std::string& path, const nlohmann::json& profile);

}  // namespace maestro::runtime
