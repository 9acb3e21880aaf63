// SPDX-License-Identifier: Apache-2.0
// The gradient sync's bucket (docs/gradient_sync.md): one constant that the
// runtime (runtime/parallel/data_parallel.h, distributed_optimizer.h) packs
// gradients by and the memory model (compiler/memory_model.cc) prices the
// sync's transient with. Torch-free, header-only.
// May call: nothing. Thread safety: constant data.
#pragma once

#include <cstdint>

namespace maestro::plan {

// 25 MiB: PyTorch DDP's default bucket_cap_mb
// (torch.nn.parallel.DistributedDataParallel, "bucket_cap_mb=25"). The
// gradient all-reduce and ZeRO-1's reduce-scatter move at most this many
// bytes of gradients at a time.
inline constexpr int64_t kGradientBucketBytes = int64_t{25} << 20;

}  // namespace maestro::plan
