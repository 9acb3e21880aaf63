// SPDX-License-Identifier: Apache-2.0
// Audio files -> the input of a Whisper-style audio encoder (log-mel
// features), torch-free.
//
// Owns: decoding audio files (WAV, FLAC: whatever libsndfile reads) to mono
// float32 at the file's rate; resampling to the encoder's rate (libsoxr);
// Whisper's log-mel spectrogram (WhisperFeatureExtractor's: periodic Hann
// window of n_fft 400, hop 160, centred frames with reflect padding, power
// spectrum, Slaney-normalised Slaney-scale mel filters from 0 to 8 kHz,
// log10 clamped at 1e-10, floored at the spectrogram's max - 8, then
// (x + 4) / 4; the waveform zero-padded or truncated to frames * hop samples
// first, the last STFT frame dropped). Rules and how they compare with
// Hugging Face's extractor: docs/data.md, "## Audio".
// May call: base, libsndfile, libsoxr, FFTW3 (in the .cc only). Never exits,
// never prints: every failure is a Status naming the file and what is wrong.
// Thread safety: pure functions with per-call state (the FFTW plan is made
// under a lock once per size); any may run on many threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace maestro::datasets {

// Whisper's feature extractor constants (transformers'
// WhisperFeatureExtractor defaults, the same for every Whisper size).
inline constexpr int64_t kWhisperSampleRate = 16000;
inline constexpr int64_t kWhisperNfft = 400;
inline constexpr int64_t kWhisperHop = 160;

// A decoded file: mono samples in [-1, 1] at the file's own rate (a
// multi-channel file's channels averaged, as librosa's mono=True does).
struct DecodedAudio {
  int64_t sample_rate = 0;
  int64_t channels = 0;        // of the file (before averaging)
  std::vector<float> samples;  // (frames of the file)
};

// What the encoder takes: mel_bins (80 for Whisper up to large-v2, 128 for
// large-v3) and the feature frames (3000 = 30 s for Whisper; a model's
// audio_frames).
struct WhisperFeatureSpec {
  int64_t mel_bins = 80;
  int64_t frames = 3000;
};

// Decodes `path` (WAV, FLAC, ...: the format from the file's header, never
// its name). Errors: NotFound (no file), InvalidArgument naming the file
// (not audio libsndfile reads, corrupt, empty, more than max_seconds).
StatusOr<DecodedAudio> DecodeAudioFile(const std::string& path, double max_seconds = 3600.0);

// `samples` at from_rate -> to_rate with libsoxr (very high quality,
// linear phase, its delay compensated: output sample i is time i / to_rate).
// Output length: round(n * to_rate / from_rate). from_rate == to_rate
// returns the input. `what` names the source in errors.
StatusOr<std::vector<float>> ResampleAudio(const std::vector<float>& samples, int64_t from_rate, int64_t to_rate,
                                           const std::string& what);

// Whisper's log-mel features of 16 kHz mono `samples`: (spec.mel_bins,
// spec.frames) row-major float32. REQUIRES: mel_bins >= 1, frames >= 1 (an
// empty vector otherwise).
std::vector<float> WhisperLogMel(const std::vector<float>& samples, const WhisperFeatureSpec& spec);

// DecodeAudioFile, ResampleAudio to 16 kHz, WhisperLogMel: what a manifest's
// audio file becomes. (spec.mel_bins, spec.frames) row-major float32.
StatusOr<std::vector<float>> LoadAudioForWhisper(const std::string& path, const WhisperFeatureSpec& spec);

}  // namespace maestro::datasets
