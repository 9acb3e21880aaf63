// SPDX-License-Identifier: Apache-2.0
// libFuzzer: any bytes as a --profiles file (the JSON array maestro-worker
// --profile writes). plan::ProfilePointsFromJson and the compiler's checks
// (ProfilesFromPoints) refuse or accept without crashing or tripping
// ASan/UBSan; accepted points that name the fixed spec's sections are
// planned with (Compile with extra_profiles: the measured cost lines).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "compiler/compile.h"
#include "compiler/spec.h"
#include "plan/profile.h"

namespace {

// Two CPU sections, "enc" feeding "llm": small enough to plan in a few
// milliseconds.
const char* const kSpec = R"([job]
name = "fuzz"
[cluster]
nodes = 2
gpus_per_node = 4
[cluster.gpu.cpu]
cpu = true
[data]
global_batch = 8
seq_len = 32
[models.enc]
kind = "vit"
hidden = 32
layers = 1
heads = 2
ffn_hidden = 64
image_size = 28
patch_size = 7
channels = 1
[models.llm]
kind = "decoder"
hidden = 32
layers = 1
heads = 2
ffn_hidden = 64
vocab = 64
[[section]]
name = "enc"
model = "enc"
[[section]]
name = "llm"
model = "llm"
inputs = ["enc"]
)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto spec = maestro::compiler::ParseSpecString(kSpec, "fuzz.toml", "/nonexistent");
  if (!spec.ok()) std::abort();
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto points = maestro::plan::ProfilePointsFromJson(text);
  if (!points.ok()) return 0;
  auto profiles = maestro::compiler::ProfilesFromPoints(*points, "fuzz.json");
  if (!profiles.ok()) return 0;
  maestro::compiler::CompileOptions options;
  options.extra_profiles = *profiles;
  auto result = maestro::compiler::Compile(*spec, options);
  (void)result;
  return 0;
}
