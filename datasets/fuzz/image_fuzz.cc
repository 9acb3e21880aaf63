// SPDX-License-Identifier: Apache-2.0
// libFuzzer: any bytes as an image file must decode (and then resize,
// normalise and patchify) or fail with a Status, without crashing, hanging,
// exiting or tripping ASan/UBSan. The libraries themselves (libjpeg-turbo,
// libpng) are not instrumented; our callbacks, longjmps and buffers are.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "datasets/image_decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace ds = maestro::datasets;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ds::DecodeOptions options;
  options.max_pixels = 1 << 22;  // 4 Mpx keeps each run fast; the limit path is exercised too
  options.alpha = (size % 2 == 0) ? ds::AlphaHandling::kDrop : ds::AlphaHandling::kCompositeOnWhite;
  auto image = ds::DecodeImageBytes(bytes, "fuzz-input", options);
  if (!image.ok()) return 0;
  if (image->pixels.size() !=
      static_cast<size_t>(image->height) * static_cast<size_t>(image->width) * static_cast<size_t>(image->channels)) {
    __builtin_trap();  // a decoded image must have exactly its pixels
  }
  ds::ImageSpec spec;
  spec.channels = (size % 3 == 0) ? 1 : 3;
  spec.height = 16;
  spec.width = 24;
  spec.fit = (size % 5 == 0) ? ds::ImageFit::kShortestEdgeThenCenterCrop : ds::ImageFit::kStretch;
  auto chw = ds::ResizeAndNormalize(*image, spec);
  if (!chw.ok()) __builtin_trap();  // a valid image and spec always resize
  auto patches = ds::Patchify(*chw, spec.channels, spec.height, spec.width, 8);
  if (!patches.ok() || patches->size() != chw->size()) __builtin_trap();
  return 0;
}
