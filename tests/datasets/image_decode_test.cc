// SPDX-License-Identifier: Apache-2.0
// datasets/image_decode.h on images this test writes itself with libpng's and
// libjpeg's own encoders: PNG pixels decode exactly in every colour type and
// bit depth, JPEG within the codec's tolerance (baseline, progressive, gray,
// Adobe CMYK); the resize equals a hand computation and torch's antialiased
// bilinear interpolation; normalisation and the patch layout; and every bad
// input (missing, unreadable, empty, other formats, truncated, damaged, zero
// size, decompression bombs, random bytes) is a Status naming the file.
#include "datasets/image_decode.h"

#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tests/fixtures/image_files.h"
#include "tests/fixtures/scratch.h"

namespace maestro::datasets {
namespace {

namespace fs = std::filesystem;

// This file's scratch folders: <test-tmp>/maestro-images-<pid>/<name> (fixtures::ScratchDir).
constexpr char kScratch[] = "maestro-images-";

void WriteFile(const std::string& path, const std::string& bytes) {
  ASSERT_TRUE(fixtures::WriteFile(path, bytes)) << path;
}

// ---- PNG writer (libpng) ---------------------------------------------------

struct PngSpec {
  int width = 0;
  int height = 0;
  int color_type = PNG_COLOR_TYPE_RGB;
  int bit_depth = 8;
  bool interlaced = false;
  std::vector<png_color> palette;
  std::vector<uint8_t> trns_alpha;  // palette alpha (tRNS)
  // Row bytes exactly as PNG stores them (packed for < 8 bit, big-endian 16).
  std::vector<std::vector<uint8_t>> rows;
};

void PngAppend(png_structp png, png_bytep data, size_t n) {
  static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
}
void PngFlush(png_structp /*png*/) {}

std::string EncodePng(const PngSpec& s) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, PngAppend, PngFlush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(s.width), static_cast<png_uint_32>(s.height), s.bit_depth,
               s.color_type, s.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(png, info, s.palette.data(), static_cast<int>(s.palette.size()));
  if (!s.trns_alpha.empty()) {
    png_set_tRNS(png, info, s.trns_alpha.data(), static_cast<int>(s.trns_alpha.size()), nullptr);
  }
  png_write_info(png, info);
  std::vector<png_bytep> rows;
  std::vector<std::vector<uint8_t>> copy = s.rows;
  for (auto& r : copy) rows.push_back(r.data());
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// 8-bit rows from HWC pixels.
std::vector<std::vector<uint8_t>> Rows8(const std::vector<uint8_t>& hwc, int height, int width, int channels) {
  std::vector<std::vector<uint8_t>> rows;
  for (int y = 0; y < height; ++y) {
    const auto* p = hwc.data() + static_cast<size_t>(y) * static_cast<size_t>(width * channels);
    rows.emplace_back(p, p + width * channels);
  }
  return rows;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng() & 0xFF);
  return v;
}

// ---- JPEG writer (libjpeg) -------------------------------------------------

struct JpegSpec {
  int width = 0;
  int height = 0;
  int components = 3;
  J_COLOR_SPACE color_space = JCS_RGB;
  int quality = 95;
  bool progressive = false;
  std::vector<uint8_t> pixels;  // HWC
};

std::string EncodeJpeg(const JpegSpec& s) {
  return testing::EncodeJpeg(s.pixels, s.height, s.width, s.components, s.color_space, s.quality, s.progressive);
}

// A smooth RGB test picture (JPEG keeps smooth pictures close).
std::vector<uint8_t> SmoothRgb(int height, int width) {
  std::vector<uint8_t> v(static_cast<size_t>(height * width * 3));
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const size_t i = static_cast<size_t>((y * width + x) * 3);
      v[i] = static_cast<uint8_t>(x * 255 / (width - 1));
      v[i + 1] = static_cast<uint8_t>(y * 255 / (height - 1));
      v[i + 2] = static_cast<uint8_t>(128 + 100 * std::sin(0.1 * (x + y)));
    }
  }
  return v;
}

double MeanAbsDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return sum / static_cast<double>(a.size());
}

int MaxAbsDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(int{a[i]} - int{b[i]}));
  return m;
}

DecodedImage MustDecode(const std::string& bytes, const DecodeOptions& options = {}) {
  auto image = DecodeImageBytes(bytes, "test-image", options);
  EXPECT_TRUE(image.ok()) << image.status().ToString();
  return image.ok() ? *image : DecodedImage{};
}

// ---- format detection ------------------------------------------------------

TEST(ImageFormatDetection, MagicBytesDecideNotTheFileName) {
  const std::string dir = fixtures::ScratchDir(kScratch, "magic");
  const std::vector<uint8_t> rgb = RandomBytes(6 * 5 * 3, 1);
  PngSpec png;
  png.width = 6;
  png.height = 5;
  png.rows = Rows8(rgb, 5, 6, 3);
  WriteFile(dir + "/really_a_png.jpg", EncodePng(png));
  JpegSpec jpeg;
  jpeg.width = 16;
  jpeg.height = 8;
  jpeg.pixels = SmoothRgb(8, 16);
  WriteFile(dir + "/really_a_jpeg.png", EncodeJpeg(jpeg));

  auto a = DecodeImageFile(dir + "/really_a_png.jpg");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->format, ImageFormat::kPng);
  EXPECT_EQ(a->pixels, rgb);
  auto b = DecodeImageFile(dir + "/really_a_jpeg.png");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->format, ImageFormat::kJpeg);
  EXPECT_EQ(b->width, 16);
  EXPECT_EQ(b->height, 8);
}

