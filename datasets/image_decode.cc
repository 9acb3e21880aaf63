// SPDX-License-Identifier: Apache-2.0
// JPEG/PNG decoding (libjpeg-turbo, libpng), channel conversion, antialiased
// resize, normalisation and patchify. Rules: image_decode.h.
// May call: base, libjpeg, libpng.
//
// Both C libraries report fatal errors through a callback that must not
// return; ours longjmp back to a setjmp in RunJpegDecode / RunPngDecode. To
// keep that well defined, those two functions hold no C++ objects with
// destructors and keep every piece of state that lives across the setjmp in a
// job struct owned by the caller, and the callbacks only copy a message into a
// fixed char buffer (no allocation, nothing that can throw through C frames).
#include "datasets/image_decode.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "base/checks.h"

// jpeglib.h needs size_t and FILE declared first.
#include <jerror.h>
#include <jpeglib.h>
#include <png.h>

namespace maestro::datasets {
namespace {

constexpr int64_t kMaxFileBytes = int64_t{1} << 30;     // 1 GiB: far above any 64 Mpx JPEG/PNG
constexpr long kJpegMaxMemory = 1024L * 1024L * 1024L;  // libjpeg's whole-image buffers (progressive)
constexpr int kMaxSpecSide = 16384;

std::string Describe(const std::string& name, const std::string& what) {
  return name + ": " + what;
}

Status CheckSize(int64_t width, int64_t height, int64_t max_pixels, const std::string& name, const char* format) {
  if (width <= 0 || height <= 0) {
    return Status::InvalidArgument(
        Describe(name, std::string(format) + " image of size " + std::to_string(width) + "x" + std::to_string(height) +
                           " has no pixels; remove it from the manifest or replace the file"));
  }
  if (width * height > max_pixels) {
    return Status::InvalidArgument(Describe(
        name, std::string(format) + " image of " + std::to_string(width) + "x" + std::to_string(height) + " = " +
                  std::to_string(width * height) + " pixels is over the limit of " + std::to_string(max_pixels) +
                  " pixels (a decompression bomb, or an image far larger than a vision tower needs); "
                  "downscale it before training"));
  }
  return Status::Ok();
}

// ---- JPEG ---------------------------------------------------------------

struct JpegErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg hands us a pointer to it
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
};

struct JpegDecodeJob {
  // in
  const unsigned char* data = nullptr;
  unsigned long size = 0;  // NOLINT(google-runtime-int): libjpeg's type
  int64_t max_pixels = 0;
  const std::string* name = nullptr;
  bool header_only = false;  // stop after the size check (ReadImageSize)
  // state across setjmp
  jpeg_decompress_struct cinfo{};  // zeroed: safe to destroy even if creating it failed
  JpegErrorManager err{};
  jpeg_progress_mgr progress{};
  // out
  DecodedImage* image = nullptr;  // pixels as libjpeg delivers them (1, 3 or 4 = CMYK)
  bool adobe_cmyk = false;
  Status status;  // set on refusals that are not libjpeg errors
};

[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (msg_level -1) and trace messages: all ignored except a premature
// end of data, which PIL also treats as an error ("image file is truncated").
void JpegEmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) {
    cinfo->err->num_warnings++;
    if (cinfo->err->msg_code == JWRN_JPEG_EOF) {
      auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
      std::snprintf(err->message, sizeof(err->message), "the file ends early (truncated JPEG)");
      std::longjmp(err->jump, 1);
    }
  }
}

void JpegProgressMonitor(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  auto* dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->input_scan_number > kMaxJpegScans) {
    auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
    std::snprintf(err->message, sizeof(err->message),
                  "progressive JPEG with more than %d scans (a crafted file that takes minutes to decode)",
                  kMaxJpegScans);
    std::longjmp(err->jump, 1);
  }
}

