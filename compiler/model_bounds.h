// SPDX-License-Identifier: Apache-2.0
// The bounds a model description must keep (every count and product of
// ComputeModelFacts below 2^62) and the range checks that name the key out
// of them: shared by compiler/model.cc (CheckModelShape) and
// compiler/hf_config_import.cc (the Hugging Face importers).
// May call: base, plan. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::compiler {

inline constexpr int64_t kMaxHidden = int64_t{1} << 18;
inline constexpr int64_t kMaxLayers = 1024;
inline constexpr int64_t kMaxFfn = int64_t{1} << 20;
inline constexpr int64_t kMaxVocab = int64_t{1} << 22;
inline constexpr int64_t kMaxExperts = 512;
inline constexpr int64_t kMaxImage = int64_t{1} << 14;
inline constexpr int64_t kMaxFrames = int64_t{1} << 20;

// `what` = v must lie in [lo, hi]; on failure *key names `what` (the key
// the message is about, for the caller's position).
Status RequireRange(std::string* key, const std::string& where, const char* what, int64_t v, int64_t lo, int64_t hi);

// The same for a value of desc.extra (a double there): compared before any
// conversion to an integer, which would be undefined past 2^63.
Status RequireExtraRange(std::string* key, const std::string& where, const plan::ModelDesc& d, const char* what,
                         double fallback, int64_t lo, int64_t hi);

}  // namespace maestro::compiler
