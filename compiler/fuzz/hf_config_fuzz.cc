// SPDX-License-Identifier: Apache-2.0
// libFuzzer: any bytes as a Hugging Face config.json. ModelFromHfConfig
// refuses or accepts without crashing or tripping ASan/UBSan (no product of
// the config's numbers may overflow); an accepted model passes
// CheckModelShape and its facts are counted (ComputeModelFacts at its
// natural length and at the longest --seq-len) without overflow.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "compiler/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto desc = maestro::compiler::ModelFromHfConfig(text, "fuzz.json");
  if (!desc.ok()) return 0;
  if (!maestro::compiler::CheckModelShape(*desc, "fuzz.json").ok()) std::abort();
  for (int64_t seq_len : {int64_t{0}, int64_t{1} << 24}) {
    const maestro::compiler::ModelFacts f = maestro::compiler::ComputeModelFacts(*desc, seq_len);
    if (f.params <= 0 || f.active_params > f.params || !std::isfinite(f.flops_per_token)) std::abort();
  }
  (void)maestro::compiler::NaturalTokens(*desc, 4096);
  return 0;
}