// Returns true when job->image holds the pixels; false with err.message set
// (a libjpeg error) or with job->status set (a refusal of ours).
bool RunJpegDecode(JpegDecodeJob* job) {
  job->cinfo.err = jpeg_std_error(&job->err.pub);
  job->err.pub.error_exit = JpegErrorExit;
  job->err.pub.emit_message = JpegEmitMessage;
  job->err.message[0] = '\0';
  if (setjmp(job->err.jump) != 0) {
    jpeg_destroy_decompress(&job->cinfo);
    return false;
  }
  jpeg_create_decompress(&job->cinfo);
  job->cinfo.mem->max_memory_to_use = kJpegMaxMemory;
  job->progress.progress_monitor = JpegProgressMonitor;
  job->cinfo.progress = &job->progress;
  jpeg_mem_src(&job->cinfo, job->data, job->size);
  jpeg_read_header(&job->cinfo, TRUE);

  job->status = CheckSize(job->cinfo.image_width, job->cinfo.image_height, job->max_pixels, *job->name, "JPEG");
  if (!job->status.ok()) {
    jpeg_destroy_decompress(&job->cinfo);
    return false;
  }
  if (job->header_only) {
    job->image->width = static_cast<int>(job->cinfo.image_width);
    job->image->height = static_cast<int>(job->cinfo.image_height);
    jpeg_destroy_decompress(&job->cinfo);
    return true;
  }
  switch (job->cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: job->cinfo.out_color_space = JCS_GRAYSCALE; break;
    case JCS_YCbCr:
    case JCS_RGB: job->cinfo.out_color_space = JCS_RGB; break;
    case JCS_CMYK:
    case JCS_YCCK:  // libjpeg turns YCCK into CMYK
      job->cinfo.out_color_space = JCS_CMYK;
      job->adobe_cmyk = job->cinfo.saw_Adobe_marker != 0;
      break;
    default:
      job->status =
          Status::InvalidArgument(Describe(*job->name, "JPEG with " + std::to_string(job->cinfo.num_components) +
                                                           " components in an unknown colour space is not supported; "
                                                           "convert it to an RGB or grayscale JPEG or PNG"));
      jpeg_destroy_decompress(&job->cinfo);
      return false;
  }
  jpeg_start_decompress(&job->cinfo);
  DecodedImage* image = job->image;
  image->width = static_cast<int>(job->cinfo.output_width);
  image->height = static_cast<int>(job->cinfo.output_height);
  image->channels = job->cinfo.output_components;
  const size_t stride = static_cast<size_t>(image->width) * static_cast<size_t>(image->channels);
  image->pixels.resize(stride * static_cast<size_t>(image->height));
  JSAMPROW rows[16];
  while (job->cinfo.output_scanline < job->cinfo.output_height) {
    const JDIMENSION first = job->cinfo.output_scanline;
    const JDIMENSION n = std::min<JDIMENSION>(16, job->cinfo.output_height - first);
    for (JDIMENSION i = 0; i < n; ++i) rows[i] = image->pixels.data() + (first + i) * stride;
    jpeg_read_scanlines(&job->cinfo, rows, n);
  }
  // Stop here: trailing data after the image (or a missing EOI) is harmless.
  jpeg_abort_decompress(&job->cinfo);
  jpeg_destroy_decompress(&job->cinfo);
  return true;
}

// (255 - C)(255 - K) / 255 rounded; Adobe files store 255 - C already.
void CmykToRgb(DecodedImage* image, bool inverted) {
  const size_t n = static_cast<size_t>(image->width) * static_cast<size_t>(image->height);
  std::vector<uint8_t> rgb(n * 3);
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = &image->pixels[i * 4];
    const int k = inverted ? p[3] : 255 - p[3];
    for (int c = 0; c < 3; ++c) {
      const int v = inverted ? p[c] : 255 - p[c];
      rgb[i * 3 + static_cast<size_t>(c)] = static_cast<uint8_t>((2 * v * k + 255) / 510);
    }
  }
  image->pixels = std::move(rgb);
  image->channels = 3;
}

// header_only: the size alone (no pixels, channels 0).
StatusOr<DecodedImage> DecodeJpeg(std::string_view bytes, const std::string& name, int64_t max_pixels,
                                  bool header_only) {
  DecodedImage image;
  image.format = ImageFormat::kJpeg;
  JpegDecodeJob job;
  job.data = reinterpret_cast<const unsigned char*>(bytes.data());
  job.size = static_cast<unsigned long>(bytes.size());  // NOLINT(google-runtime-int)
  job.max_pixels = max_pixels;
  job.name = &name;
  job.header_only = header_only;
  job.image = &image;
  if (!RunJpegDecode(&job)) {
    if (!job.status.ok()) return job.status;
    return Status::Corruption(
        Describe(name, std::string("damaged JPEG file: ") + job.err.message + "; re-export or remove the image"));
  }
  if (image.channels == 4) CmykToRgb(&image, job.adobe_cmyk);
  return image;
}

