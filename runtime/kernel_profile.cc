// SPDX-License-Identifier: Apache-2.0
#include "runtime/kernel_profile.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <set>
#include <sstream>
#include <utility>

#include "base/checks.h"
#include "base/files.h"
#include "base/read_file.h"
#include "plan/issue_probe.h"
#include "runtime/runtime_info.h"
#include "runtime/section_speed.h"
#include "runtime/torch_compat.h"

namespace maestro::runtime {
namespace {

using nlohmann::json;

constexpr double kMinSampleSeconds = 2e-3;  // one timed sample lasts at least this long
constexpr int64_t kMaxCallsPerSample = 100000;

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// 4 significant digits: what the measurements can tell apart, and a file
// a person can read.
double Round4(double x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g", x);
  return std::strtod(buf, nullptr);
}

std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// The value after "<key>:" on the first line of `text` that starts with key.
std::string LineValue(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon != std::string::npos) return Trim(line.substr(colon + 1));
  }
  return "";
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

// "2026-11-24" (with_time false) or "2026-11-24T10:11:12Z", UTC.
std::string UtcNow(bool with_time) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  if (with_time) {
    std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  } else {
    std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  }
  return buf;
}

std::string CpuModelName() {
  auto text = ReadSmallFile("/proc/cpuinfo", kMaxConfigBytes, "the CPU description");
  const std::string name = text.ok() ? LineValue(*text, "model name") : "";
  return name.empty() ? "CPU" : name;
}

// The NVIDIA driver's model name of the GPUs (/proc/driver/nvidia/gpus/*/
// information; libtorch's API has no device name without the CUDA headers).
// "" when the folder is absent or the GPUs are of several models (which one
// is CUDA device 0 is then unknown).
std::string NvidiaModelName() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::set<std::string> models;
  for (fs::directory_iterator it("/proc/driver/nvidia/gpus", ec), end; !ec && it != end; it.increment(ec)) {
    auto text = ReadSmallFile((it->path() / "information").string(), kMaxConfigBytes, "the GPU description");
    if (!text.ok()) continue;
    const std::string model = LineValue(*text, "Model");
    if (!model.empty()) models.insert(model);
  }
  return models.size() == 1 ? *models.begin() : "";
}

// Dense bf16 TFLOP/s from NVIDIA's datasheets (their "with sparsity" figures
// halved), by the driver's model name; 0 when the name is not known here.
double KnownBf16PeakTflops(const std::string& device_name, std::string* source) {
  const std::string n = Lower(device_name);
  struct Known {
    const char* family;
    const char* variant;  // "" = any
    double tflops;
    const char* datasheet;
  };
  static const Known kKnown[] = {
      {"h100", "nvl", 835.5, "NVIDIA H100 NVL datasheet: 1,671 TFLOP/s bf16 with sparsity"},
      {"h100", "pcie", 756.5, "NVIDIA H100 PCIe datasheet: 1,513 TFLOP/s bf16 with sparsity"},
      {"h100", "", 989.4,
       "NVIDIA H100 SXM datasheet: 1,979 TFLOP/s bf16 with sparsity (as compiler/devices/h100_sxm.json)"},
      {"h200", "nvl", 835.5, "NVIDIA H200 NVL datasheet: 1,671 TFLOP/s bf16 with sparsity"},
      {"h200", "", 989.4, "NVIDIA H200 SXM datasheet: 1,979 TFLOP/s bf16 with sparsity"},
      {"a100", "", 312.0, "NVIDIA A100 datasheet: 312 TFLOP/s bf16 dense"},
      {"l40s", "", 362.05, "NVIDIA L40S datasheet: 733 TFLOP/s bf16 with sparsity"},
  };
  for (const auto& k : kKnown) {
    if (n.find(k.family) == std::string::npos) continue;
    if (*k.variant != '\0' && n.find(k.variant) == std::string::npos) continue;
    *source = k.datasheet;
    return k.tflops;
  }
  return 0;
}

