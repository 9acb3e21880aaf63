// SPDX-License-Identifier: Apache-2.0
#include "bench/media_files.h"

#include <png.h>
#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>

namespace maestro::bench {

std::vector<uint8_t> PhotoLike(int seed, int height, int width) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::normal_distribution<double> noise(0.0, 6.0);
  double base[3] = {u(rng) * 255, u(rng) * 255, u(rng) * 255};
  struct Blob {
    double x, y, r, col[3];
  };
  std::vector<Blob> blobs(6);
  for (auto& b : blobs)
    b = {u(rng) * width, u(rng) * height, 40 + u(rng) * 120, {u(rng) * 255, u(rng) * 255, u(rng) * 255}};
  const int rx0 = static_cast<int>(u(rng) * width / 2), ry0 = static_cast<int>(u(rng) * height / 2);
  const int rx1 = rx0 + 60 + static_cast<int>(u(rng) * 150), ry1 = ry0 + 60 + static_cast<int>(u(rng) * 150);
  std::vector<uint8_t> px(static_cast<size_t>(height) * static_cast<size_t>(width) * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      double c[3] = {base[0] * (1 - 0.3 * y / height), base[1], base[2] * (0.7 + 0.3 * x / width)};
      for (const auto& b : blobs) {
        const double d2 = ((x - b.x) * (x - b.x) + (y - b.y) * (y - b.y)) / (b.r * b.r);
        const double w = std::exp(-d2);
        for (int k = 0; k < 3; ++k) c[k] = (1 - w) * c[k] + w * b.col[k];
      }
      const bool in_rect = x >= rx0 && x < rx1 && y >= ry0 && y < ry1;
      const double n = noise(rng);
      for (int k = 0; k < 3; ++k) {
        const double v = (in_rect ? 255 - c[k] : c[k]) + n;
        px[(static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)) * 3 +
           static_cast<size_t>(k)] = static_cast<uint8_t>(std::min(255.0, std::max(0.0, v)));
      }
    }
  }
  return px;
}

void WritePng(const std::string& path, const std::vector<uint8_t>& rgb, int height, int width) {
  if (rgb.size() != static_cast<size_t>(height) * static_cast<size_t>(width) * 3) {
    throw std::runtime_error("WritePng: " + path + ": the pixels are not height x width x 3");
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, f);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < height; ++y) {
    png_write_row(png, rgb.data() + static_cast<size_t>(y) * static_cast<size_t>(width) * 3);
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
}

std::vector<float> SpeechLike(int64_t rate, int64_t channels, double seconds, int seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<double> noise(0.0, 0.003);
  const auto frames = static_cast<int64_t>(seconds * static_cast<double>(rate));
  std::vector<float> out(static_cast<size_t>(frames * channels));
  const double f0 = 100.0 + 150.0 * std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  double phase = 0.0;
  for (int64_t i = 0; i < frames; ++i) {
    const double t = static_cast<double>(i) / static_cast<double>(rate);
    const double pitch = f0 * (1.0 + 0.1 * std::sin(2.0 * M_PI * 0.5 * t));
    phase += 2.0 * M_PI * pitch / static_cast<double>(rate);
    const double envelope = 0.5 + 0.5 * std::sin(2.0 * M_PI * 4.0 * t);
    double v = 0.0;
    for (int h = 1; h <= 12; ++h) v += std::sin(h * phase) / h;
    v = 0.2 * envelope * v;
    for (int64_t c = 0; c < channels; ++c) {
      out[static_cast<size_t>(i * channels + c)] = static_cast<float>(v + noise(rng));
    }
  }
  return out;
}

void WriteAudioClip(const std::string& path, int format, int64_t rate, int64_t channels, double seconds, int seed) {
  SF_INFO info{};
  info.samplerate = static_cast<int>(rate);
  info.channels = static_cast<int>(channels);
  info.format = format;
  SNDFILE* file = sf_open(path.c_str(), SFM_WRITE, &info);
  if (file == nullptr) throw std::runtime_error("cannot write " + path + ": " + sf_strerror(nullptr));
  const std::vector<float> frames = SpeechLike(rate, channels, seconds, seed);
  const auto n = static_cast<sf_count_t>(frames.size()) / channels;
  const sf_count_t written = sf_writef_float(file, frames.data(), n);
  sf_close(file);
  if (written != n) throw std::runtime_error("short write to " + path);
}

}  // namespace maestro::bench
