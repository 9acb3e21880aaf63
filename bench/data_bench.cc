// SPDX-License-Identifier: Apache-2.0
// data: users' models and data in, each against a baseline measured in the
// same run.
//   idx_tokens_per_s     tokens/s reading every "pack" sample (seq_len + 1
//                        tokens as int64) of a uint16 Megatron corpus through
//                        MegatronIndexedDataset + MegatronSamples, Open and
//                        validation included in every timed pass (a fresh
//                        mapping: its page faults count).
//   pread_tokens_per_s   the baseline: pread of the same bytes per sample
//                        into a reused uint16 buffer.
//   idx_read_vs_pread    pread seconds / reader seconds (= idx_tokens_per_s /
//                        pread_tokens_per_s; higher is better). Goal >= 0.8.
//   idx_sample_vs_pread  the same through ReadSample (input_ids + labels).
//   Each side: median of 5 passes, the sides interleaved pass by pass after
//   one warm-up pass of each (page cache warm for both); idx_method says so.
//   images_decoded_per_s, decode_only_per_s, resize_normalize_overhead,
//   png_images_decoded_per_s: image files to a vision tower's input, per
//                        core (bench/image_bench.cc, also `maestro-bench image`).
//   native_images_per_s, native_decode_only_per_s, native_preprocess_overhead,
//   native_mean_tokens: JPEGs of their own size to Qwen2-VL native-resolution
//                        patches, per core (bench/image_bench.cc, also
//                        `maestro-bench native_image`).
//   audio_files_featurised_per_s, audio_decode_only_per_s,
//   audio_featurise_overhead, audio_resampled_files_per_s: audio files to a
//                        Whisper encoder's log-mel input, per core
//                        (bench/audio_bench.cc, also `maestro-bench audio`).
//   safetensors_load_vs_read, safetensors_load_same_dtype_vs_read, ...: a
//                        ~1 GB checkpoint into a section's model vs read() of
//                        the same bytes (bench/weights_bench.cc, also
//                        `maestro-bench weights`).
// Options after `--`: --idx-mb=N (corpus size, default 200; --quick: 16),
// --seq-len=N (default 2048), --weights-mb=N (checkpoint size, default 1000;
// --quick: 64). Files go to $MAESTRO_BENCH_DIR, else $TMPDIR, else /tmp, and
// are removed afterwards.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/splitmix.h"
#include "bench/data_benches.h"
#include "bench/registry.h"
#include "datasets/megatron_indexed.h"

namespace {

namespace fs = std::filesystem;
namespace ds = maestro::datasets;

void OrThrow(const maestro::Status& s) {
  if (!s.ok()) throw maestro::Error(s);
}

// A uint16 corpus of about `megabytes` MB: documents of 1..4096 tokens (mean
// ~2048), ids below 50257 (GPT-2's vocabulary), written in Megatron's format.
void WriteCorpus(const std::string& prefix, int64_t megabytes) {
  auto writer = ds::MegatronIndexedDatasetWriter::Create(prefix, ds::MegatronDType::kUint16).ValueOrDie();
  uint64_t rng = 15;
  const int64_t target_tokens = megabytes * 1000 * 1000 / 2;
  std::vector<int64_t> doc;
  for (int64_t tokens = 0; tokens < target_tokens;) {
    doc.resize(1 + maestro::SplitMix64Next(rng) % 4096);
    for (int64_t& t : doc) t = static_cast<int64_t>(maestro::SplitMix64Next(rng) % 50257);
    OrThrow(writer.AddDocument(doc));
    tokens += static_cast<int64_t>(doc.size());
  }
  OrThrow(writer.Finalize());
}

// Reads every "pack" sample of the corpus at `prefix`; returns a checksum.
int64_t ReadAllSamples(const std::string& prefix, int64_t seq_len, bool as_training_samples) {
  auto corpus = ds::MegatronIndexedDataset::Open(prefix).ValueOrDie();
  ds::MegatronSampleOptions options;
  options.rule = ds::MegatronSampleRule::kPack;
  options.seq_len = seq_len;
  auto samples = ds::MegatronSamples::Build(corpus, options).ValueOrDie();
  int64_t checksum = 0;
  if (as_training_samples) {
    ds::MegatronTokenSample sample;
    for (int64_t k = 0; k < samples.size(); ++k) {
      samples.ReadSample(k, &sample);
      checksum += sample.input_ids[0] + sample.labels.back();
    }
  } else {
    std::vector<int64_t> window(static_cast<size_t>(seq_len) + 1);
    for (int64_t k = 0; k < samples.size(); ++k) {
      samples.ReadWindow(k, window.data());
      checksum += window[0] + window.back();
    }
  }
  return checksum;
}

// The same windows with pread: (seq_len + 1) uint16 at byte 2 * k * seq_len.
int64_t PreadAllSamples(const std::string& bin_path, int64_t samples, int64_t seq_len) {
  const int fd = ::open(bin_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + bin_path);
  std::vector<uint16_t> window(static_cast<size_t>(seq_len) + 1);
  const size_t bytes = window.size() * sizeof(uint16_t);
  int64_t checksum = 0;
  for (int64_t k = 0; k < samples; ++k) {
    const ssize_t got = ::pread(fd, window.data(), bytes, static_cast<off_t>(2 * k * seq_len));
    if (got != static_cast<ssize_t>(bytes)) {
      ::close(fd);
      throw std::runtime_error("short pread of " + bin_path);
    }
    checksum += window[0] + window.back();
  }
  ::close(fd);
  return checksum;
}

// The Megatron corpus figures (the keys above); `maestro-bench data` runs it.
}  // namespace

