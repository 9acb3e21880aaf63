// SPDX-License-Identifier: Apache-2.0
// Image files -> the input tensor data of a vision tower (a ViT with patch
// size p, CLIP's or Qwen2-VL's vision encoder), torch-free.
//
// Owns: decoding JPEG (libjpeg-turbo) and PNG (libpng) bytes to uint8 HWC
// pixels; channel conversion (RGB <-> luma); resizing to the model's image
// grid; normalisation with the model's mean and std to float32 (C, H, W);
// cutting (C, H, W) into ViT patches. Format rules, filters and how they
// compare with PIL / Hugging Face processors: docs/data.md, "## Images".
// Also owns ReadImageSize (an image's size from its header alone).
// May call: base, libjpeg (jpeglib.h), libpng. Never exits, never prints:
// every failure is a Status naming the file and what is wrong with it.
// Thread safety: pure functions with per-call decoder state; any of them may
// run on many threads at once.
//
// Decoding rules
//   - The format comes from the magic bytes, never from the file name:
//     FF D8 FF = JPEG, 89 'P' 'N' 'G' 0D 0A 1A 0A = PNG. GIF, WebP, BMP, TIFF
//     and empty files are refused with a message saying what the file is.
//   - JPEG: baseline and progressive; grayscale -> 1 channel; YCbCr/RGB -> 3;
//     CMYK and YCCK (Adobe/Photoshop files) -> RGB with
//     R = (255 - C)(255 - K) / 255 (same for G/M, B/Y), where the stored
//     samples are taken as inverted when the file has an Adobe APP14 marker
//     (Photoshop's convention, which PIL and browsers follow). A truncated file
//     ("Premature end of JPEG file") is an error, as in PIL; other recoverable
//     libjpeg warnings (extraneous bytes before a marker) are tolerated.
//     More than kMaxJpegScans progressive scans is refused (a CPU bomb).
//   - PNG: every colour type and bit depth. Palette -> RGB; gray 1/2/4 bit ->
//     8 bit; 16 bit -> 8 bit by keeping the high byte (v >> 8, as PIL does for
//     16-bit RGB); tRNS -> alpha; interlaced (Adam7) files too. gAMA/iCCP/sRGB
//     are ignored (samples are used as stored, as PIL does). A file that ends
//     inside the image data is an error; a missing IEND after complete image
//     data is tolerated (as PIL does).
//   - Alpha: AlphaHandling::kDrop (default) drops it, which is PIL's
//     Image.convert("RGB") and so what HF CLIP/ViT/SigLIP processors see;
//     kCompositeOnWhite blends onto white, which is what qwen-vl-utils does
//     for Qwen2-VL (out = a/255 * c + (1 - a/255) * 255, rounded).
//   - Size: width and height >= 1 and width * height <= max_pixels
//     (kDefaultMaxPixels = 64 Mpx, PIL's DecompressionBombError is at ~179
//     Mpx); checked from the header, before any pixel memory is allocated.
//   - Output: 1 channel when the file is gray (gray PNG, gray JPEG), else 3
//     (RGB), unless DecodeOptions::channels asks for 1 or 3 (see
//     ConvertChannels for the formulas).
//
// Resize and normalise (ResizeAndNormalize)
//   - Filter: separable triangle ("bilinear") filter with antialiasing: when
//     downscaling by s > 1 the triangle's support is widened to s input
//     pixels on each side of the output pixel's centre (an area-weighted
//     average over the input pixels the output pixel covers), and at s <= 1
//     it is plain bilinear interpolation with half-pixel centres
//     (align_corners = false). Pixel centres sit at (i + 0.5) * in / out;
//     weights that fall outside the image are dropped and the rest
//     renormalised (no border padding). This is PIL's Image.resize(BILINEAR)
//     (Resample.c precompute_coeffs) and torchvision / torch
//     F.interpolate(mode="bilinear", antialias=True, align_corners=False),
//     computed in float32 end to end: it equals torch's result to float
//     rounding, and PIL's to within PIL's uint8 rounding of the intermediate
//     and final passes (|diff| <= 1 grey level).
//   - Versus PIL BICUBIC (what HF CLIPImageProcessor and Qwen2-VL use): not
//     bit-exact. Bicubic (Keys, a = -0.5) has twice the support and negative
//     lobes, so it keeps edges sharper (and overshoots, then clips to 0..255);
//     on smooth areas both agree, at edges they differ by a few grey levels.
//     HF ViTImageProcessor (google/vit-*) uses BILINEAR, which this matches.
//   - Fit: ImageFit::kStretch resizes to (height, width) ignoring the aspect
//     ratio (ViTImageProcessor, Qwen2-VL after smart_resize);
//     kShortestEdgeThenCenterCrop scales the image so that it covers
//     (height, width) -- for a square target: the short side to the target
//     side, the long side to int(target * long / short), HF's
//     get_resize_output_image_size -- then keeps the centre
//     (top = (h' - height) / 2, left = (w' - width) / 2, integer division),
//     as CLIPImageProcessor does (only the kept pixels are computed).
//   - Normalise: out[c] = (x / 255 - mean[c]) / std[c], float32, (C, H, W)
//     contiguous (HF's do_rescale then do_normalize).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace maestro::datasets {

