// SPDX-License-Identifier: Apache-2.0
// image: how many user images one core turns into a vision tower's input.
//   images_decoded_per_s         448x448 JPEG file -> decode (libjpeg-turbo)
//                                -> resize to 224x224 (antialiased bilinear)
//                                -> normalise (CLIP mean/std) -> float32
//                                (3, 224, 224); single thread.
//   decode_only_per_s            the baseline in the same run: read + decode
//                                alone (uint8 HWC).
//   resize_normalize_overhead    time(decode + resize + normalise) /
//                                time(decode): what the resize costs on top.
//   png_images_decoded_per_s     the same pipeline on 448x448 RGB PNGs.
// native_image: the Qwen2-VL family's native resolution (datasets/native_image.h).
//   native_images_per_s          JPEG file of its own size (640x480,
//                                1024x768, 1280x720, 448x448, 800x1200 in
//                                turn) -> decode -> smart_resize -> resize
//                                (antialiased bilinear) -> normalise ->
//                                patches in HF's order; single thread.
//   native_decode_only_per_s     the baseline in the same run: read + decode
//                                of the same files alone.
//   native_preprocess_overhead   time(decode + preprocess) / time(decode).
//   native_mean_tokens           LLM placeholder tokens per image (merge 2).
// The images (200 JPEGs, quality 90, 4:2:0, like camera/web photos: smooth
// shading, texture noise and hard edges) go to $MAESTRO_BENCH_DIR, else
// $TMPDIR, else /tmp, and are removed afterwards.
#include <fmt/format.h>
#include <jpeglib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/data_benches.h"
#include "bench/media_files.h"
#include "bench/registry.h"
#include "datasets/image_decode.h"
#include "datasets/native_image.h"

namespace {

namespace ds = maestro::datasets;
namespace fs = std::filesystem;

constexpr int kSide = 448;

void WriteJpeg(const std::string& path, std::vector<uint8_t> px, int height, int width) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot write " + path);
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr err{};
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 90, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = px.data() + static_cast<size_t>(cinfo.next_scanline) * static_cast<size_t>(width) * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
}

}  // namespace

nlohmann::json maestro::bench::ImageDecodeBench(const maestro::bench::BenchOptions& options) {
  const fs::path dir = maestro::bench::ScratchDir("image");
  const int images = options.quick ? 40 : 200;
  const int png_images = options.quick ? 10 : 50;
  std::vector<std::string> jpegs;
  std::vector<std::string> pngs;
  double jpeg_bytes = 0;
  for (int i = 0; i < images; ++i) {
    jpegs.push_back((dir / fmt::format("img{:04d}.jpg", i)).string());
    WriteJpeg(jpegs.back(), PhotoLike(i, kSide, kSide), kSide, kSide);
    jpeg_bytes += static_cast<double>(fs::file_size(jpegs.back()));
  }
  for (int i = 0; i < png_images; ++i) {
    pngs.push_back((dir / fmt::format("img{:04d}.png", i)).string());
    WritePng(pngs.back(), PhotoLike(1000 + i, kSide, kSide), kSide, kSide);
  }

  ds::ImageSpec spec;
  spec.height = 224;
  spec.width = 224;
  spec.mean = ds::kOpenAiClipMean;
  spec.std = ds::kOpenAiClipStd;
  double checksum = 0;  // keeps the work observable
  auto decode_all = [&] {
    for (const auto& p : jpegs) {
      auto img = ds::DecodeImageFile(p);
      if (!img.ok()) throw maestro::Error(img.status());
      checksum += img->pixels[0];
    }
  };
  auto pipeline = [&](const std::vector<std::string>& files) {
    for (const auto& p : files) {
      auto chw = ds::LoadImageForModel(p, spec);
      if (!chw.ok()) throw maestro::Error(chw.status());
      checksum += (*chw)[0];
    }
  };
  const int repeats = options.quick ? 1 : 3;
  const double t_decode = maestro::bench::MedianSeconds(decode_all, repeats);
  const double t_pipeline = maestro::bench::MedianSeconds([&] { pipeline(jpegs); }, repeats);
  const double t_png = maestro::bench::MedianSeconds([&] { pipeline(pngs); }, repeats);
  fs::remove_all(dir);

  nlohmann::json out;
  out["images_decoded_per_s"] = images / t_pipeline;
  out["decode_only_per_s"] = images / t_decode;
  out["resize_normalize_overhead"] = t_pipeline / t_decode;
  out["png_images_decoded_per_s"] = png_images / t_png;
  out["images"] = images;
  out["image_threads"] = 1;  // every *_per_s above is one core's
  out["mean_jpeg_bytes"] = jpeg_bytes / images;
  out["checksum"] = checksum;
  return out;
}