// "NVIDIA H100 80GB HBM3" -> "nvidia_h100_80gb_hbm3".
std::string ProfileNameFrom(const std::string& device_name) {
  std::string out;
  for (unsigned char c : device_name) {
    if (std::isalnum(c)) {
      out += static_cast<char>(std::tolower(c));
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
    if (out.size() >= 64) break;
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "device" : out;
}

double Median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : 0.5 * (xs[n / 2 - 1] + xs[n / 2]);
}

// Times ops on one device: `warmup` calls, one synchronized call to size the
// samples, then `repeats` samples of back-to-back calls (>= 2 ms each, the
// device synchronized before and after); the median seconds per call.
class OpTimer {
 public:
  OpTimer(torch::Device device, int warmup, int repeats) : device_(device), warmup_(warmup), repeats_(repeats) {}

  template <typename Op>
  double SecondsPerCall(const Op& op) const {
    for (int i = 0; i < warmup_; ++i) op();
    Sync();
    auto t0 = std::chrono::steady_clock::now();
    op();
    Sync();
    const double once = Elapsed(t0);
    const auto calls = static_cast<int64_t>(
        std::clamp(std::ceil(kMinSampleSeconds / std::max(once, 1e-9)), 1.0, static_cast<double>(kMaxCallsPerSample)));
    std::vector<double> samples;
    for (int r = 0; r < repeats_; ++r) {
      Sync();
      t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < calls; ++i) op();
      Sync();
      samples.push_back(Elapsed(t0) / static_cast<double>(calls));
    }
    return Median(samples);
  }

 private:
  void Sync() const {
    if (device_.is_cuda()) torch::cuda::synchronize();
  }
  static double Elapsed(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  torch::Device device_;
  int warmup_, repeats_;
};

std::string RowLabel(const GemmRowShape& r) {
  return r.label.empty() ? std::to_string(r.k) + " x " + std::to_string(r.n) : r.label;
}

std::string JoinRates(const std::vector<double>& xs) {
  std::string out;
  for (double x : xs) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%s%.4g", out.empty() ? "" : " ", x);
    out += buf;
  }
  return out;
}

Status PointError(const std::string& where, const c10::Error& e) {
  return Status::Internal("maestro profile --kernels: torch failed at " + where + ": " + e.what_without_backtrace() +
                          " (a smaller grid avoids it: see maestro-kernel-profile --help)");
}

}  // namespace

