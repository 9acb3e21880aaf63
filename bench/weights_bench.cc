// SPDX-License-Identifier: Apache-2.0
// weights: a published checkpoint into a section's model, against reading the
// same bytes, measured in the same run.
//   safetensors_load_vs_read        raw read seconds / load seconds (higher is
//                                   better; 1 = the load costs what reading the
//                                   files costs). The load: a bf16 checkpoint
//                                   into an fp32 model (the typical case),
//                                   HfCheckpoint::Open + LoadHfWeights
//                                   (runtime/hf_load_speed.h). Goal >= 0.7.
//   safetensors_load_same_dtype_vs_read  the same into a bf16 model.
//   safetensors_read_gb_per_s       the baseline: read() of every
//                                   .safetensors file, front to back, into one
//                                   reused buffer; its size is the fastest of
//                                   64 KiB .. 1 MiB on this machine
//                                   (safetensors_read_buffer_kib), picked by
//                                   one timed pass of each after the warm-up.
//   safetensors_mmap_copy_vs_read   read seconds / seconds of mapping the
//                                   files and memcpy'ing their bytes into one
//                                   pre-faulted buffer of their size: the
//                                   least any load that puts the bytes in
//                                   memory does, a ceiling for the same-dtype
//                                   ratio (a reused read buffer stays in the
//                                   CPU cache; parameters do not).
//   safetensors_load_vs_read_into_memory (and _same_dtype_): the same loads
//                                   against read() of the files straight into
//                                   one pre-faulted buffer of their size: a raw
//                                   sequential read that, like a load, leaves
//                                   the bytes in memory (both baselines are
//                                   reported; docs/data.md says why).
//   safetensors_load_gb_per_s, safetensors_load_same_dtype_gb_per_s: file
//                                   bytes / load seconds.
// Every side is timed `passes` times after one warm-up pass of each, the
// sides interleaved round by round, and the median reported: the page cache
// holds the files for every timed pass of every side (the warm case: a
// section loading a checkpoint that an earlier run or rank read).
// The checkpoint: a Llama-shaped decoder (16 layers, hidden h, 16 x 64-wide
// heads scaled with h, SwiGLU 3h, vocab 16h, untied) whose bf16 tensors take
// about --weights-mb (default 1000; --quick: 64), one model.safetensors beside
// config.json, written once with random values (uniform in [-0.05, 0.05)) to
// $MAESTRO_BENCH_DIR, else $TMPDIR, else /tmp, and removed afterwards. The
// models are built before the timing (random init is not part of a load).
// `maestro-bench data` runs it; `maestro-bench weights` runs it alone.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/splitmix.h"
#include "base/status.h"
#include "bench/data_benches.h"
#include "bench/registry.h"
#include "hf/checkpoint.h"
#include "hf/name_map.h"
#include "plan/plan.h"
#include "runtime/hf_load_speed.h"
#include "tests/fixtures/models.h"