// Refuse images with more pixels than this (decompression bombs). 64 Mpx =
// 8192 x 8192; a 3-channel decode then needs at most 192 MiB.
inline constexpr int64_t kDefaultMaxPixels = int64_t{64} << 20;
// Progressive JPEGs may have at most this many scans (libjpeg-turbo's
// recommended defence against crafted files that take minutes to decode).
inline constexpr int kMaxJpegScans = 500;

enum class ImageFormat { kJpeg, kPng };
const char* ImageFormatName(ImageFormat format);  // "JPEG" | "PNG"

enum class AlphaHandling {
  kDrop,              // ignore alpha (PIL convert("RGB"); HF CLIP/ViT processors)
  kCompositeOnWhite,  // blend onto white (qwen-vl-utils for Qwen2-VL)
};

struct DecodeOptions {
  int channels = 0;  // 0: as decoded (1 for gray files, else 3); 1 or 3: convert
  AlphaHandling alpha = AlphaHandling::kDrop;
  int64_t max_pixels = kDefaultMaxPixels;
};

// Decoded pixels: uint8, (height, width, channels) row-major ("HWC").
struct DecodedImage {
  int height = 0;
  int width = 0;
  int channels = 0;  // 1 (gray) or 3 (RGB)
  ImageFormat format = ImageFormat::kPng;
  std::vector<uint8_t> pixels;  // height * width * channels bytes

  uint8_t at(int y, int x, int c) const {
    return pixels[(static_cast<size_t>(y) * static_cast<size_t>(width) + static_cast<size_t>(x)) *
                      static_cast<size_t>(channels) +
                  static_cast<size_t>(c)];
  }
};

// Reads and decodes a JPEG or PNG file. NotFound when the file does not
// exist; IOError when it cannot be read (a directory, no permission);
// InvalidArgument when it is another format, empty, zero-size or over
// max_pixels; Corruption when it is a damaged or truncated JPEG/PNG. Every
// message starts with `path`.
StatusOr<DecodedImage> DecodeImageFile(const std::string& path, const DecodeOptions& options = {});

// The size of a JPEG or PNG file as (height, width), from its header alone
// (JPEG SOF, PNG IHDR; no pixel is decoded), read with the same decoders and
// checks as DecodeImageFile: the same errors, and InvalidArgument when
// width * height > max_pixels. Reads the first 64 KiB, the whole file only
// when the header lies further in.
StatusOr<std::pair<int, int>> ReadImageSize(const std::string& path, int64_t max_pixels = kDefaultMaxPixels);

