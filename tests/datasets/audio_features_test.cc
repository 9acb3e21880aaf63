// SPDX-License-Identifier: Apache-2.0
// datasets/audio_features.h on audio files this test writes itself with
// libsndfile's encoder (WAV 16-bit PCM and float, FLAC; 8, 16 and 44.1 kHz;
// mono and stereo) from band-limited signals (tones up to 3 kHz under a
// Hann fade in and out): decoding and channel averaging; soxr's resampling
// against the analytic signal at the new rate (delay compensated, length
// round(n * to / from)); Whisper's log-mel features against an independent
// torch reference (tests/datasets/whisper_features_reference.py: soundfile,
// an ideal FFT resampler, torch.stft, Slaney filters from the formula) at 80
// and 128 mel bins, padded and truncated; the same features from 4 threads at
// once; and every bad file (missing, random bytes, truncated WAV and FLAC, a
// PNG named .wav, no samples, too long, empty) is a Status naming the file.
#include "datasets/audio_features.h"

#include <gtest/gtest.h>
#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/fixtures/python3.h"
#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

// This file's scratch folders: <test-tmp>/maestro-audio-<pid>/<name> (fixtures::ScratchDir).
constexpr char kScratch[] = "maestro-audio-";
constexpr double kFadeSeconds = 0.1;

// ---- band-limited test signals -------------------------------------------------

struct Tone {
  double hz;
  double amplitude;
  double phase;
};

// Two channels' tones, all at most 3.01 kHz: ~0.65 kHz under soxr's passband
// edge for an 8 kHz file (0.913 of its 4 kHz Nyquist, 3.65 kHz). Between that
// edge and 4 kHz a 16-bit file holds only its quantization noise, which the
// ideal resampler keeps and soxr's transition band attenuates; with a tone at
// 3.39 kHz the Hann window's leakage put the mel bins there (~3.7 kHz) just
// above the features' floor (max - 8), where that noise is ~0.2% of their
// energy: 2.6e-4 off the reference. At 3.01 kHz the leakage is ~15 dB lower
// and those bins stay on the floor.
const std::vector<Tone>& Tones(int64_t channel) {
  static const std::vector<Tone> left = {
      {220.0, 0.30, 0.1}, {1250.0, 0.15, 1.3}, {2310.0, 0.08, 2.0}, {3010.0, 0.05, 0.7}};
  static const std::vector<Tone> right = {
      {330.0, 0.25, 0.4}, {870.0, 0.15, 2.2}, {1900.0, 0.10, 0.9}, {2890.0, 0.05, 1.8}};
  return channel == 0 ? left : right;
}

// The continuous signal of `channel` at time t of a clip of `seconds`: the
// tones, each slowly amplitude-modulated (3 Hz), under a Hann fade in and out
// of 0.1 s; zero outside the clip.
double Signal(double t, double seconds, int64_t channel) {
  if (t <= 0.0 || t >= seconds) return 0.0;
  double fade = 1.0;
  if (t < kFadeSeconds) fade = 0.5 - 0.5 * std::cos(M_PI * t / kFadeSeconds);
  if (seconds - t < kFadeSeconds) fade = 0.5 - 0.5 * std::cos(M_PI * (seconds - t) / kFadeSeconds);
  double sum = 0.0;
  for (const Tone& tone : Tones(channel)) {
    const double am = 1.0 + 0.5 * std::sin(2.0 * M_PI * 3.0 * t + tone.phase);
    sum += tone.amplitude * am * std::sin(2.0 * M_PI * tone.hz * t + tone.phase);
  }
  return fade * sum / 1.5;
}

// Interleaved frames of `channels` at `rate` for `seconds`.
std::vector<float> Interleaved(int64_t rate, double seconds, int64_t channels) {
  const auto frames = static_cast<int64_t>(std::llround(seconds * static_cast<double>(rate)));
  std::vector<float> out(static_cast<size_t>(frames * channels));
  for (int64_t i = 0; i < frames; ++i) {
    for (int64_t c = 0; c < channels; ++c) {
      out[static_cast<size_t>(i * channels + c)] =
          static_cast<float>(Signal(static_cast<double>(i) / static_cast<double>(rate), seconds, c));
    }
  }
  return out;
}