TEST(ImageFormatDetection, OtherFormatsAreNamed) {
  struct Case {
    std::string bytes;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"GIF89a\x01\x00\x01\x00", "GIF"},
      {std::string("RIFF\x10\x00\x00\x00WEBPVP8 ", 16), "WebP"},
      {"BM\x36\x00\x00\x00", "BMP"},
      {std::string("II*\0\x08\x00\x00\x00", 8), "TIFF"},
      {std::string("\0\0\0\x1c"
                   "ftypheic",
                   12),
       "HEIC"},
      {"hello, I am a caption\n", "neither a JPEG nor a PNG"},
      {"", "empty"},
  };
  for (const auto& c : cases) {
    auto r = DecodeImageBytes(c.bytes, "images/cat.jpg");
    ASSERT_FALSE(r.ok()) << c.says;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("images/cat.jpg"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status().message();
  }
}

// ---- PNG -------------------------------------------------------------------

TEST(PngDecode, Rgb8AndGray8AreExact) {
  const std::vector<uint8_t> rgb = RandomBytes(13 * 7 * 3, 2);
  PngSpec s;
  s.width = 13;
  s.height = 7;
  s.rows = Rows8(rgb, 7, 13, 3);
  DecodedImage a = MustDecode(EncodePng(s));
  EXPECT_EQ(a.channels, 3);
  EXPECT_EQ(a.width, 13);
  EXPECT_EQ(a.height, 7);
  EXPECT_EQ(a.pixels, rgb);

  const std::vector<uint8_t> gray = RandomBytes(9 * 4, 3);
  s = PngSpec{};
  s.width = 9;
  s.height = 4;
  s.color_type = PNG_COLOR_TYPE_GRAY;
  s.rows = Rows8(gray, 4, 9, 1);
  DecodedImage g = MustDecode(EncodePng(s));
  EXPECT_EQ(g.channels, 1);
  EXPECT_EQ(g.pixels, gray);
}

TEST(PngDecode, LowBitDepthGrayScalesToFullRange) {
  for (int depth : {1, 2, 4}) {
    const int width = 11;
    const int height = 3;
    const int max = (1 << depth) - 1;
    std::mt19937 rng(static_cast<uint32_t>(depth));
    PngSpec s;
    s.width = width;
    s.height = height;
    s.color_type = PNG_COLOR_TYPE_GRAY;
    s.bit_depth = depth;
    std::vector<uint8_t> expected;
    for (int y = 0; y < height; ++y) {
      std::vector<uint8_t> row(static_cast<size_t>((width * depth + 7) / 8), 0);
      for (int x = 0; x < width; ++x) {
        const int v = static_cast<int>(rng() % static_cast<uint32_t>(max + 1));
        const int bit = x * depth;  // most significant bits first
        row[static_cast<size_t>(bit / 8)] |= static_cast<uint8_t>(v << (8 - depth - bit % 8));
        expected.push_back(static_cast<uint8_t>(v * 255 / max));  // 1 bit: 0/255, 2: x85, 4: x17
      }
      s.rows.push_back(row);
    }
    DecodedImage g = MustDecode(EncodePng(s));
    EXPECT_EQ(g.channels, 1) << depth;
    EXPECT_EQ(g.pixels, expected) << "bit depth " << depth;
  }
}

TEST(PngDecode, PaletteBecomesRgbAndTrnsIsAlpha) {
  const int width = 10;
  const int height = 6;
  std::vector<png_color> palette(16);
  std::mt19937 rng(4);
  for (auto& c : palette) {
    c.red = static_cast<png_byte>(rng());
    c.green = static_cast<png_byte>(rng());
    c.blue = static_cast<png_byte>(rng());
  }
  std::vector<uint8_t> alpha(16);
  for (auto& a : alpha) a = static_cast<uint8_t>(rng());
  PngSpec s;
  s.width = width;
  s.height = height;
  s.color_type = PNG_COLOR_TYPE_PALETTE;
  s.bit_depth = 4;
  s.palette = palette;
  std::vector<int> index;
  for (int y = 0; y < height; ++y) {
    std::vector<uint8_t> row(static_cast<size_t>(width / 2), 0);
    for (int x = 0; x < width; ++x) {
      const int i = static_cast<int>(rng() % 16);
      index.push_back(i);
      row[static_cast<size_t>(x / 2)] |= static_cast<uint8_t>(x % 2 == 0 ? i << 4 : i);
    }
    s.rows.push_back(row);
  }
  std::vector<uint8_t> expected;
  for (int i : index) {
    expected.push_back(palette[static_cast<size_t>(i)].red);
    expected.push_back(palette[static_cast<size_t>(i)].green);
    expected.push_back(palette[static_cast<size_t>(i)].blue);
  }
  DecodedImage opaque = MustDecode(EncodePng(s));
  EXPECT_EQ(opaque.channels, 3);
  EXPECT_EQ(opaque.pixels, expected);

  // With tRNS: dropped alpha keeps the palette colour; on white it blends.
  s.trns_alpha = alpha;
  const std::string with_alpha = EncodePng(s);
  EXPECT_EQ(MustDecode(with_alpha).pixels, expected);
  DecodeOptions white;
  white.alpha = AlphaHandling::kCompositeOnWhite;
  DecodedImage blended = MustDecode(with_alpha, white);
  for (size_t p = 0; p < index.size(); ++p) {
    const double a = alpha[static_cast<size_t>(index[p])] / 255.0;
    for (size_t c = 0; c < 3; ++c) {
      const double want = a * expected[p * 3 + c] + (1 - a) * 255.0;
      EXPECT_NEAR(blended.pixels[p * 3 + c], want, 0.5 + 1e-9) << "pixel " << p;
    }
  }
}