KernelProfileOptions DefaultKernelProfileGrid(const KernelProfileOptions& options, const std::string& device) {
  KernelProfileOptions o = options;
  const bool gpu = device == "cuda";
  if (o.warmup < 0) o.warmup = o.quick ? 1 : 2;
  if (o.repeats < 0) o.repeats = o.quick ? 3 : 5;
  if (o.gemm_m.empty()) {
    if (gpu) {
      o.gemm_m = o.quick ? std::vector<int64_t>{1024, 4096, 16384}
                         : std::vector<int64_t>{256, 1024, 2048, 4096, 8192, 16384, 32768};
    } else {
      o.gemm_m = o.quick ? std::vector<int64_t>{64, 256, 1024} : std::vector<int64_t>{64, 256, 1024, 2048};
    }
  }
  if (o.gemm_rows.empty()) {
    if (gpu) {
      // compiler/devices/h100_sxm.json's rows: FFN shapes of the measured
      // decoders and the ViT-H MLP at TP 1 .. 8.
      o.gemm_rows = {
          {896, 4864, "Qwen2.5-0.5B FFN TP1"}, {896, 2432, "Qwen2.5-0.5B FFN TP2"}, {896, 1216, "Qwen2.5-0.5B FFN TP4"},
          {896, 608, "Qwen2.5-0.5B FFN TP8"},  {1280, 5120, "ViT-H MLP TP1"},       {1280, 1280, "ViT-H MLP TP4"},
          {1280, 640, "ViT-H MLP TP8"},        {2048, 8192, "Llama-1B FFN TP1"},    {2048, 1024, "Llama-1B FFN TP8"},
          {4096, 14336, "Llama-8B FFN TP1"},   {4096, 1792, "Llama-8B FFN TP8"},    {8192, 28672, "Llama-70B FFN TP1"},
          {8192, 3584, "Llama-70B FFN TP8"}};
    } else {
      for (int64_t k : {64, 256, 1024}) {
        for (int64_t n : {64, 256, 1024}) o.gemm_rows.push_back({k, n, ""});
      }
    }
  }
  if (o.attention_t.empty()) {
    if (gpu) {
      o.attention_t =
          o.quick ? std::vector<int64_t>{1024, 4096, 16384} : std::vector<int64_t>{256, 1024, 2048, 4096, 8192, 16384};
    } else {
      o.attention_t = o.quick ? std::vector<int64_t>{64, 256} : std::vector<int64_t>{64, 128, 256, 512};
    }
  }
  if (o.attention_rows.empty()) {
    o.attention_rows = gpu ? std::vector<AttentionRowShape>{{32, 64}, {32, 128}, {16, 80}}
                           : std::vector<AttentionRowShape>{{4, 32}, {4, 64}};
  }
  if (o.attention_tokens <= 0) o.attention_tokens = gpu ? 16384 : 2048;
  if (o.copy_mib <= 0) o.copy_mib = gpu ? (o.quick ? 256 : 1024) : (o.quick ? 64 : 128);
  if (o.validation.model.empty()) {
    if (gpu) {
      o.validation = {"Llama-3.2-1B", 2048, 16, 32, 8, 8192, 128256, true, 1, 2048};
    } else {
      o.validation = {
          "maestro-kernel-profile CPU decoder (hidden 256, 2 layers)", 256, 2, 4, 2, 768, 1024, true, 2, 128};
    }
  }
  return o;
}

Status CheckKernelProfileOptions(const KernelProfileOptions& o) {
  const auto bad = [](const std::string& what) {
    return Status::InvalidArgument("maestro profile --kernels: " + what);
  };
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda") {
    return bad("--device must be auto, cpu or cuda, not \"" + o.device + "\"");
  }
  if (o.threads < 1) return bad("--threads must be >= 1");
  if (o.repeats == 0) return bad("--repeats must be >= 1");
  const auto ascending = [&](const std::vector<int64_t>& xs, const std::string& flag) -> Status {
    for (size_t i = 0; i < xs.size(); ++i) {
      if (xs[i] <= 0) return bad(flag + " values must be positive, got " + std::to_string(xs[i]));
      if (i > 0 && xs[i] <= xs[i - 1]) {
        return bad(flag + " must be strictly ascending (" + std::to_string(xs[i - 1]) + " then " +
                   std::to_string(xs[i]) + ")");
      }
    }
    return Status::Ok();
  };
  MAESTRO_RETURN_IF_ERROR(ascending(o.gemm_m, "--gemm-m"));
  MAESTRO_RETURN_IF_ERROR(ascending(o.attention_t, "--attention-t"));
  std::set<std::pair<int64_t, int64_t>> kn;
  for (const auto& r : o.gemm_rows) {
    if (r.k <= 0 || r.n <= 0) return bad("--gemm-rows: K and N must be positive in " + RowLabel(r));
    if (!kn.insert({r.k, r.n}).second) {
      return bad("--gemm-rows lists K " + std::to_string(r.k) + ", N " + std::to_string(r.n) +
                 " twice; the compiler reads one row per (K, N)");
    }
  }
  std::set<int64_t> head_dims;
  for (const auto& r : o.attention_rows) {
    if (r.heads <= 0 || r.head_dim <= 0) return bad("--attention-rows: heads and head_dim must be positive");
    if (!head_dims.insert(r.head_dim).second) {
      return bad("--attention-rows lists head_dim " + std::to_string(r.head_dim) +
                 " twice; the compiler reads one row per head_dim");
    }
  }
  if (o.attention_tokens < 0 || o.copy_mib < 0) return bad("--attention-tokens and --copy-mib must be positive");
  if (o.peak_tflops < 0) return bad("--peak-tflops must be positive");
  return Status::Ok();
}