// ---- PNG ----------------------------------------------------------------

struct PngDecodeJob {
  // in
  const unsigned char* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  int64_t max_pixels = 0;
  const std::string* name = nullptr;
  bool header_only = false;  // stop after the size check (ReadImageSize)
  // state across setjmp
  png_structp png = nullptr;
  png_infop info = nullptr;
  char message[256] = {};
  char warning[256] = {};  // the last warning: libpng often explains an error in one
  // out
  std::vector<uint8_t>* pixels = nullptr;
  std::vector<png_bytep>* rows = nullptr;
  int width = 0;
  int height = 0;
  int channels = 0;  // 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA
  Status status;
};

[[noreturn]] void PngError(png_structp png, png_const_charp message) {
  auto* job = static_cast<PngDecodeJob*>(png_get_error_ptr(png));
  std::snprintf(job->message, sizeof(job->message), "%s", message);
  png_longjmp(png, 1);
}

void PngWarning(png_structp png, png_const_charp message) {
  auto* job = static_cast<PngDecodeJob*>(png_get_error_ptr(png));
  std::snprintf(job->warning, sizeof(job->warning), "%s", message);
}

void PngRead(png_structp png, png_bytep out, size_t n) {
  auto* job = static_cast<PngDecodeJob*>(png_get_io_ptr(png));
  if (n > job->size - job->pos) png_error(png, "the file ends early (truncated PNG)");
  std::memcpy(out, job->data + job->pos, n);
  job->pos += n;
}

bool RunPngDecode(PngDecodeJob* job) {
  job->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, job, PngError, PngWarning);
  if (job->png == nullptr) {
    std::snprintf(job->message, sizeof(job->message), "libpng could not start (out of memory)");
    return false;
  }
  job->info = png_create_info_struct(job->png);
  if (job->info == nullptr) {
    png_destroy_read_struct(&job->png, nullptr, nullptr);
    std::snprintf(job->message, sizeof(job->message), "libpng could not start (out of memory)");
    return false;
  }
  if (setjmp(png_jmpbuf(job->png)) != 0) {
    png_destroy_read_struct(&job->png, &job->info, nullptr);
    return false;
  }
  png_set_read_fn(job->png, job, PngRead);
  png_read_info(job->png, job->info);
  const png_uint_32 width = png_get_image_width(job->png, job->info);
  const png_uint_32 height = png_get_image_height(job->png, job->info);
  job->status = CheckSize(width, height, job->max_pixels, *job->name, "PNG");
  if (!job->status.ok()) {
    png_destroy_read_struct(&job->png, &job->info, nullptr);
    return false;
  }
  job->width = static_cast<int>(width);
  job->height = static_cast<int>(height);
  if (job->header_only) {
    png_destroy_read_struct(&job->png, &job->info, nullptr);
    return true;
  }
  const int color_type = png_get_color_type(job->png, job->info);
  const int bit_depth = png_get_bit_depth(job->png, job->info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(job->png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(job->png);
  if (png_get_valid(job->png, job->info, PNG_INFO_tRNS) != 0) png_set_tRNS_to_alpha(job->png);
  if (bit_depth == 16) png_set_strip_16(job->png);
  png_set_interlace_handling(job->png);
  png_read_update_info(job->png, job->info);
  job->channels = png_get_channels(job->png, job->info);
  const size_t stride = static_cast<size_t>(job->width) * static_cast<size_t>(job->channels);
  if (png_get_rowbytes(job->png, job->info) != stride) png_error(job->png, "unexpected row size after conversion");
  job->pixels->resize(stride * height);
  job->rows->resize(height);
  for (png_uint_32 y = 0; y < height; ++y) (*job->rows)[y] = job->pixels->data() + y * stride;
  png_read_image(job->png, job->rows->data());
  // No png_read_end: chunks after the image data (or a missing IEND) do not
  // change the pixels, and PIL does not require them either.
  png_destroy_read_struct(&job->png, &job->info, nullptr);
  return true;
}

// header_only: the size alone (no pixels, channels 0).
StatusOr<DecodedImage> DecodePng(std::string_view bytes, const std::string& name, int64_t max_pixels,
                                 AlphaHandling alpha, bool header_only) {
  std::vector<uint8_t> pixels;
  std::vector<png_bytep> rows;
  PngDecodeJob job;
  job.data = reinterpret_cast<const unsigned char*>(bytes.data());
  job.size = bytes.size();
  job.max_pixels = max_pixels;
  job.name = &name;
  job.header_only = header_only;
  job.pixels = &pixels;
  job.rows = &rows;
  if (!RunPngDecode(&job)) {
    if (!job.status.ok()) return job.status;
    std::string what = job.message;
    if (job.warning[0] != '\0') what += std::string(" (") + job.warning + ")";
    return Status::Corruption(Describe(name, "damaged PNG file: " + what + "; re-export or remove the image"));
  }
  DecodedImage image;
  image.format = ImageFormat::kPng;
  image.width = job.width;
  image.height = job.height;
  if (header_only) return image;
  if (job.channels == 1 || job.channels == 3) {
    image.channels = job.channels;
    image.pixels = std::move(pixels);
    return image;
  }
  // Gray+alpha or RGBA: drop alpha or blend onto white.
  const int colour = job.channels - 1;
  image.channels = colour;
  const size_t n = static_cast<size_t>(job.width) * static_cast<size_t>(job.height);
  image.pixels.resize(n * static_cast<size_t>(colour));
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* p = &pixels[i * static_cast<size_t>(job.channels)];
    const int a = p[colour];
    for (int c = 0; c < colour; ++c) {
      uint8_t v = p[c];
      if (alpha == AlphaHandling::kCompositeOnWhite) {
        v = static_cast<uint8_t>((2 * (a * v + (255 - a) * 255) + 255) / 510);
      }
      image.pixels[i * static_cast<size_t>(colour) + static_cast<size_t>(c)] = v;
    }
  }
  return image;
}