// Writes interleaved float frames with libsndfile (`format`: SF_FORMAT_*).
void WriteAudio(const std::string& path, int format, int64_t rate, int64_t channels,
                const std::vector<float>& interleaved) {
  SF_INFO info{};
  info.samplerate = static_cast<int>(rate);
  info.channels = static_cast<int>(channels);
  info.format = format;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(file, nullptr) << path << ": " << sf_strerror(nullptr);
  const auto frames = static_cast<sf_count_t>(interleaved.size()) / channels;
  EXPECT_EQ(sf_writef_float(file, interleaved.data(), frames), frames) << path;
  EXPECT_EQ(sf_close(file), 0) << path;
}

std::string ReadBytes(const std::string& path) {
  return fixtures::ReadFile(path);
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  ASSERT_TRUE(fixtures::WriteFile(path, bytes)) << path;
}

float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float worst = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// ---- decoding -----------------------------------------------------------------

TEST(AudioDecode, AveragesChannelsAtTheFilesRate) {
  const std::string dir = fixtures::ScratchDir(kScratch, "decode");
  const std::vector<float> stereo = Interleaved(44100, 1.0, 2);
  const std::string float_wav = dir + "/stereo_float.wav";
  const std::string pcm_flac = dir + "/stereo_pcm16.flac";
  ASSERT_NO_FATAL_FAILURE(WriteAudio(float_wav, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 44100, 2, stereo));
  ASSERT_NO_FATAL_FAILURE(WriteAudio(pcm_flac, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 44100, 2, stereo));
  for (const auto& [path, tolerance] : {std::pair{float_wav, 1e-7}, std::pair{pcm_flac, 1.0 / 32768.0}}) {
    SCOPED_TRACE(path);
    StatusOr<DecodedAudio> audio = DecodeAudioFile(path);
    ASSERT_TRUE(audio.ok()) << audio.status().ToString();
    EXPECT_EQ(audio->sample_rate, 44100);
    EXPECT_EQ(audio->channels, 2);
    ASSERT_EQ(audio->samples.size(), stereo.size() / 2);
    double worst = 0.0;
    for (size_t i = 0; i < audio->samples.size(); ++i) {
      const double mean = 0.5 * (double{stereo[2 * i]} + double{stereo[2 * i + 1]});
      worst = std::max(worst, std::abs(audio->samples[i] - mean));
    }
    EXPECT_LE(worst, tolerance);
  }
}

void ExpectInvalid(const std::string& path, const std::string& what, double max_seconds = 3600.0) {
  SCOPED_TRACE(what);
  StatusOr<DecodedAudio> audio = DecodeAudioFile(path, max_seconds);
  ASSERT_FALSE(audio.ok());
  EXPECT_EQ(audio.status().code(), StatusCode::kInvalidArgument) << audio.status().ToString();
  EXPECT_NE(audio.status().message().find(path), std::string::npos) << audio.status().ToString();
  if (max_seconds >= 3600.0) {
    EXPECT_FALSE(LoadAudioForWhisper(path, WhisperFeatureSpec{}).ok());
  }
}

