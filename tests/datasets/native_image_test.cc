// SPDX-License-Identifier: Apache-2.0
// Native-resolution images and videos (datasets/native_image.h): SmartResize
// against transformers' smart_resize and the patches against
// Qwen2VLImageProcessor's layout, both from an independent Python reference
// (native_image_reference.py: python3, numpy, torch's antialiased bilinear
// resize), over ties, clamps, odd and non-square sizes, gray input, other
// patch sizes and videos with an odd frame count; ReadImageSize on headers
// (also one pushed past the first 64 KiB); every refusal.
#include "datasets/native_image.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "datasets/image_decode.h"
#include "tests/fixtures/image_files.h"
#include "tests/fixtures/python3.h"
#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

constexpr char kScratch[] = "maestro-native-image-";

std::string Reference() {
  return std::string(MAESTRO_SOURCE_DIR) + "/tests/datasets/native_image_reference.py";
}

// A deterministic pattern with edges and gradients, (h, w, c) uint8.
DecodedImage Pattern(int height, int width, int channels, int seed) {
  DecodedImage image;
  image.height = height;
  image.width = width;
  image.channels = channels;
  image.pixels.resize(static_cast<size_t>(height) * width * channels);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c) {
        const int v = (13 * y * y + 29 * x + 101 * c + 7 * x * y + seed) % 256;
        image.pixels[(static_cast<size_t>(y) * width + x) * channels + c] = static_cast<uint8_t>(v);
      }
    }
  }
  return image;
}

// ---- SmartResize ----------------------------------------------------------------

struct ResizeCase {
  int64_t h, w, factor, min_pixels, max_pixels;
};

const std::vector<ResizeCase>& ResizeCases() {
  constexpr int64_t kMin = 56 * 56;
  constexpr int64_t kMax = 28 * 28 * 1280;
  static const std::vector<ResizeCase> cases = {
      {70, 700, 28, kMin, kMax},              // 70 / 28 = 2.5 -> 2 (half to even)
      {98, 700, 28, kMin, kMax},              // 3.5 -> 4
      {126, 42, 28, kMin, kMax},              // 4.5 -> 4, 1.5 -> 2
      {210, 154, 28, kMin, kMax},             // 7.5 -> 8, 5.5 -> 6
      {14, 14, 28, kMin, kMax},               // 0.5 -> 0: the min clamp
      {1, 1, 28, kMin, kMax},                 // tiny
      {3, 500, 28, kMin, kMax},               // thin, aspect < 200
      {37, 53, 28, kMin, kMax},               // min clamp, non-square
      {224, 224, 28, kMin, kMax},             // exact
      {480, 640, 28, kMin, kMax},             // VGA: no clamp
      {1080, 1920, 28, kMin, kMax},           // full HD: max clamp
      {3000, 4000, 28, kMin, kMax},           // 12 Mpx
      {8192, 8192, 28, kMin, kMax},           // huge
      {8192, 41, 28, kMin, kMax},             // aspect just under 200
      {41, 8200, 28, kMin, kMax},             // aspect exactly 200: allowed
      {40, 8200, 28, kMin, kMax},             // aspect 205: refused
      {1, 201, 28, kMin, kMax},               // aspect 201: refused
      {517, 383, 28, kMin, 28 * 28 * 64},     // a small budget
      {90, 77, 32, kMin, kMax},               // another factor
      {1000, 1000, 28, 512 * 28 * 28, kMax},  // a large minimum
      {999, 333, 28, kMin, 28 * 28 * 4},      // a tiny maximum: floor, then max(factor, .)
      {5000, 30, 28, kMin, 28 * 28 * 4},      // floor of the short side hits the factor
  };
  return cases;
}

TEST(SmartResize, HalvesRoundToEvenAsPython) {
  // Worked by hand: Python's round(2.5) = 2, round(3.5) = 4.
  auto a = SmartResize(70, 700, 28, 56 * 56, 28 * 28 * 1280);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->first, 56);
  EXPECT_EQ(a->second, 700);
  auto b = SmartResize(98, 700, 28, 56 * 56, 28 * 28 * 1280);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->first, 112);
  // 14 / 28 = 0.5 -> 0, so 0 < min_pixels: beta = sqrt(3136 / 196) = 4,
  // ceil(14 * 4 / 28) * 28 = 56.
  auto c = SmartResize(14, 14, 28, 56 * 56, 28 * 28 * 1280);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, std::make_pair(int64_t{56}, int64_t{56}));
}