// ---- Resize ---------------------------------------------------------------

// The taps of one axis: output pixel i reads count[i] input pixels starting
// at first[i], with weights[i * max_taps + k].
struct AxisTaps {
  std::vector<int> first;
  std::vector<int> count;
  std::vector<float> weights;
  int max_taps = 0;
};

double Triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// PIL's precompute_coeffs (Resample.c) with the triangle filter (support 1):
// the axis of `in_size` pixels is resized to `resized_size`, of which the
// `n_out` outputs starting at `offset` are kept (the centre crop).
AxisTaps ComputeTaps(int in_size, int resized_size, int offset, int n_out) {
  const double scale = static_cast<double>(in_size) / resized_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = 1.0 * filter_scale;
  AxisTaps taps;
  taps.max_taps = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(static_cast<size_t>(n_out));
  taps.count.resize(static_cast<size_t>(n_out));
  taps.weights.assign(static_cast<size_t>(n_out) * static_cast<size_t>(taps.max_taps), 0.0f);
  std::vector<double> w(static_cast<size_t>(taps.max_taps));
  for (int i = 0; i < n_out; ++i) {
    const double center = (offset + i + 0.5) * scale;
    // (int) truncates toward zero as in PIL; the max/min clamp to the image.
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), in_size);
    const int count = std::min(hi - lo, taps.max_taps);
    double total = 0;
    for (int k = 0; k < count; ++k) {
      w[static_cast<size_t>(k)] = Triangle((k + lo - center + 0.5) / filter_scale);
      total += w[static_cast<size_t>(k)];
    }
    taps.first[static_cast<size_t>(i)] = lo;
    taps.count[static_cast<size_t>(i)] = count;
    for (int k = 0; k < count; ++k) {
      taps.weights[static_cast<size_t>(i) * static_cast<size_t>(taps.max_taps) + static_cast<size_t>(k)] =
          static_cast<float>(total != 0 ? w[static_cast<size_t>(k)] / total : 0.0);
    }
  }
  return taps;
}