Status CheckProfileOutputPath(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return Status::InvalidArgument("maestro profile --kernels: -o FILE is empty; name the file");
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    return Status::InvalidArgument("maestro profile --kernels: -o " + path + " is a folder; give a file name, e.g. " +
                                   (fs::path(path) / "device.json").string());
  }
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::exists(dir, ec)) {
    return Status::NotFound("maestro profile --kernels: cannot write " + path + ": the folder " + dir.string() +
                            " does not exist; create it (mkdir -p " + dir.string() + ") or choose another -o");
  }
  if (!fs::is_directory(dir, ec)) {
    return Status::InvalidArgument("maestro profile --kernels: cannot write " + path + ": " + dir.string() +
                                   " is not a folder");
  }
  if (access(dir.c_str(), W_OK) != 0) {
    return Status::InvalidArgument("maestro profile --kernels: cannot write " + path + ": the folder " + dir.string() +
                                   " is not writable; choose another -o");
  }
  return Status::Ok();
}

namespace {

// What every measurement of one profile shares: the options, the device, its
// tensors' dtype, the timer, the progress lines, and the text each "source"
// ends with (how it was timed; where, when and on what).
struct ProfileRun {
  const KernelProfileOptions& o;
  std::string device_kind;  // "cuda" or "cpu"
  bool gpu;
  std::string device_name, dtype_name;
  torch::TensorOptions topts;
  std::string timing, where;
  const OpTimer& timer;
  std::function<void(const std::string&)> say;
};

// GEMM: y = x W^T at every row and M of the grid; the best rate and its point
// in *best_tflops, *best_at (the peak when none is known).
StatusOr<json> MeasureGemmTable(const ProfileRun& run, double* best_tflops, std::string* best_at) {
  const KernelProfileOptions& o = run.o;
  const auto& topts = run.topts;
  const std::string& dtype_name = run.dtype_name;
  const std::string& timing = run.timing;
  const std::string& where = run.where;
  const OpTimer& timer = run.timer;
  const auto& say = run.say;
  json gemm;
  gemm["source"] = "y = x W^T (at::linear), x (M, K), W (N, K), FLOPs 2 M K N, " + dtype_name +
                   ", forward only; M tokens, K inner width, N output width; TFLOP/s; " + timing + "; " + where;
  gemm["m"] = o.gemm_m;
  for (const auto& row : o.gemm_rows) {
    std::vector<double> tflops;
    const auto weight = torch::randn({row.n, row.k}, topts);  // (N, K)
    for (int64_t m : o.gemm_m) {
      const std::string at = "gemm " + RowLabel(row) + " (K " + std::to_string(row.k) + ", N " + std::to_string(row.n) +
                             "), M " + std::to_string(m);
      try {
        const auto x = torch::randn({m, row.k}, topts);  // (M, K)
        const double seconds = timer.SecondsPerCall([&] { return torch::linear(x, weight); });
        const double rate =
            2.0 * static_cast<double>(m) * static_cast<double>(row.k) * static_cast<double>(row.n) / seconds / 1e12;
        tflops.push_back(Round4(rate));
        if (rate > *best_tflops) {
          *best_tflops = rate;
          *best_at = at;
        }
      } catch (const c10::Error& e) {
        return PointError(at, e);
      }
    }
    say("  gemm " + RowLabel(row) + ": " + JoinRates(tflops) + " TFLOP/s");
    gemm["rows"].push_back({{"label", RowLabel(row)}, {"k", row.k}, {"n", row.n}, {"tflops", tflops}});
  }
  return gemm;
}

// Causal attention, forward and forward + backward, at every row and T of the
// grid.
StatusOr<json> MeasureAttentionTable(const ProfileRun& run) {
  const KernelProfileOptions& o = run.o;
  const auto& topts = run.topts;
  const std::string& dtype_name = run.dtype_name;
  const std::string& timing = run.timing;
  const std::string& where = run.where;
  const OpTimer& timer = run.timer;
  const auto& say = run.say;
  json attention;
  attention["source"] = "causal scaled-dot-product attention (runtime/torch_compat.h: " +
                        std::string(compat::kTorch2 ? "at::scaled_dot_product_attention" : "matmul + softmax + mask") +
                        "), q, k, v (B, heads, T, head_dim), B x T = " + std::to_string(o.attention_tokens) +
                        " tokens (B at least 1), " + dtype_name + "; TFLOP/s forward and forward+backward; " + timing +
                        "; " + where;
  attention["flops_convention"] =
      "forward 4*B*T*(T/2)*heads*head_dim (the compiler's causal count); forward+backward "
      "3x forward";
  attention["tokens"] = o.attention_tokens;
  attention["t"] = o.attention_t;
  for (const auto& row : o.attention_rows) {
    std::vector<double> fwd, fwd_bwd;
    for (int64_t t : o.attention_t) {
      const int64_t b = std::max<int64_t>(1, o.attention_tokens / t);
      const std::string at = "attention " + std::to_string(row.heads) + " x " + std::to_string(row.head_dim) + ", T " +
                             std::to_string(t) + ", B " + std::to_string(b);
      const double flops = 4.0 * static_cast<double>(b) * static_cast<double>(t) * (static_cast<double>(t) / 2.0) *
                           static_cast<double>(row.heads) * static_cast<double>(row.head_dim);
      try {
        const auto q = torch::randn({b, row.heads, t, row.head_dim}, topts);  // (B, H, T, D)
        const auto k = torch::randn_like(q);
        const auto v = torch::randn_like(q);
        const double forward = timer.SecondsPerCall([&] {
          torch::NoGradGuard no_grad;
          return compat::ScaledDotProductAttention(q, k, v, /*causal=*/true);
        });
        const auto qg = q.clone().requires_grad_(true);
        const auto kg = k.clone().requires_grad_(true);
        const auto vg = v.clone().requires_grad_(true);
        const auto grad_out = torch::randn_like(q);  // (B, H, T, D)
        const double both = timer.SecondsPerCall([&] {
          const auto out = compat::ScaledDotProductAttention(qg, kg, vg, /*causal=*/true);
          return torch::autograd::grad({out}, {qg, kg, vg}, {grad_out});
        });
        fwd.push_back(Round4(flops / forward / 1e12));
        fwd_bwd.push_back(Round4(3.0 * flops / both / 1e12));
      } catch (const c10::Error& e) {
        return PointError(at, e);
      }
    }
    say("  attention " + std::to_string(row.heads) + " x " + std::to_string(row.head_dim) + ": forward " +
        JoinRates(fwd) + ", forward+backward " + JoinRates(fwd_bwd) + " TFLOP/s");
    attention["rows"].push_back(
        {{"heads", row.heads}, {"head_dim", row.head_dim}, {"fwd_tflops", fwd}, {"fwd_bwd_tflops", fwd_bwd}});
  }
  return attention;
}

// Memory bandwidth: dst.copy_(src), bytes read + written.
Status MeasureMemoryBandwidth(const ProfileRun& run, json* profile) {
  const KernelProfileOptions& o = run.o;
  const bool gpu = run.gpu;
  const auto& topts = run.topts;
  const std::string& timing = run.timing;
  const std::string& where = run.where;
  const OpTimer& timer = run.timer;
  const auto& say = run.say;
  json& doc = *profile;
  const int64_t bytes = o.copy_mib << 20;
  const int64_t elems = bytes / static_cast<int64_t>(gpu ? 2 : 4);
  double tb_per_s = 0;
  try {
    const auto src = torch::ones({elems}, topts);
    auto dst = torch::empty_like(src);
    const double seconds = timer.SecondsPerCall([&] { dst.copy_(src); });
    tb_per_s = 2.0 * static_cast<double>(bytes) / seconds / 1e12;
  } catch (const c10::Error& e) {
    return PointError("the " + std::to_string(o.copy_mib) + " MiB copy", e);
  }
  doc["memory_bandwidth_tb_per_s"] = {
      {"value", Round4(tb_per_s)},
      {"source", std::string(gpu ? "device-to-device" : "memory-to-memory") + " tensor.copy_ of " +
                     std::to_string(o.copy_mib) + " MiB, bytes read + written / time; " + timing + "; " + where}};
  say("  memory bandwidth: " + JoinRates({tb_per_s * 1e3}) + " GB/s");
  return Status::Ok();
}

// Per-kernel floor: a + b on one-element tensors, each call one op.
Status MeasureKernelFloor(const ProfileRun& run, json* profile) {
  const auto& topts = run.topts;
  const std::string& timing = run.timing;
  const std::string& where = run.where;
  const OpTimer& timer = run.timer;
  const auto& say = run.say;
  json& doc = *profile;
  double us = 0;
  try {
    const auto a = torch::ones({1}, topts);
    const auto b = torch::ones({1}, topts);
    us = timer.SecondsPerCall([&] { return a + b; }) * 1e6;
  } catch (const c10::Error& e) {
    return PointError("the one-element add", e);
  }
  doc["kernel_launch_us"] = {{"value", Round4(us)},
                             {"source",
                              "median time per op of a + b on one-element tensors, ops back to back (eager libtorch's "
                              "per-kernel floor on this machine); " +
                                  timing + "; " + where}};
  say("  kernel floor: " + JoinRates({us}) + " us");
  return Status::Ok();
}

// The issue probe (plan/issue_probe.h): one small ViT's training step in
// the runtime's precision on this device, its forward (the autocast weight
// casts included) and backward timed apart. `maestro profile` divides their
// sum by the step model's count of the step's tracked kernels
// (cli/issue_calibration.h) into training_issue_us.
Status MeasureIssueProbe(const ProfileRun& run, json* profile) {
  const plan::ModelDesc desc = plan::IssueProbeVit();
  const SectionSpeedOptions speed_options = IssueProbeOptions(desc, run.gpu, run.gpu ? 20 : std::max(3, run.o.repeats));
  StatusOr<SectionSpeed> speed = Status::Internal("not measured");
  try {
    speed = MeasureSectionTraining(desc, speed_options);
  } catch (const c10::Error& e) {
    return PointError("the issue probe", e);
  }
  if (!speed.ok()) {
    return Status(speed.status().code(), "maestro profile --kernels: the issue probe: " + speed.status().message());
  }
  (*profile)["issue_probe"] = {
      {"model", "plan::IssueProbeVit (ViT-B/16's 12 layers, 64 wide)"},
      {"images", plan::kIssueProbeImages},
      {"image_size", desc.image_size},
      {"precision", speed_options.precision},
      {"forward_seconds", speed->forward_seconds},
      {"backward_seconds", speed->backward_seconds},
      {"source", "one ViT training step (runtime/section_speed.cc, precision " + speed_options.precision +
                     "), forward with its loss and backward timed apart, the device synchronized between them; mean "
                     "of " +
                     std::to_string(speed_options.steps) + " steps after " + std::to_string(speed_options.warmup) +
                     " warm-up; " + run.where}};
  run.say("  issue probe: forward " + JoinRates({speed->forward_seconds * 1e3}) + " ms, backward " +
          JoinRates({speed->backward_seconds * 1e3}) + " ms");
  return Status::Ok();
}

// Peak: a datasheet value by name on CUDA, else the best GEMM measured
// (best_gemm_tflops at best_gemm_at).
void AddPeak(const ProfileRun& run, double best_gemm_tflops, const std::string& best_gemm_at, json* profile) {
  const KernelProfileOptions& o = run.o;
  const bool gpu = run.gpu;
  const std::string& device_name = run.device_name;
  const std::string& dtype_name = run.dtype_name;
  const std::string& where = run.where;
  const auto& say = run.say;
  json& doc = *profile;
  double peak = 0;
  std::string source;
  if (o.peak_tflops > 0) {
    peak = o.peak_tflops;
    source = "given with --peak-tflops";
  } else if (gpu) {
    peak = KnownBf16PeakTflops(device_name, &source);
    if (peak > 0) source = "dense bf16 peak of " + device_name + " by name: " + source + " (halved)";
  }
  if (peak <= 0) {
    peak = best_gemm_tflops;
    source = std::string(gpu ? "the device name matches no known bf16 peak: " : "") +
             "NOT a datasheet peak: the best GEMM rate measured (" + best_gemm_at + ", " + dtype_name +
             "); the MFU it gives reads high";
  }
  doc["peak_bf16_tflops"] = {{"value", Round4(peak)}, {"source", source + "; " + where}};
  say("  peak: " + JoinRates({peak}) + " TFLOP/s (" + source + ")");
}

// Validation: one decoder's training step (runtime/section_speed.h).
Status MeasureValidationStep(const ProfileRun& run, json* profile) {
  const KernelProfileOptions& o = run.o;
  const std::string& device_kind = run.device_kind;
  const bool gpu = run.gpu;
  const std::string& dtype_name = run.dtype_name;
  const std::string& where = run.where;
  const auto& say = run.say;
  json& doc = *profile;
  const ValidationDecoder& v = o.validation;
  plan::ModelDesc desc;
  desc.kind = plan::ModelKind::kDecoder;
  desc.hidden = v.hidden;
  desc.layers = v.layers;
  desc.heads = v.heads;
  desc.kv_heads = v.kv_heads;
  desc.ffn_hidden = v.ffn_hidden;
  desc.vocab = v.vocab;
  desc.tie_embeddings = v.tie_embeddings;
  SectionSpeedOptions speed_options;
  speed_options.device = device_kind;
  speed_options.precision = gpu ? "bf16" : "fp32";
  speed_options.micro_batch = v.micro_batch;
  speed_options.seq_len = v.seq_len;
  speed_options.warmup = gpu ? 3 : o.warmup;
  speed_options.steps = gpu ? 10 : std::max(3, o.repeats);
  StatusOr<SectionSpeed> speed = Status::Internal("not measured");
  try {
    speed = MeasureSectionTraining(desc, speed_options);
  } catch (const c10::Error& e) {
    return PointError("the validation step of " + v.model, e);
  }
  if (!speed.ok()) {
    return Status(speed.status().code(),
                  "maestro profile --kernels: the validation step of " + v.model + ": " + speed.status().message());
  }
  json shape = {{"hidden", v.hidden},
                {"layers", v.layers},
                {"heads", v.heads},
                {"kv_heads", v.kv_heads},
                {"ffn_hidden", v.ffn_hidden},
                {"vocab", v.vocab},
                {"tie_embeddings", v.tie_embeddings}};
  json measured_case = {{"model", v.model},        {"micro_batch", v.micro_batch},
                        {"seq_len", v.seq_len},    {"seconds_per_step", Round4(speed->seconds_per_step)},
                        {"params", speed->params}, {"shape", shape}};
  json validation;
  validation["source"] =
      "whole training step of runtime/models/decoder.cc (runtime/section_speed.cc, precision bf16): random ids, "
      "forward, fp32 cross-entropy, backward, torch::optim::AdamW, " +
      dtype_name + "; mean of " + std::to_string(speed_options.steps) + " timed steps after " +
      std::to_string(speed_options.warmup) + " warm-up; " + where;
  validation["cases"] = json::array({measured_case});
  doc["validation"] = validation;
  say("  validation: " + v.model + " " + std::to_string(v.micro_batch) + " x " + std::to_string(v.seq_len) + ": " +
      JoinRates({speed->seconds_per_step}) + " s/step");
  return Status::Ok();
}

}  // namespace