TEST(PngDecode, SixteenBitKeepsTheHighByte) {
  const int width = 5;
  const int height = 4;
  for (int color_type : {PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_GRAY}) {
    const int channels = color_type == PNG_COLOR_TYPE_RGB ? 3 : 1;
    const std::vector<uint8_t> be = RandomBytes(static_cast<size_t>(width * height * channels * 2), 5);
    PngSpec s;
    s.width = width;
    s.height = height;
    s.color_type = color_type;
    s.bit_depth = 16;
    for (int y = 0; y < height; ++y) {
      const auto* p = be.data() + static_cast<size_t>(y * width * channels * 2);
      s.rows.emplace_back(p, p + width * channels * 2);
    }
    std::vector<uint8_t> expected;
    for (size_t i = 0; i < be.size(); i += 2) {
      const int v = (be[i] << 8) | be[i + 1];  // big-endian 16-bit sample
      expected.push_back(static_cast<uint8_t>(v >> 8));
    }
    DecodedImage d = MustDecode(EncodePng(s));
    EXPECT_EQ(d.channels, channels);
    EXPECT_EQ(d.pixels, expected);
  }
}

TEST(PngDecode, AlphaIsDroppedOrCompositedOnWhite) {
  const int width = 7;
  const int height = 5;
  for (int color_type : {PNG_COLOR_TYPE_RGB_ALPHA, PNG_COLOR_TYPE_GRAY_ALPHA}) {
    const int channels = color_type == PNG_COLOR_TYPE_RGB_ALPHA ? 4 : 2;
    const std::vector<uint8_t> px = RandomBytes(static_cast<size_t>(width * height * channels), 6);
    PngSpec s;
    s.width = width;
    s.height = height;
    s.color_type = color_type;
    s.rows = Rows8(px, height, width, channels);
    const std::string bytes = EncodePng(s);
    DecodedImage dropped = MustDecode(bytes);
    DecodeOptions white;
    white.alpha = AlphaHandling::kCompositeOnWhite;
    DecodedImage blended = MustDecode(bytes, white);
    ASSERT_EQ(dropped.channels, channels - 1);
    ASSERT_EQ(blended.channels, channels - 1);
    const size_t colour = static_cast<size_t>(channels - 1);
    for (size_t p = 0; p < static_cast<size_t>(width * height); ++p) {
      const double a = px[p * static_cast<size_t>(channels) + colour] / 255.0;
      for (size_t c = 0; c < colour; ++c) {
        const uint8_t v = px[p * static_cast<size_t>(channels) + c];
        EXPECT_EQ(dropped.pixels[p * colour + c], v);
        EXPECT_NEAR(blended.pixels[p * colour + c], a * v + (1 - a) * 255, 0.5 + 1e-9);
      }
    }
  }
}

TEST(PngDecode, InterlacedEqualsPlain) {
  const std::vector<uint8_t> rgb = RandomBytes(17 * 11 * 3, 7);
  PngSpec s;
  s.width = 17;
  s.height = 11;
  s.rows = Rows8(rgb, 11, 17, 3);
  s.interlaced = true;
  EXPECT_EQ(MustDecode(EncodePng(s)).pixels, rgb);
}

// ---- JPEG ------------------------------------------------------------------

TEST(JpegDecode, BaselineAndProgressiveRgbAreCloseToTheSource) {
  JpegSpec s;
  s.width = 48;
  s.height = 32;
  s.pixels = SmoothRgb(32, 48);
  for (bool progressive : {false, true}) {
    s.progressive = progressive;
    DecodedImage d = MustDecode(EncodeJpeg(s));
    EXPECT_EQ(d.format, ImageFormat::kJpeg);
    ASSERT_EQ(d.channels, 3);
    ASSERT_EQ(d.width, 48);
    ASSERT_EQ(d.height, 32);
    // Quality 95 with 4:2:0 chroma: small mean error, bounded worst case.
    EXPECT_LT(MeanAbsDiff(d.pixels, s.pixels), 2.0) << "progressive=" << progressive;
    EXPECT_LT(MaxAbsDiff(d.pixels, s.pixels), 24) << "progressive=" << progressive;
  }
}