TEST(AudioDecode, BadFilesAreStatusesNamingTheFile) {
  const std::string dir = fixtures::ScratchDir(kScratch, "errors");
  const std::vector<float> mono = Interleaved(16000, 2.0, 1);
  const std::string wav = dir + "/good.wav";
  const std::string flac = dir + "/good.flac";
  ASSERT_NO_FATAL_FAILURE(WriteAudio(wav, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, mono));
  ASSERT_NO_FATAL_FAILURE(WriteAudio(flac, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, mono));
  ASSERT_TRUE(DecodeAudioFile(wav).ok());
  ASSERT_TRUE(DecodeAudioFile(flac).ok());

  StatusOr<DecodedAudio> missing = DecodeAudioFile(dir + "/no_such.wav");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(dir + "/no_such.wav"), std::string::npos);
  EXPECT_EQ(LoadAudioForWhisper(dir + "/no_such.wav", WhisperFeatureSpec{}).status().code(), StatusCode::kNotFound);

  std::mt19937 rng(7);
  std::string random_bytes(20000, '\0');
  for (char& c : random_bytes) c = static_cast<char>(rng() & 0xFF);
  ASSERT_NO_FATAL_FAILURE(WriteBytes(dir + "/random.wav", random_bytes));
  ExpectInvalid(dir + "/random.wav", "random bytes");

  const std::string wav_bytes = ReadBytes(wav);
  ASSERT_NO_FATAL_FAILURE(WriteBytes(dir + "/truncated.wav", wav_bytes.substr(0, wav_bytes.size() / 2 + 1)));
  ExpectInvalid(dir + "/truncated.wav", "truncated WAV");
  ASSERT_NO_FATAL_FAILURE(WriteBytes(dir + "/header_only.wav", wav_bytes.substr(0, 44)));
  ExpectInvalid(dir + "/header_only.wav", "a WAV whose samples are all missing");
  // The other containers libsndfile writes whose header holds the length, cut in half.
  for (const auto& [name, format] : {std::pair{"aiff.aiff", SF_FORMAT_AIFF}, std::pair{"w64.w64", SF_FORMAT_W64},
                                     std::pair{"rf64.wav", SF_FORMAT_RF64}, std::pair{"wavex.wav", SF_FORMAT_WAVEX}}) {
    const std::string whole = dir + "/whole_" + name;
    ASSERT_NO_FATAL_FAILURE(WriteAudio(whole, format | SF_FORMAT_PCM_16, 16000, 1, mono));
    StatusOr<DecodedAudio> good = DecodeAudioFile(whole);
    ASSERT_TRUE(good.ok()) << good.status().ToString();
    EXPECT_EQ(good->samples.size(), mono.size());
    const std::string bytes = ReadBytes(whole);
    ASSERT_NO_FATAL_FAILURE(WriteBytes(dir + "/truncated_" + name, bytes.substr(0, bytes.size() / 2)));
    ExpectInvalid(dir + "/truncated_" + name, std::string("truncated ") + name);
  }
  const std::string flac_bytes = ReadBytes(flac);
  ASSERT_NO_FATAL_FAILURE(WriteBytes(dir + "/truncated.flac", flac_bytes.substr(0, flac_bytes.size() / 2)));
  ExpectInvalid(dir + "/truncated.flac", "truncated FLAC");

  // A PNG's signature and IHDR chunk (a 1x1 gray image), named .wav.
  const std::string png("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\0\x01\0\0\0\x01\x08\x00\0\0\0\x3a\x7e\x9b\x55", 33);
  ASSERT_NO_FATAL_FAILURE(WriteBytes(dir + "/image.wav", png + std::string(64, '\0')));
  ExpectInvalid(dir + "/image.wav", "a PNG named .wav");

  ASSERT_NO_FATAL_FAILURE(WriteAudio(dir + "/empty.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, {}));
  ExpectInvalid(dir + "/empty.wav", "a WAV of 0 frames");
  ASSERT_NO_FATAL_FAILURE(WriteBytes(dir + "/zero_bytes.wav", ""));
  ExpectInvalid(dir + "/zero_bytes.wav", "a file of 0 bytes");
  ExpectInvalid(wav, "2 s over a limit of 1.5 s", 1.5);
  EXPECT_TRUE(DecodeAudioFile(wav, 2.5).ok());

  StatusOr<DecodedAudio> directory = DecodeAudioFile(dir);
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find(dir), std::string::npos);
}

// ---- resampling -------------------------------------------------------------------