// Vertical pass: output row y of (out_h, in_w * C) float = the weighted sum
// of the input rows ytaps names. Contiguous rows, so the compiler vectorises
// the inner loop (uint8 -> float and multiply-add; this file is built with
// -O3, see CMakeLists.txt).
void VerticalPass(const DecodedImage& image, const AxisTaps& ytaps, float* tmp) {
  const size_t row_len = static_cast<size_t>(image.width) * static_cast<size_t>(image.channels);
  for (size_t y = 0; y < ytaps.first.size(); ++y) {
    float* __restrict dst = tmp + y * row_len;
    std::fill(dst, dst + row_len, 0.0f);
    const float* w = ytaps.weights.data() + y * static_cast<size_t>(ytaps.max_taps);
    for (int k = 0; k < ytaps.count[y]; ++k) {
      const uint8_t* __restrict src = image.pixels.data() + static_cast<size_t>(ytaps.first[y] + k) * row_len;
      const float wk = w[k];
      for (size_t i = 0; i < row_len; ++i) dst[i] += wk * static_cast<float>(src[i]);
    }
  }
}

// Horizontal pass over tmp (out_h, in_w, C) into out (C, out_h, out_w),
// normalising as it stores: v * scale[c] - shift[c].
template <int C>
void HorizontalPassNormalize(const float* tmp, int in_w, const AxisTaps& xtaps, int out_h, const float* scale,
                             const float* shift, float* out) {
  const size_t out_w = xtaps.first.size();
  const size_t plane = static_cast<size_t>(out_h) * out_w;
  for (size_t y = 0; y < static_cast<size_t>(out_h); ++y) {
    const float* row = tmp + y * static_cast<size_t>(in_w) * C;
    for (size_t x = 0; x < out_w; ++x) {
      const float* w = xtaps.weights.data() + x * static_cast<size_t>(xtaps.max_taps);
      const float* p = row + static_cast<size_t>(xtaps.first[x]) * C;
      float acc[C] = {};
      for (int k = 0; k < xtaps.count[x]; ++k) {
        const float wk = w[k];
        for (int c = 0; c < C; ++c) acc[c] += wk * p[k * C + c];
      }
      for (int c = 0; c < C; ++c) out[static_cast<size_t>(c) * plane + y * out_w + x] = acc[c] * scale[c] - shift[c];
    }
  }
}

// Converts to spec.channels, resizes and normalises into out (C, H, W). The
// vertical pass runs first (on whole uint8 rows), then the horizontal one on
// the out_h rows left; the result equals PIL's horizontal-first order up to
// float rounding (the filter is separable).
template <int C>
void ResizeNormalizeInto(const DecodedImage& image, const ImageSpec& spec, std::vector<float>* out) {
  int resized_h = spec.height;
  int resized_w = spec.width;
  int top = 0;
  int left = 0;
  if (spec.fit == ImageFit::kShortestEdgeThenCenterCrop) {
    // Scale so that the image covers the target; the other side rounds down
    // as in HF (int(size * long / short)) and so never falls below it.
    const int64_t h = image.height;
    const int64_t w = image.width;
    if (int64_t{spec.height} * w >= int64_t{spec.width} * h) {
      resized_h = spec.height;
      resized_w = std::max(spec.width, static_cast<int>(static_cast<double>(w * spec.height) / static_cast<double>(h)));
    } else {
      resized_w = spec.width;
      resized_h = std::max(spec.height, static_cast<int>(static_cast<double>(h * spec.width) / static_cast<double>(w)));
    }
    top = (resized_h - spec.height) / 2;
    left = (resized_w - spec.width) / 2;
  }
  const AxisTaps xtaps = ComputeTaps(image.width, resized_w, left, spec.width);
  const AxisTaps ytaps = ComputeTaps(image.height, resized_h, top, spec.height);
  std::vector<float> tmp(static_cast<size_t>(spec.height) * static_cast<size_t>(image.width) * C, 0.0f);
  VerticalPass(image, ytaps, tmp.data());
  float scale[C];
  float shift[C];
  for (int c = 0; c < C; ++c) {
    scale[c] = 1.0f / (255.0f * spec.std[static_cast<size_t>(c)]);
    shift[c] = spec.mean[static_cast<size_t>(c)] / spec.std[static_cast<size_t>(c)];
  }
  out->assign(static_cast<size_t>(C) * static_cast<size_t>(spec.height) * static_cast<size_t>(spec.width), 0.0f);
  HorizontalPassNormalize<C>(tmp.data(), image.width, xtaps, spec.height, scale, shift, out->data());
}