TEST(JpegDecode, GrayscaleIsOneChannel) {
  JpegSpec s;
  s.width = 24;
  s.height = 16;
  s.components = 1;
  s.color_space = JCS_GRAYSCALE;
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 24; ++x) s.pixels.push_back(static_cast<uint8_t>(10 * x + 3 * y));
  }
  DecodedImage d = MustDecode(EncodeJpeg(s));
  ASSERT_EQ(d.channels, 1);
  EXPECT_LT(MeanAbsDiff(d.pixels, s.pixels), 1.5);
  EXPECT_LT(MaxAbsDiff(d.pixels, s.pixels), 8);
}

TEST(JpegDecode, AdobeCmykBecomesRgb) {
  // Photoshop stores CMYK inverted (255 - ink) and marks the file with an
  // Adobe APP14 segment, which libjpeg writes for CMYK too. Flat colours so
  // the codec is (nearly) lossless.
  const int cmyk[2][4] = {{0, 128, 255, 0}, {40, 0, 80, 100}};  // ink amounts
  JpegSpec s;
  s.width = 16;
  s.height = 16;
  s.components = 4;
  s.color_space = JCS_CMYK;
  for (int y = 0; y < 16; ++y) {
    for (int x = 0; x < 16; ++x) {
      for (int c = 0; c < 4; ++c) s.pixels.push_back(static_cast<uint8_t>(255 - cmyk[y < 8 ? 0 : 1][c]));
    }
  }
  DecodedImage d = MustDecode(EncodeJpeg(s));
  ASSERT_EQ(d.channels, 3);
  for (int y : {2, 13}) {
    const int* ink = cmyk[y < 8 ? 0 : 1];
    for (int c = 0; c < 3; ++c) {
      const double want = (255.0 - ink[c]) * (255.0 - ink[3]) / 255.0;  // R = (1-C)(1-K)
      EXPECT_NEAR(d.at(y, 4, c), want, 3.0) << "y=" << y << " c=" << c;
    }
  }
}

// ---- channels ----------------------------------------------------------------

TEST(ImageChannels, LumaAndGrayToRgb) {
  const std::vector<uint8_t> rgb = RandomBytes(8 * 6 * 3, 8);
  PngSpec s;
  s.width = 8;
  s.height = 6;
  s.rows = Rows8(rgb, 6, 8, 3);
  DecodeOptions one;
  one.channels = 1;
  DecodedImage gray = MustDecode(EncodePng(s), one);
  ASSERT_EQ(gray.channels, 1);
  for (size_t i = 0; i < gray.pixels.size(); ++i) {
    const double luma = 0.299 * rgb[i * 3] + 0.587 * rgb[i * 3 + 1] + 0.114 * rgb[i * 3 + 2];
    EXPECT_NEAR(gray.pixels[i], luma, 0.5 + 1e-3) << i;
  }
  DecodedImage back = ConvertChannels(gray, 3);
  ASSERT_EQ(back.channels, 3);
  for (size_t i = 0; i < gray.pixels.size(); ++i) {
    for (size_t c = 0; c < 3; ++c) EXPECT_EQ(back.pixels[i * 3 + c], gray.pixels[i]);
  }
}

// ---- resize + normalise -------------------------------------------------------

DecodedImage MakeImage(int channels, int height, int width, const std::vector<uint8_t>& hwc) {
  DecodedImage d;
  d.channels = channels;
  d.height = height;
  d.width = width;
  d.pixels = hwc;
  return d;
}

// mean 0, std 1/255: the output is the resized value on the 0..255 scale.
ImageSpec RawSpec(int channels, int height, int width) {
  ImageSpec spec;
  spec.channels = channels;
  spec.height = height;
  spec.width = width;
  spec.mean = {0, 0, 0};
  spec.std = {1.0f / 255, 1.0f / 255, 1.0f / 255};
  return spec;
}

TEST(ImageResize, IdentitySizeIsExact) {
  const std::vector<uint8_t> px = RandomBytes(9 * 5 * 3, 9);
  DecodedImage img = MakeImage(3, 5, 9, px);
  ImageSpec spec;
  spec.height = 5;
  spec.width = 9;
  spec.mean = {0, 0, 0};
  spec.std = {1, 1, 1};
  auto out = ResizeAndNormalize(img, spec);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 5; ++y) {
      for (int x = 0; x < 9; ++x) {
        EXPECT_FLOAT_EQ((*out)[static_cast<size_t>((c * 5 + y) * 9 + x)], img.at(y, x, c) / 255.0f);
      }
    }
  }
}

TEST(ImageResize, FourByFourToTwoByTwoByHand) {
  // v(y, x) = 4y + x. Downscale by 2: the triangle widens to 2 input pixels
  // each side of the output centre (1.0 and 3.0 in input coordinates); input
  // pixel centres 0.5, 1.5, 2.5 (and 3.5 outside the support) give weights
  // 1 - |d|/2 = 0.75, 0.75, 0.25 for output 0 and 0.25, 0.75, 0.75 for output
  // 1 (pixels 1..3), renormalised by 1.75: (3, 3, 1)/7 and (1, 3, 3)/7.
  std::vector<uint8_t> px;
  for (int i = 0; i < 16; ++i) px.push_back(static_cast<uint8_t>(i));
  const double w[2][4] = {{3.0 / 7, 3.0 / 7, 1.0 / 7, 0}, {0, 1.0 / 7, 3.0 / 7, 3.0 / 7}};
  auto out = ResizeAndNormalize(MakeImage(1, 4, 4, px), RawSpec(1, 2, 2));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (int oy = 0; oy < 2; ++oy) {
    for (int ox = 0; ox < 2; ++ox) {
      double want = 0;
      for (int y = 0; y < 4; ++y) {
        for (int x = 0; x < 4; ++x) want += w[oy][y] * w[ox][x] * (4 * y + x);
      }
      EXPECT_NEAR((*out)[static_cast<size_t>(oy * 2 + ox)], want, 1e-4) << oy << "," << ox;
    }
  }
}

