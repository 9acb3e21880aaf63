// SPDX-License-Identifier: Apache-2.0
// How fast one decoder section trains on one device: the measurement behind
// `maestro-bench gpu` (a ~1B decoder in bf16 on CUDA; its MFU) and its CPU
// smoke test. No torch types here: bench/ includes it without torch's headers.
//
// One step = forward of (micro_batch, seq_len) random token ids -> logits
// (B, T, V) -> cross-entropy against the ids shifted by one (fp32) ->
// backward -> AdamW step; `warmup` untimed steps, then `steps` timed ones
// (CUDA synchronized around them).
// May call: libtorch, runtime/models. Thread-safety: one call at a time.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::runtime {

struct DecoderSpeedOptions {
  std::string device = "cuda";  // "cuda" or "cpu"
  bool bf16 = true;             // parameters and activations in bf16 (else fp32)
  int micro_batch = 4;
  int seq_len = 2048;
  int warmup = 3;
  int steps = 10;
};

struct DecoderSpeed {
  int64_t params = 0;             // parameters of the built model
  double seconds_per_step = 0.0;  // mean over the timed steps
  double tokens_per_second = 0.0;
  std::string device;  // what it ran on
  std::string dtype;   // "bf16" or "fp32"
};

// Whether libtorch can run on CUDA here; when not, *why says why (built
// without CUDA, or no device visible).
bool CudaUsable(std::string* why);

// REQUIRES: desc.kind == kDecoder. FailedPrecondition when the device is
// CUDA and CudaUsable() is false.
StatusOr<DecoderSpeed> MeasureDecoderTraining(const plan::ModelDesc& desc, const DecoderSpeedOptions& options);

}  // namespace maestro::runtime