TEST(SmartResize, MatchesTransformersSmartResize) {
  const std::string dir = fixtures::ScratchDir(kScratch, "resize");
  const std::string out = dir + "/resize.txt";
  {
    std::ofstream cases(dir + "/cases.txt");
    for (const ResizeCase& c : ResizeCases()) {
      cases << "resize " << c.h << " " << c.w << " " << c.factor << " " << c.min_pixels << " " << c.max_pixels << " "
            << out << "\n";
    }
  }
  const Status ran = fixtures::RunPython3WithTorch(Reference(), {dir + "/cases.txt"}, dir + "/reference.log");
  ASSERT_TRUE(ran.ok()) << ran.ToString();
  std::istringstream want(fixtures::ReadFile(out));
  int refused = 0;
  for (const ResizeCase& c : ResizeCases()) {
    SCOPED_TRACE(std::to_string(c.h) + "x" + std::to_string(c.w) + " factor " + std::to_string(c.factor));
    std::string line;
    ASSERT_TRUE(std::getline(want, line));
    const auto got = SmartResize(c.h, c.w, c.factor, c.min_pixels, c.max_pixels);
    if (line.rfind("error ", 0) == 0) {
      ASSERT_FALSE(got.ok()) << "python refused: " << line;
      EXPECT_NE(got.status().message().find("absolute aspect ratio must be smaller than 200, got"), std::string::npos)
          << got.status().ToString();
      ++refused;
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.status().ToString() << " (python: " << line << ")";
    std::istringstream words(line);
    int64_t h_bar = 0;
    int64_t w_bar = 0;
    words >> h_bar >> w_bar;
    EXPECT_EQ(got->first, h_bar);
    EXPECT_EQ(got->second, w_bar);
    EXPECT_EQ(got->first % c.factor, 0);
    EXPECT_EQ(got->second % c.factor, 0);
  }
  EXPECT_EQ(refused, 2);  // the table holds two aspect ratios over 200
}

TEST(SmartResize, RefusesBadArguments) {
  EXPECT_FALSE(SmartResize(0, 10, 28, 1, 100).ok());
  EXPECT_FALSE(SmartResize(10, -1, 28, 1, 100).ok());
  EXPECT_FALSE(SmartResize(10, 10, 0, 1, 100).ok());
  EXPECT_FALSE(SmartResize(10, 10, 28, 0, 100).ok());
  const auto aspect = SmartResize(1, 201, 28, 56 * 56, 28 * 28 * 1280);
  ASSERT_FALSE(aspect.ok());
  EXPECT_EQ(aspect.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(aspect.status().message().find("got 201"), std::string::npos) << aspect.status().ToString();
}

TEST(NativeGrid, ImageAndVideoGridsAndTokens) {
  const NativeVisionOptions o;
  auto image = NativeImageGrid(480, 640, o);  // smart_resize -> 476 x 644
  ASSERT_TRUE(image.ok()) << image.status().ToString();
  EXPECT_EQ(image->t, 1);
  EXPECT_EQ(image->h, 34);
  EXPECT_EQ(image->w, 46);
  EXPECT_EQ(image->patches(), 34 * 46);
  EXPECT_EQ(image->tokens(2), 17 * 23);
  auto video = NativeVideoGrid(5, 480, 640, o);
  ASSERT_TRUE(video.ok());
  EXPECT_EQ(video->t, 3);  // ceil(5 / 2)
  EXPECT_EQ(video->tokens(2), 3 * 17 * 23);
  EXPECT_FALSE(NativeVideoGrid(0, 480, 640, o).ok());
  EXPECT_FALSE(NativeImageGrid(1, 300, o).ok());  // aspect 300
}

TEST(NativeVisionOptionsTest, RefusesBadFields) {
  EXPECT_TRUE(ValidateNativeVisionOptions({}).ok());
  const auto refused = [](NativeVisionOptions o, const char* field) {
    const Status s = ValidateNativeVisionOptions(o);
    EXPECT_FALSE(s.ok()) << field;
    EXPECT_NE(s.message().find(field), std::string::npos) << s.ToString();
  };
  NativeVisionOptions o;
  o.patch = 0;
  refused(o, "patch");
  o = {};
  o.merge = 0;
  refused(o, "merge");
  o = {};
  o.temporal = 65;
  refused(o, "temporal");
  o = {};
  o.min_pixels = 100;
  o.max_pixels = 99;
  refused(o, "max_pixels");
  o = {};
  o.channels = 2;
  refused(o, "channels");
  o = {};
  o.std[1] = 0;
  refused(o, "std");
}

// ---- patches against the reference ------------------------------------------------

struct PatchCase {
  std::string name;
  NativeVisionOptions options;
  std::vector<DecodedImage> frames;  // one: an image; more: a video
};

NativeVisionOptions Options(int patch, int temporal, int64_t max_pixels, int channels = 3) {
  NativeVisionOptions o;
  o.patch = patch;
  o.temporal = temporal;
  o.max_pixels = max_pixels;
  o.channels = channels;
  return o;
}

std::vector<PatchCase> PatchCases() {
  constexpr int64_t kMax = 28 * 28 * 1280;
  return {
      {"37x53 rgb (min clamp, upscale)", Options(14, 2, kMax), {Pattern(37, 53, 3, 1)}},
      {"100x61 gray into rgb", Options(14, 2, kMax), {Pattern(100, 61, 1, 2)}},
      {"29x300 rgb (thin)", Options(14, 2, kMax), {Pattern(29, 300, 3, 3)}},
      {"517x383 rgb (max clamp, downscale)", Options(14, 2, 28 * 28 * 64), {Pattern(517, 383, 3, 4)}},
      {"70x126 rgb (ties)", Options(14, 2, kMax), {Pattern(70, 126, 3, 5)}},
      {"45x90 rgb into 1 channel", Options(14, 2, kMax, 1), {Pattern(45, 90, 3, 6)}},
      {"90x77 patch 16 temporal 3", Options(16, 3, kMax), {Pattern(90, 77, 3, 7)}},
      {"video of 5 frames 45x70 (padded to 6)",
       Options(14, 2, kMax),
       {Pattern(45, 70, 3, 10), Pattern(45, 70, 3, 20), Pattern(45, 70, 3, 30), Pattern(45, 70, 3, 40),
        Pattern(45, 70, 3, 50)}},
      {"video of 3 frames of different sizes",
       Options(14, 2, 28 * 28 * 16),
       {Pattern(60, 80, 3, 11), Pattern(40, 50, 1, 12), Pattern(90, 100, 3, 13)}},
  };
}

TEST(NativePatches, MatchQwen2VLImageProcessorLayout) {
  const std::string dir = fixtures::ScratchDir(kScratch, "patches");
  const std::vector<PatchCase> cases = PatchCases();
  {
    std::ofstream lines(dir + "/cases.txt");
    for (size_t i = 0; i < cases.size(); ++i) {
      const NativeVisionOptions& o = cases[i].options;
      lines << "patches " << o.patch << " " << o.merge << " " << o.temporal << " " << o.min_pixels << " "
            << o.max_pixels << " " << o.channels << " " << dir << "/out" << i << ".f32";
      for (size_t f = 0; f < cases[i].frames.size(); ++f) {
        const DecodedImage& frame = cases[i].frames[f];
        const std::string raw = dir + "/in" + std::to_string(i) + "_" + std::to_string(f) + ".u8";
        ASSERT_TRUE(fixtures::WriteFile(raw, std::string(frame.pixels.begin(), frame.pixels.end())));
        lines << " " << frame.height << "," << frame.width << "," << frame.channels << "," << raw;
      }
      lines << "\n";
    }
  }
  const Status ran = fixtures::RunPython3WithTorch(Reference(), {dir + "/cases.txt"}, dir + "/reference.log");
  ASSERT_TRUE(ran.ok()) << ran.ToString();
  for (size_t i = 0; i < cases.size(); ++i) {
    const PatchCase& c = cases[i];
    SCOPED_TRACE(c.name);
    const bool video = c.frames.size() > 1;
    StatusOr<SampleImage> got =
        video ? PreprocessNativeVideo(c.frames, 2.0, c.options) : PreprocessNativeImage(c.frames[0], c.options);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    const std::vector<float> want = fixtures::ReadFloatFile(dir + "/out" + std::to_string(i) + ".f32");
    const NativeVisionOptions& o = c.options;
    auto size = SmartResize(c.frames[0].height, c.frames[0].width, o.factor(), o.min_pixels, o.max_pixels);
    ASSERT_TRUE(size.ok());
    const int64_t frames = static_cast<int64_t>(c.frames.size());
    EXPECT_EQ(got->height, size->first);
    EXPECT_EQ(got->width, size->second);
    EXPECT_EQ(got->channels, o.channels);
    EXPECT_EQ(got->grid_t, (frames + o.temporal - 1) / o.temporal);
    EXPECT_EQ(got->grid_h, size->first / o.patch);
    EXPECT_EQ(got->grid_w, size->second / o.patch);
    EXPECT_EQ(got->patch_dim, int64_t{o.channels} * o.temporal * o.patch * o.patch);
    EXPECT_EQ(got->video, video);
    EXPECT_DOUBLE_EQ(got->seconds_per_grid_t, video ? o.temporal / 2.0 : 0.0);
    EXPECT_TRUE(got->native());
    ASSERT_EQ(got->pixels.size(), want.size());
    ASSERT_EQ(want.size(), static_cast<size_t>(got->grid_t * got->grid_h * got->grid_w * got->patch_dim));
    float worst = 0;
    for (size_t k = 0; k < want.size(); ++k) worst = std::max(worst, std::abs(got->pixels[k] - want[k]));
    std::printf("%-40s %3lldx%-3lld grid %lldx%lldx%lld: max abs error vs python %.3g\n", c.name.c_str(),
                static_cast<long long>(got->height), static_cast<long long>(got->width),
                static_cast<long long>(got->grid_t), static_cast<long long>(got->grid_h),
                static_cast<long long>(got->grid_w), static_cast<double>(worst));
    EXPECT_LT(worst, 1e-5f);
  }
}

TEST(NativePatches, ASingleFrameVideoIsTheImage) {
  const DecodedImage frame = Pattern(50, 66, 3, 9);
  auto image = PreprocessNativeImage(frame, {});
  auto video = PreprocessNativeVideo({frame}, 4.0, {});
  ASSERT_TRUE(image.ok() && video.ok());
  EXPECT_EQ(image->pixels, video->pixels);
  EXPECT_TRUE(video->video);
  EXPECT_DOUBLE_EQ(video->seconds_per_grid_t, 0.5);
}

TEST(NativePatches, RefusesBadVideosAndFrames) {
  const DecodedImage frame = Pattern(30, 30, 3, 0);
  EXPECT_NE(PreprocessNativeVideo({}, 2.0, {}).status().message().find("at least 1 frame"), std::string::npos);
  for (double fps : {0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    const auto s = PreprocessNativeVideo({frame}, fps, {});
    ASSERT_FALSE(s.ok()) << fps;
    EXPECT_NE(s.status().message().find("fps"), std::string::npos) << s.status().ToString();
  }
  DecodedImage empty;
  EXPECT_FALSE(PreprocessNativeImage(empty, {}).ok());
  NativeVisionOptions bad;
  bad.merge = 0;
  EXPECT_FALSE(PreprocessNativeImage(frame, bad).ok());
  EXPECT_FALSE(PreprocessNativeImage(Pattern(1, 250, 3, 0), {}).ok());  // aspect 250
}

// ---- ReadImageSize ----------------------------------------------------------------

TEST(ReadImageSizeTest, ReadsPngAndJpegHeaders) {
  const std::string dir = fixtures::ScratchDir(kScratch, "size");
  const DecodedImage p = Pattern(37, 53, 3, 0);
  ASSERT_TRUE(testing::WriteBytes(dir + "/a.png", testing::EncodePng8(p.pixels, 37, 53, 3)));
  ASSERT_TRUE(testing::WriteBytes(dir + "/a.jpg", testing::EncodeJpeg8(p.pixels, 37, 53, 3)));
  for (const char* name : {"/a.png", "/a.jpg"}) {
    auto size = ReadImageSize(dir + name);
    ASSERT_TRUE(size.ok()) << size.status().ToString();
    EXPECT_EQ(*size, std::make_pair(37, 53)) << name;
  }
  // Two 64 KiB comment segments push the JPEG's SOF past the first 64 KiB read.
  std::string jpeg = testing::EncodeJpeg8(p.pixels, 37, 53, 3);
  std::string comment("\xFF\xFE\xFF\xFF", 4);
  comment += std::string(0xFFFF - 2, 'x');
  jpeg.insert(2, comment + comment);
  ASSERT_TRUE(testing::WriteBytes(dir + "/big_header.jpg", jpeg));
  auto far = ReadImageSize(dir + "/big_header.jpg");
  ASSERT_TRUE(far.ok()) << far.status().ToString();
  EXPECT_EQ(*far, std::make_pair(37, 53));
  auto decoded = DecodeImageFile(dir + "/big_header.jpg");
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();

  EXPECT_EQ(ReadImageSize(dir + "/missing.png").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(testing::WriteBytes(dir + "/gif.png", "GIF89a......"));
  EXPECT_NE(ReadImageSize(dir + "/gif.png").status().message().find("a GIF image"), std::string::npos);
  ASSERT_TRUE(testing::WriteBytes(dir + "/cut.png", testing::EncodePng8(p.pixels, 37, 53, 3).substr(0, 20)));
  EXPECT_EQ(ReadImageSize(dir + "/cut.png").status().code(), StatusCode::kCorruption);
  const auto bomb = ReadImageSize(dir + "/a.png", 100);
  ASSERT_FALSE(bomb.ok());
  EXPECT_NE(bomb.status().message().find("over the limit"), std::string::npos) << bomb.status().ToString();
}

}  // namespace
}  // namespace maestro::datasets