TEST(ImageResize, UpscaleOfAConstantStaysConstant) {
  const std::vector<uint8_t> px(3 * 2 * 3, 77);
  auto out = ResizeAndNormalize(MakeImage(3, 3, 2, px), RawSpec(3, 11, 7));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 3u * 11 * 7);
  for (float v : *out) EXPECT_NEAR(v, 77.0f, 1e-3f);
}

// v(c, y, x) = (13 y^2 + 29 x + 101 c + 7 x y) mod 256, resized by torch:
//   F.interpolate(t[None].double(), size=(oh, ow), mode="bilinear",
//                 antialias=True, align_corners=False)
// (torch 2.x, /usr/bin/python3), printed with 4 decimals.
std::vector<uint8_t> TorchPattern(int channels, int height, int width) {
  std::vector<uint8_t> hwc;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      for (int c = 0; c < channels; ++c)
        hwc.push_back(static_cast<uint8_t>((y * y * 13 + x * 29 + c * 101 + x * y * 7) % 256));
    }
  }
  return hwc;
}

TEST(ImageResize, MatchesTorchAntialiasedBilinear) {
  struct Case {
    int channels, height, width, out_h, out_w;
    std::vector<float> want;  // (C, oh, ow)
  };
  const std::vector<Case> cases = {
      {3, 5, 7, 3, 4, {22.3333f,  72.1314f,  131.0114f, 180.8095f, 80.3016f,  131.2889f, 141.0044f, 100.9153f,
                       127.6259f, 104.3143f, 124.6800f, 132.0884f, 123.3333f, 173.1314f, 153.0171f, 95.4694f,
                       154.2116f, 151.5067f, 87.2667f,  108.4550f, 99.7551f,  126.3200f, 120.3543f, 105.9592f,
                       212.1429f, 69.3314f,  77.0114f,  126.8095f, 154.9788f, 104.5956f, 131.3778f, 107.8677f,
                       136.3197f, 110.2914f, 101.4000f, 154.7143f}},
      {1, 3, 4, 7, 5, {0.0000f,   20.3000f,  43.5000f,  66.7000f, 87.0000f, 1.8571f,   22.8571f,  46.8571f, 70.8571f,
                       91.8571f,  7.4286f,   30.5286f,  56.9286f, 83.3286f, 106.4286f, 13.0000f,  38.2000f, 67.0000f,
                       95.8000f,  121.0000f, 29.7143f,  57.0143f, 88.2143f, 119.4143f, 146.7143f, 46.4286f, 75.8286f,
                       109.4286f, 143.0286f, 172.4286f, 52.0000f, 82.1000f, 116.5000f, 150.9000f, 181.0000f}},
      {1, 6, 9, 2, 12, {32.5000f,  56.0938f,  84.4062f,  108.7188f, 113.0312f, 137.3438f, 141.6562f, 129.9688f,
                        158.2812f, 126.5938f, 106.9062f, 110.5000f, 131.0000f, 105.5312f, 110.9688f, 136.4062f,
                        81.8438f,  107.2812f, 136.7188f, 146.1562f, 115.5938f, 105.0312f, 98.4688f,  93.0000f}},
  };
  for (const auto& c : cases) {
    auto out = ResizeAndNormalize(MakeImage(c.channels, c.height, c.width, TorchPattern(c.channels, c.height, c.width)),
                                  RawSpec(c.channels, c.out_h, c.out_w));
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ(out->size(), c.want.size());
    for (size_t i = 0; i < c.want.size(); ++i) {
      EXPECT_NEAR((*out)[i], c.want[i], 2e-3)
          << c.height << "x" << c.width << " -> " << c.out_h << "x" << c.out_w << " at " << i;
    }
  }
}

TEST(ImageResize, ShortestEdgeThenCenterCropKeepsTheMiddle) {
  // 4 x 12 (h x w) to 2 x 2: scale 1/2 -> 2 x 6, keep columns 2..3.
  const std::vector<uint8_t> px = TorchPattern(3, 4, 12);
  DecodedImage img = MakeImage(3, 4, 12, px);
  auto full = ResizeAndNormalize(img, RawSpec(3, 2, 6));
  ImageSpec crop_spec = RawSpec(3, 2, 2);
  crop_spec.fit = ImageFit::kShortestEdgeThenCenterCrop;
  auto crop = ResizeAndNormalize(img, crop_spec);
  ASSERT_TRUE(full.ok() && crop.ok());
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 2; ++x) {
        EXPECT_FLOAT_EQ((*crop)[static_cast<size_t>((c * 2 + y) * 2 + x)],
                        (*full)[static_cast<size_t>((c * 2 + y) * 6 + x + 2)]);
      }
    }
  }
  // Tall image: 10 x 4 to 2 x 2 -> 5 x 2 (int(2 * 10 / 4) = 5), top = 1.
  const std::vector<uint8_t> tall = TorchPattern(1, 10, 4);
  DecodedImage timg = MakeImage(1, 10, 4, tall);
  auto tfull = ResizeAndNormalize(timg, RawSpec(1, 5, 2));
  ImageSpec tspec = RawSpec(1, 2, 2);
  tspec.fit = ImageFit::kShortestEdgeThenCenterCrop;
  auto tcrop = ResizeAndNormalize(timg, tspec);
  ASSERT_TRUE(tfull.ok() && tcrop.ok());
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 2; ++x) {
      EXPECT_FLOAT_EQ((*tcrop)[static_cast<size_t>(y * 2 + x)], (*tfull)[static_cast<size_t>((y + 1) * 2 + x)]);
    }
  }
}