namespace {

namespace fs = std::filesystem;

// The raw read's buffer sizes tried; the fastest is the baseline.
constexpr size_t kReadBuffers[] = {64 << 10, 128 << 10, 256 << 10, 1 << 20};

template <typename T>
T OrThrow(maestro::StatusOr<T> v) {
  if (!v.ok()) throw maestro::Error(v.status());
  return std::move(*v);
}

// The decoder whose bf16 weights take about `megabytes` MB: 240 h^2
// parameters (16 layers of 13 h^2, embeddings and head of 16 h^2 each),
// h a multiple of 64.
maestro::plan::ModelDesc DecoderOfSize(int64_t megabytes) {
  const double params = static_cast<double>(megabytes) * 1e6 / 2.0;
  const int64_t h = std::max<int64_t>(1, std::llround(std::sqrt(params / 240.0) / 64.0)) * 64;
  maestro::plan::ModelDesc desc = maestro::fixtures::DecoderModel({h, 16, h / 64, h / 64, 3 * h, 16 * h});
  desc.source = "maestro-bench weights";
  return desc;
}

// Round to nearest even, as torch converts fp32 to bf16.
uint16_t Bf16Bits(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Bf16Value(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value = 0;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

// One element of a tensor as the file holds it (bf16 values are exact in
// fp32 and bf16 alike).
struct ProbeValue {
  std::string maestro_name;
  int64_t index = 0;
  double value = 0;
};

// Writes desc's checkpoint to `dir` (bf16, random values); returns one
// element of every tensor, to check the loads with.
std::vector<ProbeValue> WriteCheckpoint(const maestro::plan::ModelDesc& desc, const std::string& dir,
                                        const maestro::hf::WeightNames& names) {
  std::vector<std::string> bytes;
  std::vector<maestro::hf::TensorToWrite> tensors;
  uint64_t rng = 6;
  for (const auto& w : names.weights) {
    int64_t elements = 1;
    for (int64_t d : w.shape) elements *= d;
    std::string b(static_cast<size_t>(elements) * 2, '\0');
    for (int64_t i = 0; i < elements; ++i) {
      const double u = static_cast<double>(maestro::SplitMix64Next(rng) >> 11) * 0x1.0p-53;  // [0, 1)
      const uint16_t v = Bf16Bits(static_cast<float>(0.1 * u - 0.05));
      std::memcpy(b.data() + 2 * i, &v, 2);
    }
    bytes.push_back(std::move(b));
  }
  for (size_t i = 0; i < names.weights.size(); ++i) {
    tensors.push_back({names.weights[i].hf_name, maestro::hf::TensorDType::kBF16, names.weights[i].shape, bytes[i]});
  }
  const nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}},
                                 {"model_type", "llama"},
                                 {"hidden_size", desc.hidden},
                                 {"num_hidden_layers", desc.layers},
                                 {"num_attention_heads", desc.heads},
                                 {"num_key_value_heads", desc.kv_heads},
                                 {"intermediate_size", desc.ffn_hidden},
                                 {"vocab_size", desc.vocab},
                                 {"tie_word_embeddings", desc.tie_embeddings},
                                 {"torch_dtype", "bfloat16"}};
  const maestro::Status written = maestro::hf::WriteHfCheckpoint(dir, config.dump(2), tensors);
  if (!written.ok()) throw maestro::Error(written);
  std::vector<ProbeValue> probes;
  for (size_t i = 0; i < names.weights.size(); ++i) {
    const int64_t index = static_cast<int64_t>(bytes[i].size() / 2) / 3;
    uint16_t bits = 0;
    std::memcpy(&bits, bytes[i].data() + 2 * index, 2);
    probes.push_back({names.weights[i].maestro_name, index, Bf16Value(bits)});
  }
  return probes;
}

// read() of every file, front to back, into `buffer`: each read into its
// start when !keep (the bytes stream through a reused buffer and are never
// kept), or back to back when keep (`buffer` as big as the files: the bytes
// stay in memory, as a load leaves them). Returns the bytes read.
int64_t ReadFiles(const std::vector<std::string>& files, std::vector<char>* buffer, bool keep) {
  int64_t total = 0;
  for (const std::string& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot open " + path);
    for (;;) {
      const size_t at = keep ? static_cast<size_t>(total) : 0;
      const ssize_t got = ::read(fd, buffer->data() + at, std::min<size_t>(buffer->size() - at, size_t{1} << 30));
      if (got < 0) {
        ::close(fd);
        throw std::runtime_error("read failed: " + path);
      }
      if (got == 0) break;
      total += got;
    }
    ::close(fd);
  }
  return total;
}

// Maps every file (as HfCheckpoint does) and copies its bytes to `out`
// (pre-faulted, as big as the files together).
void MapAndCopyFiles(const std::vector<std::string>& files, std::vector<char>* out) {
  size_t at = 0;
  for (const std::string& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot open " + path);
    const size_t size = static_cast<size_t>(fs::file_size(path));
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map == MAP_FAILED) throw std::runtime_error("cannot mmap " + path);
    std::memcpy(out->data() + at, map, size);
    ::munmap(map, size);
    at += size;
  }
}

}  // namespace

