// SPDX-License-Identifier: Apache-2.0
// libFuzzer: any bytes as a spec must parse, validate and plan (or fail with
// a Status) without crashing, hanging or tripping ASan/UBSan.
#include <cstddef>
#include <cstdint>
#include <string>

#include "compiler/compile.h"
#include "compiler/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16384) return 0;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = maestro::compiler::ParseSpecString(text, "fuzz.toml", "/nonexistent");
  if (!spec.ok()) return 0;
  // Keep each run short: large clusters are legal but slow to enumerate.
  for (const auto& g : spec->cluster.gpu_types) {
    if (g.nodes * static_cast<int64_t>(g.gpus_per_node) > 4096) return 0;
  }
  if (spec->sections.size() > 8) return 0;
  auto result = maestro::compiler::Compile(*spec, maestro::compiler::CompileOptions{});
  (void)result;
  return 0;
}