// soxr's output sample i is the signal at i / to_rate (its filter's delay
// compensated), for a band-limited signal within ~1e-5: checked against the
// same continuous signal sampled at the new rate.
TEST(AudioResample, MatchesTheSignalSampledAtTheNewRate) {
  struct Case {
    int64_t from;
    int64_t to;
  };
  for (const Case& c : {Case{8000, 16000}, Case{44100, 16000}, Case{16000, 44100}, Case{22050, 16000}}) {
    SCOPED_TRACE(std::to_string(c.from) + " -> " + std::to_string(c.to));
    const double seconds = 1.0;
    const std::vector<float> in = Interleaved(c.from, seconds, 1);
    StatusOr<std::vector<float>> out = ResampleAudio(in, c.from, c.to, "test signal");
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const std::vector<float> want = Interleaved(c.to, seconds, 1);
    ASSERT_EQ(out->size(), want.size());
    const float error = MaxAbsDiff(*out, want);
    std::printf("resample %lld -> %lld Hz: max abs error %.3g\n", static_cast<long long>(c.from),
                static_cast<long long>(c.to), static_cast<double>(error));
    EXPECT_LT(error, 1e-4f);
    // One sample of delay would be an error of ~0.05 (the 3 kHz tone alone moves 2 pi 3010 / 16000 a sample).
  }
}

TEST(AudioResample, LengthIsRoundedAndSameRateIsTheInput) {
  const std::vector<float> in(1001, 0.25f);
  EXPECT_EQ(ResampleAudio(in, 44100, 16000, "x")->size(), 363u);   // 363.19
  EXPECT_EQ(ResampleAudio(in, 16000, 44100, "x")->size(), 2759u);  // 2758.76
  EXPECT_EQ(ResampleAudio(in, 8000, 16000, "x")->size(), 2002u);
  EXPECT_EQ(ResampleAudio(std::vector<float>(3, 0.5f), 2, 1, "x")->size(), 2u);  // 1.5 rounds up
  EXPECT_EQ(*ResampleAudio(in, 16000, 16000, "x"), in);
  EXPECT_TRUE(ResampleAudio({}, 44100, 16000, "x")->empty());
  StatusOr<std::vector<float>> bad = ResampleAudio(in, 0, 16000, "clip.wav");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("clip.wav"), std::string::npos);
}

// ---- log-mel ----------------------------------------------------------------------

TEST(WhisperLogMel, SilenceIsTheFloor) {
  const std::vector<float> features = WhisperLogMel(std::vector<float>(1000, 0.0f), {80, 30});
  ASSERT_EQ(features.size(), 80u * 30u);
  for (float v : features) ASSERT_FLOAT_EQ(v, -1.5f);  // (log10(1e-10) + 4) / 4
  // One frame: 160 samples, shorter than the reflect padding of 200 (mirrored again, as numpy's pad does).
  const std::vector<float> one = WhisperLogMel(Interleaved(16000, 0.01, 1), {80, 1});
  ASSERT_EQ(one.size(), 80u);
  for (float v : one) EXPECT_TRUE(std::isfinite(v));
  EXPECT_TRUE(WhisperLogMel(std::vector<float>(1000, 0.5f), {0, 30}).empty());
}

TEST(WhisperLogMel, PadsWithZerosAndTruncatesToFrames) {
  const std::vector<float> clip = Interleaved(16000, 2.0, 1);  // 32000 samples = 200 frames
  const WhisperFeatureSpec shorter{80, 120};                   // truncates to 19200 samples
  const std::vector<float> head(clip.begin(), clip.begin() + 120 * kWhisperHop);
  EXPECT_EQ(WhisperLogMel(clip, shorter), WhisperLogMel(head, shorter));
  const WhisperFeatureSpec longer{128, 300};  // pads to 48000 samples
  std::vector<float> padded = clip;
  padded.resize(300 * kWhisperHop, 0.0f);
  EXPECT_EQ(WhisperLogMel(clip, longer), WhisperLogMel(padded, longer));
  EXPECT_NE(WhisperLogMel(clip, longer), WhisperLogMel(head, longer));  // sanity: the check can fail
}

// ---- against the torch reference --------------------------------------------------

// A file of the reference comparison and how far its features may be from
// the reference's (max abs).
struct FileCase {
  std::string name;
  int format;
  int64_t rate;
  int64_t channels;
  float tolerance;
};

