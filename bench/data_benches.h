// SPDX-License-Identifier: Apache-2.0
// The measurements behind `maestro-bench data` (users' models and data in),
// each also a benchmark of its own: the Megatron corpus reader against pread
// (data_bench.cc), image files to a vision tower's input, fixed grid and
// native resolution (image_bench.cc),
// audio files to a Whisper encoder's input (audio_bench.cc) and a safetensors
// checkpoint into a section's model against read() (weights_bench.cc).
#pragma once

#include <nlohmann/json.hpp>

#include "bench/registry.h"

namespace maestro::bench {

nlohmann::json MegatronIdxBench(const BenchOptions& options);
nlohmann::json ImageDecodeBench(const BenchOptions& options);
nlohmann::json NativeImageBench(const BenchOptions& options);
nlohmann::json AudioFeaturesBench(const BenchOptions& options);
nlohmann::json SafetensorsLoadBench(const BenchOptions& options);

}  // namespace maestro::bench