// The same on bytes in memory; `name_for_errors` (a path, a manifest line)
// starts every message.
StatusOr<DecodedImage> DecodeImageBytes(std::string_view bytes, const std::string& name_for_errors,
                                        const DecodeOptions& options = {});

// The format the magic bytes say, or InvalidArgument naming what the bytes
// look like instead ("a GIF image", "empty", "not an image").
StatusOr<ImageFormat> DetectImageFormat(std::string_view bytes, const std::string& name_for_errors);

// 1 -> 3 channels: gray replicated to R = G = B. 3 -> 1: ITU-R BT.601 luma
// L = 0.299 R + 0.587 G + 0.114 B, in PIL's fixed point
// (R*19595 + G*38470 + B*7471 + 0x8000) >> 16, so it equals PIL's
// convert("L"). Same channel count: a copy. `channels` must be 1 or 3.
DecodedImage ConvertChannels(const DecodedImage& image, int channels);

enum class ImageFit {
  kStretch,                     // resize to (height, width), aspect ignored
  kShortestEdgeThenCenterCrop,  // CLIP: short side to fit, then centre crop
};

// What the vision tower expects.
struct ImageSpec {
  int channels = 3;  // 1 or 3
  int height = 224;
  int width = 224;
  std::array<float, 3> mean{0.5f, 0.5f, 0.5f};  // per channel, on x / 255
  std::array<float, 3> std{0.5f, 0.5f, 0.5f};
  ImageFit fit = ImageFit::kStretch;
};

// Mean and std of well-known vision towers (their HF preprocessor_config.json).
inline constexpr std::array<float, 3> kOpenAiClipMean{0.48145466f, 0.4578275f, 0.40821073f};  // CLIP, Qwen2-VL
inline constexpr std::array<float, 3> kOpenAiClipStd{0.26862954f, 0.26130258f, 0.27577711f};
inline constexpr std::array<float, 3> kImageNetMean{0.485f, 0.456f, 0.406f};
inline constexpr std::array<float, 3> kImageNetStd{0.229f, 0.224f, 0.225f};
inline constexpr std::array<float, 3> kHalfMean{0.5f, 0.5f, 0.5f};  // google/vit-*, SigLIP
inline constexpr std::array<float, 3> kHalfStd{0.5f, 0.5f, 0.5f};

// OK, or InvalidArgument saying which field is wrong (channels not 1 or 3,
// a side < 1 or > 16384, a std that is not > 0, a mean or std not finite).
Status ValidateImageSpec(const ImageSpec& spec);

// image: (h, w, c) uint8; returns (spec.channels, spec.height, spec.width)
// float32, contiguous. Converts channels first (ConvertChannels), then
// resizes with the antialiased triangle filter, then normalises (rules at the
// top). InvalidArgument when the spec is invalid or the image is empty.
StatusOr<std::vector<float>> ResizeAndNormalize(const DecodedImage& image, const ImageSpec& spec);

// DecodeImageFile + ResizeAndNormalize: (spec.channels, spec.height,
// spec.width) float32. `alpha` and `max_pixels` as in DecodeOptions.
StatusOr<std::vector<float>> LoadImageForModel(const std::string& path, const ImageSpec& spec,
                                               const DecodeOptions& options = {});

// chw: (channels, height, width) float32; returns (num_patches, channels *
// patch * patch) row-major with num_patches = (height / patch) * (width /
// patch), patches in raster order (left to right, then top to bottom) and each
// patch flattened as (channels, patch, patch) -- the layout a Conv2d patch
// embedding with kernel = stride = patch (HF ViT, CLIP) sees when its weight
// (D, C, p, p) is viewed as (D, C*p*p). InvalidArgument when patch < 1, a
// side is not a multiple of patch, or chw.size() != channels*height*width.
// (Qwen2-VL's processor orders patches differently -- temporal patch 2 and
// 2x2 merge groups -- at each image's own size: datasets/native_image.h.)
StatusOr<std::vector<float>> Patchify(const std::vector<float>& chw, int channels, int height, int width, int patch);

}  // namespace maestro::datasets