TEST(ImageNormalize, PerChannelMeanAndStd) {
  // Constant colour (51, 102, 204) = (0.2, 0.4, 0.8) after x / 255.
  std::vector<uint8_t> px;
  for (int i = 0; i < 6 * 6; ++i) px.insert(px.end(), {51, 102, 204});
  ImageSpec spec;
  spec.height = 3;
  spec.width = 4;
  spec.mean = kOpenAiClipMean;
  spec.std = kOpenAiClipStd;
  auto out = ResizeAndNormalize(MakeImage(3, 6, 6, px), spec);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const double x[3] = {0.2, 0.4, 0.8};
  for (size_t c = 0; c < 3; ++c) {
    const double want = (x[c] - spec.mean[c]) / spec.std[c];
    for (size_t i = 0; i < 12; ++i) EXPECT_NEAR((*out)[c * 12 + i], want, 1e-5) << c;
  }
  // Gray image into a 3-channel model, RGB into a 1-channel model.
  auto gray_in = ResizeAndNormalize(MakeImage(1, 2, 2, {51, 51, 51, 51}), spec);
  ASSERT_TRUE(gray_in.ok());
  for (size_t c = 0; c < 3; ++c) EXPECT_NEAR((*gray_in)[c * 12], (0.2 - spec.mean[c]) / spec.std[c], 1e-5);
  ImageSpec one = spec;
  one.channels = 1;
  auto luma = ResizeAndNormalize(MakeImage(3, 6, 6, px), one);
  ASSERT_TRUE(luma.ok());
  ASSERT_EQ(luma->size(), 12u);
  const double l = std::round(0.299 * 51 + 0.587 * 102 + 0.114 * 204);
  EXPECT_NEAR((*luma)[0], (l / 255 - spec.mean[0]) / spec.std[0], 1e-5);
}

TEST(ImageNormalize, BadSpecsAreRefused) {
  DecodedImage img = MakeImage(3, 2, 2, std::vector<uint8_t>(12, 0));
  ImageSpec s;
  s.channels = 2;
  EXPECT_EQ(ResizeAndNormalize(img, s).status().code(), StatusCode::kInvalidArgument);
  s = ImageSpec{};
  s.height = 0;
  EXPECT_EQ(ResizeAndNormalize(img, s).status().code(), StatusCode::kInvalidArgument);
  s = ImageSpec{};
  s.std[1] = 0;
  auto r = ResizeAndNormalize(img, s);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("std"), std::string::npos);
  s = ImageSpec{};
  s.mean[0] = std::nanf("");
  EXPECT_EQ(ResizeAndNormalize(img, s).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ResizeAndNormalize(DecodedImage{}, ImageSpec{}).status().code(), StatusCode::kInvalidArgument);
}

// ---- patchify ------------------------------------------------------------------

TEST(ImagePatchify, RasterOrderOfChannelMajorPatches) {
  const int C = 3, H = 4, W = 6, p = 2;
  std::vector<float> chw(static_cast<size_t>(C * H * W));
  for (int c = 0; c < C; ++c) {
    for (int y = 0; y < H; ++y) {
      for (int x = 0; x < W; ++x) chw[static_cast<size_t>((c * H + y) * W + x)] = 1000.0f * c + 10.0f * y + x;
    }
  }
  auto patches = Patchify(chw, C, H, W, p);
  ASSERT_TRUE(patches.ok()) << patches.status().ToString();
  ASSERT_EQ(patches->size(), chw.size());
  const int grid_w = W / p;
  const int patch_len = C * p * p;
  for (int n = 0; n < (H / p) * grid_w; ++n) {
    const int py = n / grid_w, px = n % grid_w;
    for (int c = 0; c < C; ++c) {
      for (int dy = 0; dy < p; ++dy) {
        for (int dx = 0; dx < p; ++dx) {
          EXPECT_EQ((*patches)[static_cast<size_t>(n * patch_len + (c * p + dy) * p + dx)],
                    1000.0f * c + 10.0f * (py * p + dy) + (px * p + dx));
        }
      }
    }
  }
  // Patch 4 = row 1, column 1: its first values are channel 0, y = 2, x = 2, 3.
  EXPECT_EQ((*patches)[static_cast<size_t>(4 * patch_len)], 22.0f);
  EXPECT_EQ((*patches)[static_cast<size_t>(4 * patch_len + 1)], 23.0f);

  EXPECT_EQ(Patchify(chw, C, H, W, 4).status().code(), StatusCode::kInvalidArgument);  // 6 % 4 != 0
  EXPECT_EQ(Patchify(chw, C, H, W + 2, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Patchify(chw, C, H, W, 0).status().code(), StatusCode::kInvalidArgument);
}

// ---- end to end and bad input ---------------------------------------------------------

TEST(ImageLoad, LoadImageForModelOnAFile) {
  const std::string dir = fixtures::ScratchDir(kScratch, "load");
  const std::vector<uint8_t> rgb = RandomBytes(8 * 8 * 3, 10);
  PngSpec s;
  s.width = 8;
  s.height = 8;
  s.rows = Rows8(rgb, 8, 8, 3);
  WriteFile(dir + "/a.png", EncodePng(s));
  ImageSpec spec;
  spec.height = 8;
  spec.width = 8;
  spec.mean = kImageNetMean;
  spec.std = kImageNetStd;
  auto out = LoadImageForModel(dir + "/a.png", spec);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 3u * 64);
  for (size_t c = 0; c < 3; ++c) {
    for (size_t i = 0; i < 64; ++i) {
      EXPECT_NEAR((*out)[c * 64 + i], (rgb[i * 3 + c] / 255.0 - spec.mean[c]) / spec.std[c], 1e-5);
    }
  }
  auto patches = Patchify(*out, 3, 8, 8, 4);
  ASSERT_TRUE(patches.ok());
  EXPECT_EQ(patches->size(), 4u * 3 * 16);
}