nlohmann::json maestro::bench::SafetensorsLoadBench(const maestro::bench::BenchOptions& options) {
  int64_t megabytes = options.quick ? 64 : 1000;
  for (const std::string& a : options.args) {
    if (a.rfind("--weights-mb=", 0) == 0) megabytes = std::max<int64_t>(1, std::atoll(a.c_str() + 13));
  }
  const int passes = options.quick ? 3 : 5;
  const plan::ModelDesc desc = DecoderOfSize(megabytes);
  const hf::WeightNames names = OrThrow(hf::ExpandWeightNames(desc));
  const std::string scratch = ScratchDir("weights");
  const std::string dir = scratch + "/checkpoint";
  const std::vector<ProbeValue> probes = WriteCheckpoint(desc, dir, names);

  std::vector<std::string> files;
  int64_t file_bytes = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    files.push_back(entry.path().string());
    file_bytes += static_cast<int64_t>(entry.file_size());
  }
  std::sort(files.begin(), files.end());

  auto to_fp32 = OrThrow(runtime::HfWeightLoadProbe::Create(desc, "fp32"));
  auto to_bf16 = OrThrow(runtime::HfWeightLoadProbe::Create(desc, "bf16"));
  auto load = [&dir](runtime::HfWeightLoadProbe& probe) {
    const Status s = probe.Load(dir);
    if (!s.ok()) throw Error(s);
  };
  int64_t read_bytes = 0;
  std::vector<char> buffer;
  double fastest = 0;
  size_t read_buffer = 0;
  for (size_t size : kReadBuffers) {
    std::vector<char> b(size);
    const double t = MedianSeconds([&] { read_bytes = ReadFiles(files, &b, /*keep=*/false); }, 1);
    if (read_buffer == 0 || t < fastest) {
      fastest = t;
      read_buffer = size;
    }
  }
  buffer.resize(read_buffer);
  std::vector<char> copy(static_cast<size_t>(file_bytes), 1);  // written: pre-faulted
  int64_t read_into_bytes = 0;
  const std::vector<double> t = InterleavedMedianSeconds(
      {[&] { read_bytes = ReadFiles(files, &buffer, /*keep=*/false); }, [&] { load(*to_fp32); },
       [&] { load(*to_bf16); }, [&] { MapAndCopyFiles(files, &copy); },
       [&] { read_into_bytes = ReadFiles(files, &copy, /*keep=*/true); }},
      passes);
  const double t_read = t[0], t_fp32 = t[1], t_bf16 = t[2], t_copy = t[3], t_read_into = t[4];
  if (read_bytes != file_bytes || read_into_bytes != file_bytes) {
    throw std::runtime_error("the raw read did not read every file's bytes");
  }

  // The loads put the file's values in the parameters.
  for (const ProbeValue& p : probes) {
    const double fp32 = OrThrow(to_fp32->ParameterValue(p.maestro_name, p.index));
    const double bf16 = OrThrow(to_bf16->ParameterValue(p.maestro_name, p.index));
    if (fp32 != p.value || bf16 != p.value) {
      throw std::runtime_error(fmt::format("after the load, '{}'[{}] is {} (fp32) and {} (bf16); the file holds {}",
                                           p.maestro_name, p.index, fp32, bf16, p.value));
    }
  }
  fs::remove_all(scratch);

  const double gb = static_cast<double>(file_bytes) / 1e9;
  nlohmann::json out;
  out["safetensors_load_vs_read"] = t_read / t_fp32;
  out["safetensors_load_same_dtype_vs_read"] = t_read / t_bf16;
  out["safetensors_mmap_copy_vs_read"] = t_read / t_copy;
  out["safetensors_load_vs_read_into_memory"] = t_read_into / t_fp32;
  out["safetensors_load_same_dtype_vs_read_into_memory"] = t_read_into / t_bf16;
  out["safetensors_read_into_memory_gb_per_s"] = gb / t_read_into;
  out["safetensors_read_gb_per_s"] = gb / t_read;
  out["safetensors_read_buffer_kib"] = read_buffer / 1024;
  out["safetensors_load_gb_per_s"] = gb / t_fp32;
  out["safetensors_load_same_dtype_gb_per_s"] = gb / t_bf16;
  out["safetensors_checkpoint_mb"] = static_cast<double>(file_bytes) / 1e6;
  out["safetensors_tensors"] = names.weights.size();
  out["safetensors_params"] = to_fp32->parameter_count();
  out["safetensors_method"] = fmt::format(
      "bf16 checkpoint (one model.safetensors) -> fp32 model (load_vs_read) and bf16 model (same_dtype): "
      "HfCheckpoint::Open + LoadHfWeights vs read() of the file into a reused {} KiB buffer (the fastest of "
      "64 KiB .. 1 MiB here) and (_vs_read_into_memory) read() into one pre-faulted buffer of the files' size; "
      "ratio = read seconds / load seconds (higher is better); median of {} warm passes "
      "of each side, interleaved, after one warm-up pass of each (page cache warm for every side)",
      read_buffer / 1024, passes);
  return out;
}

MAESTRO_BENCHMARK(weights, "a ~1 GB bf16 safetensors checkpoint into a section's model vs read() of the same bytes") {
  return maestro::bench::SafetensorsLoadBench(options);
}
