// SPDX-License-Identifier: Apache-2.0
// libFuzzer: any bytes as a spec must parse, validate and plan (or fail with
// a Status) without crashing, hanging or tripping ASan/UBSan, and what comes
// out must hold the invariants of issue #18: job.sbatch, the report and every
// message carry no control character but their own line breaks.
// Nothing is skipped by size or shape: the spec reader's limits (32
// sections, 8 modalities, compiler/spec.h) bound the work. The spec's
// folder and file name vary with the input's length, among folders that do
// not exist, this tree's Hugging Face configs (tests/compiler/data: an
// hf_config = "hf/llama2_7b.json" reads a real file) and names with a
// newline or invalid UTF-8; so does local mode.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "compiler/compile.h"
#include "compiler/spec.h"

namespace {

struct Place {
  const char* base_dir;
  const char* path;
};

const Place kPlaces[] = {
    {"/nonexistent", "fuzz.toml"},
    {MAESTRO_SOURCE_DIR "/tests/compiler/data", MAESTRO_SOURCE_DIR "/tests/compiler/data/fuzz.toml"},
    {".", "x\n#SBATCH --account=other\ntouch F\n#.toml"},
    {"dir\x1b[2J", "dir\x1b[2J/spec.toml"},
    {"/tmp", "spec\xff.toml"},
};

// True when `s` holds a control character other than '\n'.
bool HasControlCharacter(const std::string& s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n') || u == 0x7F) return true;
  }
  return false;
}

void Check(bool invariant) {
  if (!invariant) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const Place& place = kPlaces[size % (sizeof(kPlaces) / sizeof(kPlaces[0]))];
  auto spec = maestro::compiler::ParseSpecString(text, place.path, place.base_dir);
  if (!spec.ok()) {
    Check(!HasControlCharacter(spec.status().message()));
    return 0;
  }
  maestro::compiler::CompileOptions options;
  if ((size / 8) % 4 == 0) options.local_ranks = 4;
  auto result = maestro::compiler::Compile(*spec, options);
  if (!result.ok()) {
    Check(!HasControlCharacter(result.status().message()));
    return 0;
  }
  Check(!HasControlCharacter(result->sbatch));
  Check(!HasControlCharacter(result->report));
  Check(!HasControlCharacter(result->explain));
  return 0;
}
