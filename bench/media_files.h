// SPDX-License-Identifier: Apache-2.0
// Media files the benchmarks write for themselves: photo-like RGB pictures
// as PNG (libpng) and speech-like clips as WAV or FLAC (libsndfile), so that
// a benchmark needs no data set. Used by maestro-bench image and
// native_image (image_bench.cc), audio (audio_bench.cc) and mix
// (mix_bench.cc).
// Owns: PhotoLike, WritePng, SpeechLike, WriteAudioClip.
// May call: libpng, libsndfile. Thread safety: pure functions (each writes
// its own file); they throw std::runtime_error when a file cannot be written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace maestro::bench {

// A photo-like picture of (height, width), RGB interleaved row by row: a
// few shaded blobs, a hard-edged rectangle, noise; a pure function of `seed`.
std::vector<uint8_t> PhotoLike(int seed, int height, int width);

// `rgb` (height x width x 3, row by row) as an 8-bit RGB PNG at `path`.
void WritePng(const std::string& path, const std::vector<uint8_t>& rgb, int height, int width);

// Interleaved frames of a speech-like clip of `seconds` at `rate`: harmonics
// of a 100-250 Hz pitch that glides, a 4 Hz syllable envelope, a little
// noise; a pure function of `seed`.
std::vector<float> SpeechLike(int64_t rate, int64_t channels, double seconds, int seed);

// SpeechLike(rate, channels, seconds, seed) written to `path` in libsndfile's
// `format` (e.g. SF_FORMAT_WAV | SF_FORMAT_PCM_16).
void WriteAudioClip(const std::string& path, int format, int64_t rate, int64_t channels, double seconds, int seed);

}  // namespace maestro::bench
