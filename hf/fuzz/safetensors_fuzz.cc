// SPDX-License-Identifier: Apache-2.0
// Arbitrary bytes as a whole safetensors file: the header checks must refuse
// or accept, never crash, and an accepted file's views stay inside it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "hf/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto header = maestro::hf::ParseSafetensorsHeader(bytes, "fuzz.safetensors");
  if (!header.ok()) return 0;
  for (const auto& t : header->tensors) {
    if (header->data_start + t.end > size || t.end < t.begin) std::abort();
  }
  return 0;
}