nlohmann::json maestro::bench::MegatronIdxBench(const maestro::bench::BenchOptions& options) {
  int64_t megabytes = options.quick ? 16 : 200;
  int64_t seq_len = 2048;
  for (const std::string& a : options.args) {
    if (a.rfind("--idx-mb=", 0) == 0) megabytes = std::max<int64_t>(1, std::atoll(a.c_str() + 9));
    if (a.rfind("--seq-len=", 0) == 0) seq_len = std::max<int64_t>(1, std::atoll(a.c_str() + 10));
  }
  const std::string dir = maestro::bench::ScratchDir("data");
  const std::string prefix = dir + "/corpus_text_document";
  WriteCorpus(prefix, megabytes);

  auto corpus = ds::MegatronIndexedDataset::Open(prefix).ValueOrDie();
  ds::MegatronSampleOptions so;
  so.seq_len = seq_len;
  const int64_t samples = ds::MegatronSamples::Build(corpus, so).ValueOrDie().size();
  const double tokens = static_cast<double>(samples) * static_cast<double>(seq_len + 1);

  int64_t sum_idx = 0, sum_sample = 0, sum_pread = 0;
  const int passes = 5;
  const std::vector<double> t =
      maestro::bench::InterleavedMedianSeconds({[&] { sum_pread = PreadAllSamples(prefix + ".bin", samples, seq_len); },
                                                [&] { sum_idx = ReadAllSamples(prefix, seq_len, false); },
                                                [&] { sum_sample = ReadAllSamples(prefix, seq_len, true); }},
                                               passes);
  const double t_pread = t[0], t_idx = t[1], t_sample = t[2];
  const double t_open = maestro::bench::MedianSeconds(
      [&] { (void)ds::MegatronIndexedDataset::Open(prefix).ValueOrDie().total_tokens(); }, passes);
  if (sum_idx != sum_pread) throw std::runtime_error("the reader and pread read different tokens");
  (void)sum_sample;

  nlohmann::json out;
  out["idx_read_vs_pread"] = t_pread / t_idx;
  out["idx_sample_vs_pread"] = t_pread / t_sample;
  out["idx_tokens_per_s"] = tokens / t_idx;
  out["pread_tokens_per_s"] = tokens / t_pread;
  out["idx_open_seconds"] = t_open;
  out["idx_corpus_mb"] = static_cast<double>(fs::file_size(prefix + ".bin")) / 1e6;
  out["idx_documents"] = corpus.document_count();
  out["idx_samples"] = samples;
  out["idx_seq_len"] = seq_len;
  out["idx_method"] = fmt::format(
      "every pack sample of a uint16 corpus as int64 through Open + Build + ReadWindow vs pread of the same bytes "
      "per sample into a reused uint16 buffer; ratio = pread seconds / reader seconds (higher is better); median "
      "of {} passes of each side, interleaved, after one warm-up pass of each (page cache warm for both)",
      passes);
  fs::remove_all(dir);
  return out;
}

MAESTRO_BENCHMARK(
    data,
    "users' models and data in: Megatron .bin/.idx samples vs pread of the same bytes; images (fixed "
    "grid and native resolution) and audio files per core; a ~1 GB safetensors checkpoint into a model vs read()") {
  nlohmann::json out = maestro::bench::MegatronIdxBench(options);
  out.update(maestro::bench::ImageDecodeBench(options));
  out.update(maestro::bench::NativeImageBench(options));
  out.update(maestro::bench::AudioFeaturesBench(options));
  out.update(maestro::bench::SafetensorsLoadBench(options));
  return out;
}
