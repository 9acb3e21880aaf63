// SPDX-License-Identifier: Apache-2.0
// audio: how many user audio files one core turns into a Whisper encoder's
// input.
//   audio_files_featurised_per_s  10 s 16 kHz mono FLAC (LibriSpeech's kind)
//                                 -> decode (libsndfile) -> log-mel (80 x 3000,
//                                 FFTW3) float32; single thread.
//   audio_decode_only_per_s       the baseline in the same run: DecodeAudioFile
//                                 alone on the same files.
//   audio_featurise_overhead      time(decode + log-mel) / time(decode).
//   audio_resampled_files_per_s   10 s 44.1 kHz stereo 16-bit WAV -> decode,
//                                 average, resample to 16 kHz (libsoxr VHQ),
//                                 log-mel; single thread.
// The clips (speech-like: a few harmonics of a gliding pitch under a syllable
// envelope, plus noise) go to $MAESTRO_BENCH_DIR, else $TMPDIR, else /tmp, and
// are removed afterwards. The two sides of the ratio run interleaved (median).
#include <fmt/format.h>
#include <sndfile.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/data_benches.h"
#include "bench/media_files.h"
#include "bench/registry.h"
#include "datasets/audio_features.h"

namespace {

namespace ds = maestro::datasets;
namespace fs = std::filesystem;

constexpr double kClipSeconds = 10.0;

}  // namespace

nlohmann::json maestro::bench::AudioFeaturesBench(const maestro::bench::BenchOptions& options) {
  const fs::path dir = maestro::bench::ScratchDir("audio");
  const int clips = options.quick ? 4 : 20;
  const int wav_clips = options.quick ? 2 : 8;
  std::vector<std::string> flacs;
  std::vector<std::string> wavs;
  for (int i = 0; i < clips; ++i) {
    flacs.push_back((dir / fmt::format("clip{:04d}.flac", i)).string());
    WriteAudioClip(flacs.back(), SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, kClipSeconds, i);
  }
  for (int i = 0; i < wav_clips; ++i) {
    wavs.push_back((dir / fmt::format("clip{:04d}.wav", i)).string());
    WriteAudioClip(wavs.back(), SF_FORMAT_WAV | SF_FORMAT_PCM_16, 44100, 2, kClipSeconds, 1000 + i);
  }

  const ds::WhisperFeatureSpec spec{80, 3000};
  double checksum = 0;  // keeps the work observable
  auto decode_all = [&] {
    for (const auto& p : flacs) {
      auto audio = ds::DecodeAudioFile(p);
      if (!audio.ok()) throw maestro::Error(audio.status());
      checksum += audio->samples[1000];
    }
  };
  auto featurise = [&](const std::vector<std::string>& files) {
    for (const auto& p : files) {
      auto features = ds::LoadAudioForWhisper(p, spec);
      if (!features.ok()) throw maestro::Error(features.status());
      checksum += (*features)[100];
    }
  };
  const int repeats = options.quick ? 1 : 3;
  const std::vector<double> t =
      maestro::bench::InterleavedMedianSeconds({decode_all, [&] { featurise(flacs); }}, repeats);
  const double t_decode = t[0], t_featurise = t[1];
  const double t_wav = maestro::bench::MedianSeconds([&] { featurise(wavs); }, repeats);
  fs::remove_all(dir);

  nlohmann::json out;
  out["audio_files_featurised_per_s"] = clips / t_featurise;
  out["audio_decode_only_per_s"] = clips / t_decode;
  out["audio_featurise_overhead"] = t_featurise / t_decode;
  out["audio_resampled_files_per_s"] = wav_clips / t_wav;
  out["audio_clip_seconds"] = kClipSeconds;
  out["audio_threads"] = 1;  // every audio *_per_s above is one core's
  out["audio_checksum"] = checksum;
  return out;
}

MAESTRO_BENCHMARK(audio, "10 s FLAC/WAV -> Whisper log-mel (80 x 3000) float32 per second per core, vs decode alone") {
  return maestro::bench::AudioFeaturesBench(options);
}
