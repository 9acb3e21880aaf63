// SPDX-License-Identifier: Apache-2.0
// Audio decoding (libsndfile), resampling (libsoxr) and Whisper's log-mel
// spectrogram (FFTW3). Rules: audio_features.h; docs/data.md, "## Audio".
// May call: base, libsndfile, libsoxr, FFTW3, POSIX (stat).
//
// FFTW's planner is not thread-safe: the one r2c plan of n_fft points is made
// once under a lock and then only executed (fftw_execute_dft_r2c, which is
// thread-safe) on buffers of each call, allocated with fftw_malloc so they
// have the alignment the plan was made for.
#include "datasets/audio_features.h"

#include <fftw3.h>
#include <sndfile.h>
#include <soxr.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/checks.h"

namespace maestro::datasets {
namespace {

constexpr int64_t kReadBlockSamples = int64_t{1} << 18;  // per sf_readf_float call, all channels
constexpr int64_t kReserveFrames = int64_t{1} << 24;     // ~17 min at 16 kHz; longer files grow
constexpr double kMelFloor = 1e-10;
constexpr double kLogRange = 8.0;  // the floor: max(log_spec) - 8
constexpr double kWhisperFmax = 8000.0;

std::string Describe(const std::string& name, const std::string& what) {
  return name + ": " + what;
}

std::string Seconds(double s) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.6g s", s);
  return text;
}

// ---- decoding ---------------------------------------------------------------

struct SndfileCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

// libsndfile accepts a file whose header claims more bytes than the file
// holds and reads what is there, logging the mismatch: "data : CLAIMED
// (should be HAVE)" (WAV), " SSND : ..." (AIFF), "riff : ..." (W64),
// "Riff size : ..." (RF64; also "*** Calculated frame count ... does not
// match"). A claim larger than the file is a truncated copy, except for the
// sizes a streaming writer leaves when it cannot seek back (0, 0x7FFFFFFF,
// 0xFFFFFFFF and their 64-bit kin).
bool TruncationLogLine(const std::string& line) {
  const size_t first = line.find_first_not_of(' ');
  if (first == std::string::npos) return false;
  static const std::string kFrameCountMismatch = "*** Calculated frame count";
  if (line.compare(first, kFrameCountMismatch.size(), kFrameCountMismatch) == 0) return true;
  const size_t should = line.find("(should be");
  const size_t colon = line.find(':');
  if (should == std::string::npos || colon == std::string::npos || colon <= first || colon > should) return false;
  const std::string key = line.substr(first, line.find_last_not_of(' ', colon - 1) + 1 - first);
  if (key != "data" && key != "SSND" && key != "riff" && key != "Riff size") return false;
  const unsigned long long claimed = std::strtoull(line.c_str() + colon + 1, nullptr, 0);
  const unsigned long long have = std::strtoull(line.c_str() + should + 10, nullptr, 0);
  const bool streaming =
      claimed == 0 || claimed == 0x7FFFFFFFULL || claimed == 0xFFFFFFFFULL || claimed >= 0x7FFFFFFFFFFFFFFFULL;
  return claimed > have && !streaming;
}

bool LogSaysTruncated(SNDFILE* file) {
  char log[8192] = {0};
  sf_command(file, SFC_GET_LOG_INFO, log, sizeof(log));
  const std::string text(log);
  size_t line_start = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    if (TruncationLogLine(text.substr(line_start, line_end - line_start))) return true;
    line_start = line_end + 1;
  }
  return false;
}

Status CheckOpenable(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) {
      return Status::NotFound(Describe(path,
                                       "no such audio file; check the path in the manifest (relative paths "
                                       "are relative to the manifest's directory)"));
    }
    return Status::IOError(Describe(path, std::string("cannot open the audio file: ") + std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::IOError(Describe(path, S_ISDIR(st.st_mode) ? "is a directory, not an audio file"
                                                              : "is not a regular file, so not an audio file"));
  }
  if (st.st_size == 0) {
    return Status::InvalidArgument(Describe(path,
                                            "the audio file is empty (0 bytes); replace it or remove it "
                                            "from the manifest"));
  }
  return Status::Ok();
}