nlohmann::json maestro::bench::NativeImageBench(const maestro::bench::BenchOptions& options) {
  const fs::path dir = maestro::bench::ScratchDir("native_image");
  const int images = options.quick ? 20 : 100;
  constexpr int kSizes[][2] = {{480, 640}, {768, 1024}, {720, 1280}, {448, 448}, {1200, 800}};  // (h, w)
  std::vector<std::string> files;
  for (int i = 0; i < images; ++i) {
    const int h = kSizes[i % 5][0];
    const int w = kSizes[i % 5][1];
    files.push_back((dir / fmt::format("native{:04d}.jpg", i)).string());
    WriteJpeg(files.back(), PhotoLike(2000 + i, h, w), h, w);
  }
  const ds::NativeVisionOptions native;  // Qwen2-VL's processor defaults
  double checksum = 0;
  double tokens = 0;
  auto decode_all = [&] {
    for (const auto& p : files) {
      auto img = ds::DecodeImageFile(p);
      if (!img.ok()) throw maestro::Error(img.status());
      checksum += img->pixels[0];
    }
  };
  auto preprocess_all = [&] {
    tokens = 0;
    for (const auto& p : files) {
      auto img = ds::DecodeImageFile(p);
      if (!img.ok()) throw maestro::Error(img.status());
      auto patches = ds::PreprocessNativeImage(*img, native);
      if (!patches.ok()) throw maestro::Error(patches.status());
      checksum += patches->pixels[0];
      tokens +=
          static_cast<double>(patches->grid_t * patches->grid_h * patches->grid_w / (native.merge * native.merge));
    }
  };
  const int repeats = options.quick ? 1 : 3;
  const std::vector<double> t = maestro::bench::InterleavedMedianSeconds({decode_all, preprocess_all}, repeats);
  fs::remove_all(dir);

  nlohmann::json out;
  out["native_images_per_s"] = images / t[1];
  out["native_decode_only_per_s"] = images / t[0];
  out["native_preprocess_overhead"] = t[1] / t[0];
  out["native_mean_tokens"] = tokens / images;
  out["native_images"] = images;
  out["native_method"] = fmt::format(
      "JPEGs of 640x480, 1024x768, 1280x720, 448x448 and 800x1200 (quality 90) through DecodeImageFile + "
      "PreprocessNativeImage (smart_resize with Qwen2-VL's defaults, antialiased bilinear resize, normalise, HF's "
      "patch order) vs DecodeImageFile alone; one thread; median of {} passes of each side, interleaved, after one "
      "warm-up pass of each",
      repeats);
  out["checksum_native"] = checksum;
  return out;
}

MAESTRO_BENCHMARK(native_image,
                  "JPEGs of their own size -> Qwen2-VL native-resolution patches per second per core, vs decode "
                  "alone") {
  return maestro::bench::NativeImageBench(options);
}

MAESTRO_BENCHMARK(image, "448x448 JPEG -> (3, 224, 224) float32 per second per core, vs decode alone") {
  return maestro::bench::ImageDecodeBench(options);
}
