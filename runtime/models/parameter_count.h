// SPDX-License-Identifier: Apache-2.0
// The parameter count of the model the runtime builds, without torch types:
// the runtime's cost model and the tests call it from torch-free files. The
// compiler counts by formula (compiler/model.h); tests/runtime hold the two
// against each other. Defined in runtime/models/encoders.cc (BuildModel on
// the meta device). May call: plan, base. Thread-safety: pure function.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::runtime {

// The number of trainable parameters of the model the runtime builds from
// desc, counted on the built module (on torch's meta device: nothing is
// allocated, so a 70B desc is fine). Tied embeddings count once; the audio
// encoder's position table is a (frozen) parameter, as in Whisper.
StatusOr<int64_t> ParameterCount(const plan::ModelDesc& desc);

}  // namespace maestro::runtime