Status CheckInfo(const SF_INFO& info, double max_seconds, const std::string& path) {
  if (info.samplerate <= 0 || info.channels <= 0) {
    return Status::InvalidArgument(Describe(path, "audio header gives " + std::to_string(info.samplerate) + " Hz and " +
                                                      std::to_string(info.channels) +
                                                      " channels (a corrupt file); replace the file"));
  }
  if (info.frames <= 0) {
    return Status::InvalidArgument(
        Describe(path, "the audio file holds no samples (0 frames); remove it from the manifest or replace it"));
  }
  const double seconds = static_cast<double>(info.frames) / info.samplerate;
  if (seconds > max_seconds) {
    return Status::InvalidArgument(Describe(path, "audio of " + Seconds(seconds) + " is longer than the limit of " +
                                                      Seconds(max_seconds) +
                                                      "; cut it into shorter clips (Whisper sees 30 s at a time)"));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<DecodedAudio> DecodeAudioFile(const std::string& path, double max_seconds) {
  MAESTRO_RETURN_IF_ERROR(CheckOpenable(path));
  SF_INFO info{};
  SndfilePtr file(sf_open(path.c_str(), SFM_READ, &info));
  if (file == nullptr) {
    return Status::InvalidArgument(Describe(
        path, std::string("not an audio file libsndfile can read (") + sf_strerror(nullptr) +
                  "); use WAV, FLAC, OGG or another format libsndfile decodes, or convert it (e.g. with ffmpeg)"));
  }
  if (LogSaysTruncated(file.get())) {
    return Status::InvalidArgument(Describe(path,
                                            "the audio file ends before its header says its samples do "
                                            "(truncated); replace it with a complete copy"));
  }
  MAESTRO_RETURN_IF_ERROR(CheckInfo(info, max_seconds, path));
  const int64_t frames = info.frames;
  const int64_t channels = info.channels;
  DecodedAudio out;
  out.sample_rate = info.samplerate;
  out.channels = channels;
  // Grown as frames arrive: a header that announces more than the file holds
  // costs no more memory than the file's real samples.
  out.samples.reserve(static_cast<size_t>(std::min(frames, kReserveFrames)));
  const int64_t block_frames = std::max<int64_t>(1, kReadBlockSamples / channels);
  std::vector<float> block(static_cast<size_t>(std::min(frames, block_frames) * channels));
  int64_t done = 0;
  while (done < frames) {
    const int64_t want = std::min(block_frames, frames - done);
    const sf_count_t got = sf_readf_float(file.get(), block.data(), want);
    if (got <= 0) break;
    for (int64_t i = 0; i < got; ++i) {
      if (channels == 1) {
        out.samples.push_back(block[static_cast<size_t>(i)]);
        continue;
      }
      double sum = 0.0;
      for (int64_t c = 0; c < channels; ++c) sum += block[static_cast<size_t>(i * channels + c)];
      out.samples.push_back(static_cast<float>(sum / static_cast<double>(channels)));
    }
    done += got;
  }
  if (done < frames) {
    const std::string why =
        sf_error(file.get()) != SF_ERR_NO_ERROR ? std::string(" (") + sf_strerror(file.get()) + ")" : std::string();
    return Status::InvalidArgument(Describe(
        path, "corrupt or truncated audio file: read " + std::to_string(done) + " of the " + std::to_string(frames) +
                  " frames its header announces" + why + "; replace it with a complete copy"));
  }
  return out;
}

StatusOr<std::vector<float>> ResampleAudio(const std::vector<float>& samples, int64_t from_rate, int64_t to_rate,
                                           const std::string& what) {
  if (from_rate <= 0 || to_rate <= 0) {
    return Status::InvalidArgument(Describe(what, "cannot resample from " + std::to_string(from_rate) + " Hz to " +
                                                      std::to_string(to_rate) + " Hz: both rates must be positive"));
  }
  if (from_rate == to_rate || samples.empty()) return samples;
  const auto n = static_cast<int64_t>(samples.size());
  // round(n * to / from), half up, in integers.
  const int64_t out_len = (2 * n * to_rate + from_rate) / (2 * from_rate);
  std::vector<float> out(static_cast<size_t>(out_len) + 16, 0.0f);
  size_t in_done = 0;
  size_t out_done = 0;
  const soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
  const soxr_quality_spec_t quality = soxr_quality_spec(SOXR_VHQ, 0);
  const soxr_runtime_spec_t runtime = soxr_runtime_spec(1);  // no threads of soxr's own: the caller has them
  const soxr_error_t error =
      soxr_oneshot(static_cast<double>(from_rate), static_cast<double>(to_rate), 1, samples.data(), samples.size(),
                   &in_done, out.data(), out.size(), &out_done, &io, &quality, &runtime);
  if (error != nullptr) {
    return Status::Internal(Describe(what, "resampling from " + std::to_string(from_rate) + " Hz to " +
                                               std::to_string(to_rate) + " Hz failed in libsoxr: " + error));
  }
  out.resize(static_cast<size_t>(out_len), 0.0f);  // soxr's last sample or two may be missing: zeros
  if (out_done < out.size()) std::fill(out.begin() + static_cast<std::ptrdiff_t>(out_done), out.end(), 0.0f);
  return out;
}

namespace {

// ---- log-mel ------------------------------------------------------------------

// Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic
// above (27 mels per factor 6.4).
constexpr double kSlaneyMinLogHz = 1000.0;
constexpr double kSlaneyMinLogMel = 15.0;

double HzToMelSlaney(double hz) {
  if (hz < kSlaneyMinLogHz) return 3.0 * hz / 200.0;
  return kSlaneyMinLogMel + std::log(hz / kSlaneyMinLogHz) * (27.0 / std::log(6.4));
}

double MelToHzSlaney(double mel) {
  if (mel < kSlaneyMinLogMel) return 200.0 * mel / 3.0;
  return kSlaneyMinLogHz * std::exp((std::log(6.4) / 27.0) * (mel - kSlaneyMinLogMel));
}

// Filter m's weights over the rfft bins [begin, end) (zero elsewhere).
struct MelFilter {
  int64_t begin = 0;
  std::vector<double> weights;
};

// transformers' mel_filter_bank(1 + n_fft / 2, mel_bins, 0, 8000, 16000,
// norm="slaney", mel_scale="slaney"): triangles between mel-spaced corner
// frequencies over the bins' frequencies linspace(0, 8000, 201), each scaled
// by 2 / (its upper corner - its lower corner) (equal area).
std::vector<MelFilter> MakeMelFilters(int64_t mel_bins) {
  const int64_t bins = kWhisperNfft / 2 + 1;
  const double mel_min = HzToMelSlaney(0.0);
  const double mel_max = HzToMelSlaney(kWhisperFmax);
  std::vector<double> corners(static_cast<size_t>(mel_bins + 2));
  for (int64_t i = 0; i < mel_bins + 2; ++i) {
    const double mel = mel_min + (mel_max - mel_min) * static_cast<double>(i) / static_cast<double>(mel_bins + 1);
    corners[static_cast<size_t>(i)] = MelToHzSlaney(mel);
  }
  std::vector<MelFilter> filters(static_cast<size_t>(mel_bins));
  for (int64_t m = 0; m < mel_bins; ++m) {
    const double lower = corners[static_cast<size_t>(m)];
    const double centre = corners[static_cast<size_t>(m + 1)];
    const double upper = corners[static_cast<size_t>(m + 2)];
    const double enorm = 2.0 / (upper - lower);
    std::vector<double> row(static_cast<size_t>(bins), 0.0);
    int64_t first = bins;
    int64_t last = -1;
    for (int64_t f = 0; f < bins; ++f) {
      const double hz =
          (static_cast<double>(kWhisperSampleRate) / 2.0) * static_cast<double>(f) / static_cast<double>(bins - 1);
      const double down = (hz - lower) / (centre - lower);
      const double up = (upper - hz) / (upper - centre);
      const double w = std::max(0.0, std::min(down, up)) * enorm;
      row[static_cast<size_t>(f)] = w;
      if (w > 0.0) {
        first = std::min(first, f);
        last = f;
      }
    }
    MelFilter& filter = filters[static_cast<size_t>(m)];
    if (last >= first) {
      filter.begin = first;
      filter.weights.assign(row.begin() + first, row.begin() + last + 1);
    }
  }
  return filters;
}

std::shared_ptr<const std::vector<MelFilter>> MelFiltersFor(int64_t mel_bins) {
  static std::mutex mu;
  static std::map<int64_t, std::shared_ptr<const std::vector<MelFilter>>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[mel_bins];
  if (slot == nullptr) slot = std::make_shared<const std::vector<MelFilter>>(MakeMelFilters(mel_bins));
  return slot;
}

struct FftwFree {
  void operator()(void* p) const { fftw_free(p); }
};
template <typename T>
using FftwBuffer = std::unique_ptr<T[], FftwFree>;

template <typename T>
FftwBuffer<T> FftwAlloc(int64_t n) {
  return FftwBuffer<T>(static_cast<T*>(fftw_malloc(sizeof(T) * static_cast<size_t>(n))));
}

// The r2c plan of n_fft points, made once (FFTW's planner is not thread-safe).
fftw_plan WhisperRfftPlan() {
  static std::mutex mu;
  static fftw_plan plan = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  if (plan == nullptr) {
    FftwBuffer<double> in = FftwAlloc<double>(kWhisperNfft);
    FftwBuffer<fftw_complex> out = FftwAlloc<fftw_complex>(kWhisperNfft / 2 + 1);
    plan = fftw_plan_dft_r2c_1d(static_cast<int>(kWhisperNfft), in.get(), out.get(), FFTW_ESTIMATE);
  }
  return plan;
}

// numpy's np.pad(mode="reflect") index: the signal mirrored about its first
// and last samples (without repeating them), as often as needed.
int64_t ReflectIndex(int64_t i, int64_t n) {
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1);
  int64_t k = i % period;
  if (k < 0) k += period;
  return k < n ? k : period - k;
}

}  // namespace

std::vector<float> WhisperLogMel(const std::vector<float>& samples, const WhisperFeatureSpec& spec) {
  if (spec.mel_bins < 1 || spec.frames < 1) return {};
  const int64_t mel_bins = spec.mel_bins;
  const int64_t frames = spec.frames;
  const int64_t n = frames * kWhisperHop;
  const int64_t half = kWhisperNfft / 2;
  const int64_t bins = kWhisperNfft / 2 + 1;

  // The waveform zero-padded or truncated to n samples, then reflect-padded
  // by n_fft / 2 on each side (center=True).
  std::vector<double> padded(static_cast<size_t>(n + kWhisperNfft), 0.0);
  const int64_t have = std::min<int64_t>(n, static_cast<int64_t>(samples.size()));
  for (int64_t i = 0; i < n + kWhisperNfft; ++i) {
    const int64_t src = ReflectIndex(i - half, n);
    padded[static_cast<size_t>(i)] = src < have ? static_cast<double>(samples[static_cast<size_t>(src)]) : 0.0;
  }
  std::vector<double> window(static_cast<size_t>(kWhisperNfft));
  for (int64_t k = 0; k < kWhisperNfft; ++k) {
    window[static_cast<size_t>(k)] = 0.5 - 0.5 * std::cos(2.0 * M_PI * static_cast<double>(k) / kWhisperNfft);
  }

  const fftw_plan plan = WhisperRfftPlan();
  const std::shared_ptr<const std::vector<MelFilter>> filters = MelFiltersFor(mel_bins);
  FftwBuffer<double> in = FftwAlloc<double>(kWhisperNfft);
  FftwBuffer<fftw_complex> spectrum = FftwAlloc<fftw_complex>(bins);
  std::vector<double> power(static_cast<size_t>(bins));
  std::vector<double> log_mel(static_cast<size_t>(mel_bins * frames));
  double max_log = -std::numeric_limits<double>::infinity();
  // STFT frames 0..frames-1: the extractor computes frames + 1 and drops the last.
  for (int64_t t = 0; t < frames; ++t) {
    const double* frame = padded.data() + t * kWhisperHop;
    for (int64_t k = 0; k < kWhisperNfft; ++k) in[k] = frame[k] * window[static_cast<size_t>(k)];
    fftw_execute_dft_r2c(plan, in.get(), spectrum.get());
    for (int64_t f = 0; f < bins; ++f) {
      power[static_cast<size_t>(f)] = spectrum[f][0] * spectrum[f][0] + spectrum[f][1] * spectrum[f][1];
    }
    for (int64_t m = 0; m < mel_bins; ++m) {
      const MelFilter& filter = (*filters)[static_cast<size_t>(m)];
      double mel = 0.0;
      for (size_t j = 0; j < filter.weights.size(); ++j) {
        mel += filter.weights[j] * power[static_cast<size_t>(filter.begin) + j];
      }
      const double value = std::log10(std::max(mel, kMelFloor));
      log_mel[static_cast<size_t>(m * frames + t)] = value;
      max_log = std::max(max_log, value);
    }
  }
  std::vector<float> out(log_mel.size());
  const double floor = max_log - kLogRange;
  for (size_t i = 0; i < log_mel.size(); ++i) {
    out[i] = static_cast<float>((std::max(log_mel[i], floor) + 4.0) / 4.0);
  }
  return out;
}

StatusOr<std::vector<float>> LoadAudioForWhisper(const std::string& path, const WhisperFeatureSpec& spec) {
  MAESTRO_ASSIGN_OR_RETURN(DecodedAudio audio, DecodeAudioFile(path));
  if (audio.sample_rate != kWhisperSampleRate) {
    MAESTRO_ASSIGN_OR_RETURN(audio.samples, ResampleAudio(audio.samples, audio.sample_rate, kWhisperSampleRate, path));
  }
  return WhisperLogMel(audio.samples, spec);
}

}  // namespace maestro::datasets