// The first `limit` bytes of an image file (all of it when smaller);
// truncated when the file has more. A file over kMaxFileBytes is refused.
struct FileBytes {
  std::string bytes;
  bool truncated = false;
};

StatusOr<FileBytes> ReadImageFileBytes(const std::string& path, int64_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) {
      return Status::NotFound(Describe(path,
                                       "no such image file; check the path in the manifest (relative paths "
                                       "are relative to the manifest's directory)"));
    }
    return Status::IOError(Describe(path, std::string("cannot open the image file: ") + std::strerror(e)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::IOError(Describe(path, S_ISDIR(st.st_mode) ? "is a directory, not an image file"
                                                              : "is not a regular file, so not an image file"));
  }
  if (st.st_size > kMaxFileBytes) {
    ::close(fd);
    return Status::InvalidArgument(
        Describe(path, "image file of " + std::to_string(st.st_size) + " bytes is over the 1 GiB limit; downscale it"));
  }
  FileBytes file;
  file.truncated = st.st_size > limit;
  file.bytes.assign(static_cast<size_t>(std::min<int64_t>(st.st_size, limit)), '\0');
  size_t done = 0;
  while (done < file.bytes.size()) {
    const ssize_t got = ::read(fd, file.bytes.data() + done, file.bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int e = errno;
      ::close(fd);
      return Status::IOError(Describe(path, std::string("cannot read the image file: ") + std::strerror(e)));
    }
    if (got == 0) break;  // shrank while reading: decode what is there
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  file.bytes.resize(done);
  return file;
}

}  // namespace

const char* ImageFormatName(ImageFormat format) {
  return format == ImageFormat::kJpeg ? "JPEG" : "PNG";
}

StatusOr<ImageFormat> DetectImageFormat(std::string_view bytes, const std::string& name_for_errors) {
  auto starts = [&](std::string_view magic) { return bytes.substr(0, magic.size()) == magic; };
  if (starts(std::string_view("\xFF\xD8\xFF", 3))) return ImageFormat::kJpeg;
  if (starts(std::string_view("\x89PNG\r\n\x1A\n", 8))) return ImageFormat::kPng;
  const std::string supported = "; Maestro reads JPEG and PNG: convert the image (e.g. `convert in out.png`)";
  if (bytes.empty()) return Status::InvalidArgument(Describe(name_for_errors, "empty file, not an image"));
  std::string what = "neither a JPEG nor a PNG image (checked by its first bytes, not its name)";
  if (starts("GIF87a") || starts("GIF89a")) what = "a GIF image";
  if (starts("RIFF") && bytes.size() >= 12 && bytes.substr(8, 4) == "WEBP") what = "a WebP image";
  if (starts("BM")) what = "a BMP image (or a file starting with 'BM')";
  if (starts(std::string_view("II*\0", 4)) || starts(std::string_view("MM\0*", 4))) what = "a TIFF image";
  if (bytes.size() >= 12 && bytes.substr(4, 4) == "ftyp") what = "an ISO media file (HEIC/AVIF/MP4)";
  return Status::InvalidArgument(Describe(name_for_errors, what + supported));
}

DecodedImage ConvertChannels(const DecodedImage& image, int channels) {
  if (image.channels == channels) return image;
  DecodedImage out;
  out.height = image.height;
  out.width = image.width;
  out.format = image.format;
  out.channels = channels;
  const size_t n = static_cast<size_t>(image.width) * static_cast<size_t>(image.height);
  out.pixels.resize(n * static_cast<size_t>(channels));
  if (image.channels == 1 && channels == 3) {
    for (size_t i = 0; i < n; ++i) {
      out.pixels[i * 3] = out.pixels[i * 3 + 1] = out.pixels[i * 3 + 2] = image.pixels[i];
    }
  } else if (image.channels == 3 && channels == 1) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t r = image.pixels[i * 3];
      const uint32_t g = image.pixels[i * 3 + 1];
      const uint32_t b = image.pixels[i * 3 + 2];
      out.pixels[i] = static_cast<uint8_t>((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16);
    }
  } else {
    throw Error(Status::Internal("ConvertChannels: " + std::to_string(image.channels) + " -> " +
                                 std::to_string(channels) + " channels is not supported (1 or 3 only)"));
  }
  return out;
}