void ExpectErrorNaming(const StatusOr<DecodedImage>& r, StatusCode code, const std::string& name,
                       const std::string& says) {
  ASSERT_FALSE(r.ok()) << says;
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(says), std::string::npos) << r.status().message();
}

TEST(ImageErrors, MissingUnreadableAndEmptyFiles) {
  const std::string dir = fixtures::ScratchDir(kScratch, "files");
  ExpectErrorNaming(DecodeImageFile(dir + "/nope.jpg"), StatusCode::kNotFound, dir + "/nope.jpg", "no such");
  ExpectErrorNaming(DecodeImageFile(dir + "/nope/x.png"), StatusCode::kNotFound, dir + "/nope/x.png", "no such");
  fs::create_directories(dir + "/folder.png");
  ExpectErrorNaming(DecodeImageFile(dir + "/folder.png"), StatusCode::kIOError, dir + "/folder.png", "directory");
  WriteFile(dir + "/empty.jpg", "");
  ExpectErrorNaming(DecodeImageFile(dir + "/empty.jpg"), StatusCode::kInvalidArgument, dir + "/empty.jpg", "empty");
  ImageSpec spec;
  auto load = LoadImageForModel(dir + "/nope.jpg", spec);
  EXPECT_EQ(load.status().code(), StatusCode::kNotFound);
}

TEST(ImageErrors, TruncatedFiles) {
  JpegSpec j;
  j.width = 64;
  j.height = 64;
  j.pixels = SmoothRgb(64, 64);
  PngSpec p;
  p.width = 64;
  p.height = 64;
  p.rows = Rows8(RandomBytes(64 * 64 * 3, 11), 64, 64, 3);  // random: incompressible, so IDAT is large
  for (bool progressive : {false, true}) {
    j.progressive = progressive;
    const std::string jpeg = EncodeJpeg(j);
    ExpectErrorNaming(DecodeImageBytes(jpeg.substr(0, jpeg.size() / 2), "cut.jpg"), StatusCode::kCorruption, "cut.jpg",
                      "truncated");
    auto header_only = DecodeImageBytes(jpeg.substr(0, 40), "head.jpg");
    ASSERT_FALSE(header_only.ok());
    EXPECT_NE(header_only.status().message().find("head.jpg"), std::string::npos);
  }
  const std::string png = EncodePng(p);
  ExpectErrorNaming(DecodeImageBytes(png.substr(0, png.size() / 2), "cut.png"), StatusCode::kCorruption, "cut.png",
                    "truncated");
  ExpectErrorNaming(DecodeImageBytes(png.substr(0, 20), "head.png"), StatusCode::kCorruption, "head.png", "truncated");
  ExpectErrorNaming(DecodeImageBytes(png.substr(0, 8), "sig.png"), StatusCode::kCorruption, "sig.png", "truncated");
}

// Rewrites a PNG's IHDR width and height (and its CRC).
std::string WithIhdrSize(std::string png, uint32_t width, uint32_t height) {
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) png[at + static_cast<size_t>(i)] = static_cast<char>((v >> (24 - 8 * i)) & 0xFF);
  };
  // 8 signature + 4 length + "IHDR" + 13 data + 4 CRC
  put32(16, width);
  put32(20, height);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17);
  put32(29, static_cast<uint32_t>(crc));
  return png;
}

// Rewrites a baseline JPEG's SOF0 height and width.
std::string WithSofSize(std::string jpeg, uint16_t width, uint16_t height) {
  const size_t sof = jpeg.find("\xFF\xC0");
  EXPECT_NE(sof, std::string::npos);
  jpeg[sof + 5] = static_cast<char>(height >> 8);
  jpeg[sof + 6] = static_cast<char>(height & 0xFF);
  jpeg[sof + 7] = static_cast<char>(width >> 8);
  jpeg[sof + 8] = static_cast<char>(width & 0xFF);
  return jpeg;
}

