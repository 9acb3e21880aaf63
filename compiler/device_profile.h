// SPDX-License-Identifier: Apache-2.0
// GPU types as data: a device profile (`compiler/devices/<name>.json`, schema
// "maestro.device_profile" version 1) holds a GPU's bf16 peak, its memory
// bandwidth, the per-kernel launch cost of eager libtorch, a measured GEMM
// efficiency table over (M tokens, K inner width, N output width per TP
// rank), a causal-attention table over (head_dim, T) forward and
// forward+backward, and whole-step "validation" cases. Every number carries
// its source in the file. docs/step_model.md describes the schema.
//
// Where the files are at run time: every file under compiler/devices/ is
// embedded into the library at build time (CMake writes
// device_profiles_embedded.cc), so maestro-compile finds "h100_sxm" from any
// folder; LoadDeviceProfileFile reads a user's own file.
//
// Interpolation (GemmTflops): nearest K row group (in log K), then linear in
// log N between that group's rows and linear in log M along each row, clamped
// at the table's edges. Points a row marks as `noisy_m` are skipped.
// AttentionTflops: nearest head_dim, linear in log T, clamped.
// May call: base, nlohmann-json (in the .cc). Thread safety: a DeviceProfile
// is immutable after loading; its methods are const.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace maestro::compiler {

struct GemmRow {
  std::string label;
  double k = 0, n = 0;
  std::vector<double> m;       // tokens, ascending (noisy points removed)
  std::vector<double> tflops;  // one per m
  std::vector<double> log_m;   // log of each m (IndexGemm)
};

// The rows of one K, ascending in N with duplicate N removed (the first row
// wins): what GemmFlopsPerSecond interpolates over, built once per profile.
struct GemmKGroup {
  double k = 0;
  std::vector<size_t> rows;   // indices into DeviceProfile::gemm
  std::vector<double> log_n;  // log of each row's n
};

struct AttentionRow {
  double heads = 0, head_dim = 0;
  std::vector<double> t;  // sequence length, ascending
  std::vector<double> fwd_tflops, fwd_bwd_tflops;
};

struct ValidationCase {
  std::string model;
  int64_t micro_batch = 0, seq_len = 0;
  double seconds_per_step = 0;
};

class DeviceProfile {
 public:
  std::string name;
  std::string origin;             // file path or "embedded:<name>"
  double peak_flops = 0;          // bf16 dense, FLOP/s
  double memory_bytes_per_s = 0;  // device-to-device copy bandwidth
  // Per kernel, the eager libtorch floor the step model prices every kernel
  // with ("kernel_launch_us": one op back to back (a + b), or a fitted value).
  double kernel_launch_seconds = 0;
  // "training_issue_us", when the file has it: what one autograd-tracked
  // kernel of a training step (the step model's count, compiler/step_sum.h)
  // costs the CPU to issue under eager libtorch; a phase of a section takes
  // at least its kernels times this. 0 when absent (no such bound).
  double training_issue_seconds = 0;
  std::vector<GemmRow> gemm;
  std::vector<AttentionRow> attention;
  std::vector<ValidationCase> validation;

  // The K groups of `gemm`, in the order each K first appears (IndexGemm).
  std::vector<GemmKGroup> gemm_groups;

  // Achieved FLOP/s of y = x W^T with x (m, k), W (n, k). REQUIRES m, k, n > 0
  // and gemm indexed (the parser does it; a profile built by hand calls IndexGemm).
  double GemmFlopsPerSecond(double m, double k, double n) const;
  // Builds gemm_groups and every row's log_m from `gemm` (the planner asks
  // for millions of GEMM rates: no logarithm of a table value at a call).
  void IndexGemm();
  // Achieved FLOP/s of causal SDPA at head_dim and sequence length t, forward
  // (backward = false) or forward+backward (true). REQUIRES head_dim, t > 0.
  double AttentionFlopsPerSecond(double head_dim, double t, bool forward_and_backward) const;
};

// Parses a profile; `origin` names the file in errors.
StatusOr<DeviceProfile> ParseDeviceProfile(const std::string& json_text, const std::string& origin);
StatusOr<DeviceProfile> LoadDeviceProfileFile(const std::string& path);
// A profile embedded at build time, by name ("h100_sxm"); NotFound lists the known names.
StatusOr<DeviceProfile> BuiltinDeviceProfile(const std::string& name);
std::vector<std::string> BuiltinDeviceProfileNames();

// The device profile a GPU type without one of its own is priced with
// (docs/step_model.md, "Unknown GPU types").
inline constexpr const char* kDefaultDeviceProfile = "h100_sxm";

// `p` with every GEMM and attention rate and the peak scaled by
// peak_flops / p.peak_flops: a GPU type known only by its peak, assumed to
// reach the same share of it at every shape. Bandwidth and launch floor stay.
DeviceProfile ScaledToPeak(const DeviceProfile& p, double peak_flops);

}  // namespace maestro::compiler