StatusOr<json> MeasureKernelProfile(const KernelProfileOptions& given,
                                    const std::function<void(const std::string&)>& progress) {
  MAESTRO_RETURN_IF_ERROR(CheckKernelProfileOptions(given));
  std::string why;
  const bool cuda_usable = CudaUsable(&why);
  std::string device_kind = given.device;
  if (device_kind == "auto") device_kind = cuda_usable ? "cuda" : "cpu";
  if (device_kind == "cuda" && !cuda_usable) {
    return Status::FailedPrecondition("maestro profile --kernels --device cuda: " + why +
                                      "; use --device cpu to profile this machine's CPU");
  }
  const KernelProfileOptions o = DefaultKernelProfileGrid(given, device_kind);
  MAESTRO_RETURN_IF_ERROR(CheckKernelProfileOptions(o));
  const auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };

  const bool gpu = device_kind == "cuda";
  const torch::Device device = gpu ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  const auto dtype = gpu ? torch::kBFloat16 : torch::kFloat32;
  const std::string dtype_name = gpu ? "bf16" : "fp32";
  if (!gpu) torch::set_num_threads(o.threads);
  const auto topts = torch::TensorOptions().dtype(dtype).device(device);

  std::string device_name = o.device_name;
  if (device_name.empty()) {
    device_name = gpu ? NvidiaModelName() : CpuModelName();
    if (device_name.empty()) device_name = "CUDA device 0 (model unknown)";
  }
  const std::string threads_text = gpu ? "" : ", " + std::to_string(o.threads) + " intra-op thread(s)";
  const RuntimeInfo info = GetRuntimeInfo();
  const std::string host = HostName();
  const std::string date = UtcNow(false);
  // Every source ends with where, when and how it was measured.
  const std::string where = o.command + " on " + host + ", " + UtcNow(true) + ", libtorch " + info.torch_version +
                            ", " + device_name + " (" + device.str() + "), " + dtype_name + threads_text;
  const std::string timing = "median of " + std::to_string(o.repeats) + " samples of >= 2 ms after " +
                             std::to_string(o.warmup) + " warm-up call(s)" +
                             (gpu ? ", torch::cuda::synchronize around each sample" : "");
  const OpTimer timer(device, o.warmup, o.repeats);
  say("maestro profile --kernels: " + device_name + " (" + device.str() + "), " + dtype_name + threads_text);

  json doc;
  doc["schema"] = "maestro.device_profile";
  doc["schema_version"] = 1;
  doc["name"] = o.name.empty() ? ProfileNameFrom(gpu ? device_name : "cpu " + device_name) : o.name;
  doc["description"] =
      device_name + ", libtorch " + info.torch_version + " eager, " +
      (gpu ? "pure bf16 (the runtime's GPU precision)" : "fp32 (the runtime trains fp32 on the CPU)" + threads_text) +
      "; measured by " + o.command;
  doc["device"] = device_kind;
  doc["dtype"] = dtype_name;
  doc["source"] = {{"document", o.command + " (measured on this machine)"},
                   {"date", date},
                   {"host", host},
                   {"setup", where + "; " + timing}};

  const ProfileRun run{o, device_kind, gpu, device_name, dtype_name, topts, timing, where, timer, say};
  double best_gemm_tflops = 0;
  std::string best_gemm_at;
  MAESTRO_ASSIGN_OR_RETURN(doc["gemm"], MeasureGemmTable(run, &best_gemm_tflops, &best_gemm_at));
  MAESTRO_ASSIGN_OR_RETURN(doc["attention"], MeasureAttentionTable(run));
  MAESTRO_RETURN_IF_ERROR(MeasureMemoryBandwidth(run, &doc));
  MAESTRO_RETURN_IF_ERROR(MeasureKernelFloor(run, &doc));
  MAESTRO_RETURN_IF_ERROR(MeasureIssueProbe(run, &doc));
  AddPeak(run, best_gemm_tflops, best_gemm_at, &doc);
  MAESTRO_RETURN_IF_ERROR(MeasureValidationStep(run, &doc));
  return doc;
}

Status WriteKernelProfile(const std::string& path, const json& profile) {
  return WriteFileAtomically(path, profile.dump(2) + "\n");
}

}  // namespace maestro::runtime