// Within 1e-4 of the reference: every file against the reference that
// resamples with libsoxr as we do; against the ideal resampler, band-limited
// content (float and 24-bit files; 16-bit ones at 16 kHz, not resampled).
constexpr float kTolerance = 1e-4f;
// 16-bit files resampled: their quantization noise is white up to the file's
// Nyquist, not band-limited. Between soxr's passband edge (0.913 of the lower
// Nyquist: 3.65 kHz from 8 kHz, 7.3 kHz to 16 kHz) and the Nyquist the ideal
// resampler keeps that noise and soxr's transition band attenuates it; where a
// mel bin's energy is just above the floor (the faded clip's first and last
// frames, the last frame of a clip cut at 1.5 s, whose reflect padding makes
// a kink) it is a visible part of it: up to 7.2e-4 off (measured). The same
// signals as 24-bit files are within 2.8e-5; against the reference that
// resamples with libsoxr, every file is within 1e-4.
constexpr float kTolerance16BitResampled = 1.5e-3f;

const std::vector<FileCase>& FileCases() {
  static const std::vector<FileCase> cases = {
      {"16k_mono_pcm16.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, kTolerance},
      {"16k_stereo_float.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 2, kTolerance},
      {"16k_stereo_pcm16.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 2, kTolerance},
      {"8k_mono_float.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 8000, 1, kTolerance},
      {"8k_stereo_pcm24.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_24, 8000, 2, kTolerance},
      {"8k_mono_pcm24.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_24, 8000, 1, kTolerance},
      {"8k_stereo_pcm16.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 8000, 2, kTolerance16BitResampled},
      {"8k_mono_pcm16.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 8000, 1, kTolerance16BitResampled},
      {"44k1_mono_float.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 44100, 1, kTolerance},
      {"44k1_stereo_pcm24.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_24, 44100, 2, kTolerance},
      {"44k1_stereo_pcm24.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_24, 44100, 2, kTolerance},
      {"44k1_stereo_pcm16.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 44100, 2, kTolerance16BitResampled},
      {"44k1_mono_pcm16.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 44100, 1, kTolerance16BitResampled},
  };
  return cases;
}

// 2 s clips: whole at every rate. 3000 frames pads them (30 s), 150 cuts them (1.5 s).
constexpr double kClipSeconds = 2.0;
const std::vector<WhisperFeatureSpec>& Specs() {
  static const std::vector<WhisperFeatureSpec> specs = {{80, 3000}, {128, 3000}, {80, 150}, {128, 150}};
  return specs;
}

std::vector<std::string> WriteCaseFiles(const std::string& dir) {
  std::vector<std::string> paths;
  for (const FileCase& c : FileCases()) {
    const std::string path = dir + "/" + c.name;
    WriteAudio(path, c.format, c.rate, c.channels, Interleaved(c.rate, kClipSeconds, c.channels));
    paths.push_back(path);
  }
  return paths;
}

// One comparison: a file at one feature shape against the reference's
// features through one of its resamplers ("ideal" or "soxr", see the script).
struct ReferenceRun {
  size_t file;
  WhisperFeatureSpec spec;
  std::string resampler;
  float tolerance;
  std::string out;
};

// Every file and shape against the ideal resampler at the file's tolerance,
// and every resampled file also against libsoxr's own resampling at 1e-4.
std::vector<ReferenceRun> ReferenceRuns(const std::string& dir) {
  std::vector<ReferenceRun> runs;
  for (size_t f = 0; f < FileCases().size(); ++f) {
    for (const WhisperFeatureSpec& spec : Specs()) {
      const std::string stem =
          dir + "/ref_" + std::to_string(f) + "_" + std::to_string(spec.mel_bins) + "_" + std::to_string(spec.frames);
      runs.push_back({f, spec, "ideal", FileCases()[f].tolerance, stem + "_ideal.f32"});
      if (FileCases()[f].rate != 16000) runs.push_back({f, spec, "soxr", kTolerance, stem + "_soxr.f32"});
    }
  }
  return runs;
}

TEST(WhisperFeatures, MatchTheTorchReference) {
  const std::string dir = fixtures::ScratchDir(kScratch, "reference");
  const std::vector<std::string> paths = WriteCaseFiles(dir);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const std::vector<ReferenceRun> runs = ReferenceRuns(dir);
  std::ofstream cases(dir + "/cases.txt");
  for (const ReferenceRun& run : runs) {
    cases << paths[run.file] << " " << run.spec.mel_bins << " " << run.spec.frames << " " << run.out << " "
          << run.resampler << "\n";
  }
  cases.close();
  const Status ran =
      fixtures::RunPython3WithTorch(std::string(MAESTRO_SOURCE_DIR) + "/tests/datasets/whisper_features_reference.py",
                                    {dir + "/cases.txt"}, dir + "/reference.log");
  ASSERT_TRUE(ran.ok()) << ran.ToString();

  size_t soxr_runs = 0;
  for (const ReferenceRun& run : runs) {
    const FileCase& file = FileCases()[run.file];
    const WhisperFeatureSpec& spec = run.spec;
    SCOPED_TRACE(file.name + " mel_bins " + std::to_string(spec.mel_bins) + " frames " + std::to_string(spec.frames) +
                 " resampler " + run.resampler);
    StatusOr<std::vector<float>> ours = LoadAudioForWhisper(paths[run.file], spec);
    ASSERT_TRUE(ours.ok()) << ours.status().ToString();
    const std::vector<float> want = fixtures::ReadFloatFile(run.out);
    ASSERT_EQ(want.size(), static_cast<size_t>(spec.mel_bins * spec.frames));
    const float error = MaxAbsDiff(*ours, want);
    size_t worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::abs((*ours)[i] - want[i]) == error) worst = i;
    }
    std::printf("%-24s mel %3lld frames %4lld %-5s: max abs error vs torch %.3g (mel bin %lld, frame %lld: %.6f)\n",
                file.name.c_str(), static_cast<long long>(spec.mel_bins), static_cast<long long>(spec.frames),
                run.resampler.c_str(), static_cast<double>(error),
                static_cast<long long>(worst) / static_cast<long long>(spec.frames),
                static_cast<long long>(worst) % static_cast<long long>(spec.frames), static_cast<double>(want[worst]));
    EXPECT_LT(error, run.tolerance);
    soxr_runs += run.resampler == "soxr" ? 1 : 0;
  }
  EXPECT_EQ(soxr_runs, 10 * Specs().size());  // every resampled file, both rates and all three containers
}

// ---- threads ------------------------------------------------------------------------

TEST(WhisperFeatures, FourThreadsAtOnceEqualOne) {
  const std::string dir = fixtures::ScratchDir(kScratch, "threads");
  const std::vector<std::string> paths = WriteCaseFiles(dir);
  ASSERT_FALSE(::testing::Test::HasFailure());
  const WhisperFeatureSpec spec{128, 3000};
  std::vector<std::vector<float>> single;
  for (const std::string& path : paths) {
    StatusOr<std::vector<float>> features = LoadAudioForWhisper(path, spec);
    ASSERT_TRUE(features.ok()) << features.status().ToString();
    single.push_back(*features);
  }
  constexpr int kThreads = 4;
  std::vector<std::vector<std::vector<float>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread starts at another file so that different work overlaps.
      got[static_cast<size_t>(t)].resize(paths.size());
      for (size_t i = 0; i < paths.size(); ++i) {
        const size_t f = (i + static_cast<size_t>(t) * 2) % paths.size();
        StatusOr<std::vector<float>> features = LoadAudioForWhisper(paths[f], spec);
        if (features.ok()) got[static_cast<size_t>(t)][f] = *std::move(features);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    for (size_t f = 0; f < paths.size(); ++f) {
      EXPECT_EQ(got[static_cast<size_t>(t)][f], single[f]) << "thread " << t << ", " << paths[f];
    }
  }
}

}  // namespace
}  // namespace maestro::datasets