StatusOr<DecodedImage> DecodeImageBytes(std::string_view bytes, const std::string& name_for_errors,
                                        const DecodeOptions& options) {
  if (options.channels != 0 && options.channels != 1 && options.channels != 3) {
    return Status::InvalidArgument(Describe(name_for_errors, "DecodeOptions::channels is " +
                                                                 std::to_string(options.channels) +
                                                                 "; use 0 (as decoded), 1 (gray) or 3 (RGB)"));
  }
  if (options.max_pixels < 1) {
    return Status::InvalidArgument(Describe(name_for_errors, "DecodeOptions::max_pixels must be at least 1"));
  }
  MAESTRO_ASSIGN_OR_RETURN(const ImageFormat format, DetectImageFormat(bytes, name_for_errors));
  StatusOr<DecodedImage> image = format == ImageFormat::kJpeg
                                     ? DecodeJpeg(bytes, name_for_errors, options.max_pixels, false)
                                     : DecodePng(bytes, name_for_errors, options.max_pixels, options.alpha, false);
  if (!image.ok() || options.channels == 0 || image->channels == options.channels) return image;
  return ConvertChannels(*image, options.channels);
}

StatusOr<DecodedImage> DecodeImageFile(const std::string& path, const DecodeOptions& options) {
  MAESTRO_ASSIGN_OR_RETURN(const FileBytes file, ReadImageFileBytes(path, kMaxFileBytes));
  return DecodeImageBytes(file.bytes, path, options);
}

StatusOr<std::pair<int, int>> ReadImageSize(const std::string& path, int64_t max_pixels) {
  if (max_pixels < 1) return Status::InvalidArgument(Describe(path, "ReadImageSize: max_pixels must be at least 1"));
  // The header is almost always in the first 64 KiB (EXIF and ICC segments
  // can push a JPEG's SOF further): read that, and the whole file only when
  // the header parse ran out of bytes.
  constexpr int64_t kHeadBytes = int64_t{64} << 10;
  MAESTRO_ASSIGN_OR_RETURN(FileBytes file, ReadImageFileBytes(path, kHeadBytes));
  MAESTRO_ASSIGN_OR_RETURN(const ImageFormat format, DetectImageFormat(file.bytes, path));
  const auto header = [&] {
    return format == ImageFormat::kJpeg ? DecodeJpeg(file.bytes, path, max_pixels, true)
                                        : DecodePng(file.bytes, path, max_pixels, AlphaHandling::kDrop, true);
  };
  StatusOr<DecodedImage> image = header();
  if (!image.ok() && image.status().code() == StatusCode::kCorruption && file.truncated) {
    MAESTRO_ASSIGN_OR_RETURN(file, ReadImageFileBytes(path, kMaxFileBytes));
    image = header();
  }
  if (!image.ok()) return image.status();
  return std::make_pair(image->height, image->width);
}

Status ValidateImageSpec(const ImageSpec& spec) {
  if (spec.channels != 1 && spec.channels != 3) {
    return Status::InvalidArgument("image spec: channels is " + std::to_string(spec.channels) +
                                   "; a vision tower takes 1 (gray) or 3 (RGB) channels");
  }
  if (spec.height < 1 || spec.width < 1 || spec.height > kMaxSpecSide || spec.width > kMaxSpecSide) {
    return Status::InvalidArgument("image spec: size " + std::to_string(spec.height) + "x" +
                                   std::to_string(spec.width) + " (height x width) must be 1.." +
                                   std::to_string(kMaxSpecSide) + " on each side");
  }
  for (int c = 0; c < spec.channels; ++c) {
    const float mean = spec.mean[static_cast<size_t>(c)];
    const float std = spec.std[static_cast<size_t>(c)];
    if (!std::isfinite(mean) || !std::isfinite(std) || !(std > 0.0f)) {
      return Status::InvalidArgument("image spec: channel " + std::to_string(c) + " has mean " + std::to_string(mean) +
                                     " and std " + std::to_string(std) +
                                     "; both must be finite and std > 0 (see the model's preprocessor_config.json)");
    }
  }
  return Status::Ok();
}