TEST(ImageErrors, ZeroSizeAndDecompressionBombs) {
  PngSpec p;
  p.width = 4;
  p.height = 4;
  p.rows = Rows8(RandomBytes(48, 12), 4, 4, 3);
  const std::string png = EncodePng(p);
  ASSERT_TRUE(DecodeImageBytes(WithIhdrSize(png, 4, 4), "same.png").ok());  // the rewrite itself is sound
  auto zero = DecodeImageBytes(WithIhdrSize(png, 0, 4), "zero.png");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("zero.png"), std::string::npos);
  EXPECT_NE(zero.status().message().find("width"), std::string::npos) << zero.status().message();
  // 10000 x 10000 = 100 Mpx > 64 Mpx: refused from the header, no allocation.
  ExpectErrorNaming(DecodeImageBytes(WithIhdrSize(png, 10000, 10000), "bomb.png"), StatusCode::kInvalidArgument,
                    "bomb.png", "over the limit");

  JpegSpec j;
  j.width = 16;
  j.height = 16;
  j.pixels = SmoothRgb(16, 16);
  const std::string jpeg = EncodeJpeg(j);
  ASSERT_TRUE(DecodeImageBytes(WithSofSize(jpeg, 16, 16), "same.jpg").ok());
  ExpectErrorNaming(DecodeImageBytes(WithSofSize(jpeg, 12000, 12000), "bomb.jpg"), StatusCode::kInvalidArgument,
                    "bomb.jpg", "over the limit");
  auto zero_jpeg = DecodeImageBytes(WithSofSize(jpeg, 16, 0), "zero.jpg");
  ASSERT_FALSE(zero_jpeg.ok());
  EXPECT_NE(zero_jpeg.status().message().find("zero.jpg"), std::string::npos);
  // A caller's own, smaller limit.
  DecodeOptions small;
  small.max_pixels = 100;
  ExpectErrorNaming(DecodeImageBytes(jpeg, "small.jpg", small), StatusCode::kInvalidArgument, "small.jpg",
                    "over the limit of 100");
}

TEST(ImageErrors, DamagedDataIsCorruption) {
  PngSpec p;
  p.width = 32;
  p.height = 32;
  p.rows = Rows8(RandomBytes(32 * 32 * 3, 13), 32, 32, 3);
  std::string png = EncodePng(p);
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  png[idat + 30] = static_cast<char>(png[idat + 30] ^ 0x5A);  // breaks the chunk CRC
  ExpectErrorNaming(DecodeImageBytes(png, "crc.png"), StatusCode::kCorruption, "crc.png", "damaged PNG");

  JpegSpec j;
  j.width = 32;
  j.height = 32;
  j.pixels = SmoothRgb(32, 32);
  std::string jpeg = EncodeJpeg(j);
  const size_t dht = jpeg.find("\xFF\xC4");  // first Huffman table
  ASSERT_NE(dht, std::string::npos);
  jpeg[dht + 2] = '\0';
  jpeg[dht + 3] = '\x05';  // a length too short for the 16 code counts that follow
  auto r = DecodeImageBytes(jpeg, "bad.jpg");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("bad.jpg: damaged JPEG"), std::string::npos) << r.status().message();
}

TEST(ImageErrors, RandomAndMutatedBytesNeverCrash) {
  JpegSpec j;
  j.width = 24;
  j.height = 24;
  j.pixels = SmoothRgb(24, 24);
  PngSpec p;
  p.width = 12;
  p.height = 12;
  p.color_type = PNG_COLOR_TYPE_RGB_ALPHA;
  p.interlaced = true;
  p.rows = Rows8(RandomBytes(12 * 12 * 4, 14), 12, 12, 4);
  j.progressive = true;
  const std::vector<std::string> seeds = {EncodeJpeg(j), EncodePng(p)};
  std::mt19937 rng(15);
  int decoded = 0;
  for (int i = 0; i < 600; ++i) {
    std::string bytes = seeds[static_cast<size_t>(i % 2)];
    const int flips = 1 + static_cast<int>(rng() % 8);
    for (int f = 0; f < flips; ++f) {
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    if (i % 7 == 0) bytes.resize(rng() % bytes.size());
    auto r = DecodeImageBytes(bytes, "mutant");
    if (r.ok()) {
      ++decoded;
      EXPECT_EQ(r->pixels.size(),
                static_cast<size_t>(r->width) * static_cast<size_t>(r->height) * static_cast<size_t>(r->channels));
    } else {
      EXPECT_EQ(r.status().message().rfind("mutant: ", 0), 0u) << r.status().message();
    }
  }
  // Some mutants still decode (a flipped pixel byte), so both paths ran.
  EXPECT_GT(decoded, 0);
  for (int i = 0; i < 300; ++i) {
    std::string bytes = i % 2 == 0 ? std::string("\xFF\xD8\xFF", 3) : std::string("\x89PNG\r\n\x1A\n", 8);
    const std::vector<uint8_t> tail = RandomBytes(rng() % 200, static_cast<uint32_t>(100 + i));
    bytes.append(tail.begin(), tail.end());
    EXPECT_FALSE(DecodeImageBytes(bytes, "noise").ok());
  }
}

}  // namespace
}  // namespace maestro::datasets