StatusOr<std::vector<float>> ResizeAndNormalize(const DecodedImage& image, const ImageSpec& spec) {
  MAESTRO_RETURN_IF_ERROR(ValidateImageSpec(spec));
  if (image.height < 1 || image.width < 1 || (image.channels != 1 && image.channels != 3) ||
      image.pixels.size() !=
          static_cast<size_t>(image.height) * static_cast<size_t>(image.width) * static_cast<size_t>(image.channels)) {
    return Status::InvalidArgument("ResizeAndNormalize: the image is empty or its pixels do not match " +
                                   std::to_string(image.height) + "x" + std::to_string(image.width) + "x" +
                                   std::to_string(image.channels));
  }
  std::vector<float> out;
  if (image.channels != spec.channels) {
    const DecodedImage converted = ConvertChannels(image, spec.channels);
    if (spec.channels == 1)
      ResizeNormalizeInto<1>(converted, spec, &out);
    else
      ResizeNormalizeInto<3>(converted, spec, &out);
  } else if (spec.channels == 1) {
    ResizeNormalizeInto<1>(image, spec, &out);
  } else {
    ResizeNormalizeInto<3>(image, spec, &out);
  }
  return out;
}

StatusOr<std::vector<float>> LoadImageForModel(const std::string& path, const ImageSpec& spec,
                                               const DecodeOptions& options) {
  MAESTRO_RETURN_IF_ERROR(ValidateImageSpec(spec));
  DecodeOptions decode = options;
  decode.channels = 0;  // ResizeAndNormalize converts (gray stays 1 channel until then: 3x less to decode)
  MAESTRO_ASSIGN_OR_RETURN(const DecodedImage image, DecodeImageFile(path, decode));
  auto out = ResizeAndNormalize(image, spec);
  if (!out.ok()) return out.status().WithContext(path);
  return out;
}

StatusOr<std::vector<float>> Patchify(const std::vector<float>& chw, int channels, int height, int width, int patch) {
  if (patch < 1 || channels < 1 || height < 1 || width < 1) {
    return Status::InvalidArgument("Patchify: channels, height, width and patch must be >= 1 (got " +
                                   std::to_string(channels) + ", " + std::to_string(height) + ", " +
                                   std::to_string(width) + ", " + std::to_string(patch) + ")");
  }
  if (height % patch != 0 || width % patch != 0) {
    return Status::InvalidArgument("Patchify: image " + std::to_string(height) + "x" + std::to_string(width) +
                                   " is not a multiple of the patch size " + std::to_string(patch) +
                                   "; set the image spec's height and width to multiples of it");
  }
  const size_t c_n = static_cast<size_t>(channels);
  const size_t h_n = static_cast<size_t>(height);
  const size_t w_n = static_cast<size_t>(width);
  const size_t p = static_cast<size_t>(patch);
  if (chw.size() != c_n * h_n * w_n) {
    return Status::InvalidArgument("Patchify: got " + std::to_string(chw.size()) + " values for (" +
                                   std::to_string(channels) + ", " + std::to_string(height) + ", " +
                                   std::to_string(width) + ")");
  }
  const size_t grid_w = w_n / p;
  const size_t num_patches = (h_n / p) * grid_w;
  const size_t patch_len = c_n * p * p;
  std::vector<float> out(num_patches * patch_len);
  for (size_t n = 0; n < num_patches; ++n) {
    const size_t y0 = (n / grid_w) * p;
    const size_t x0 = (n % grid_w) * p;
    float* dst = out.data() + n * patch_len;
    for (size_t c = 0; c < c_n; ++c) {
      for (size_t dy = 0; dy < p; ++dy) {
        const float* src = chw.data() + (c * h_n + y0 + dy) * w_n + x0;
        std::copy(src, src + p, dst + (c * p + dy) * p);
      }
    }
  }
  return out;
}

}  // namespace maestro::datasets
