// SPDX-License-Identifier: Apache-2.0
// Data parallelism across a section's replicas: the gradient all-reduce
// before the optimizer step (a sum, not a mean: runtime/section_runner.h's
// loss scaling makes the sum the step's gradient), in buckets of a bounded
// size (docs/gradient_sync.md).
// Runtime-internal (torch). May call: launcher, plan (the bucket size),
// runtime/collectives, libtorch.
// Thread safety: one thread per process.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "launcher/communicators.h"
#include "plan/gradient_bucket.h"

namespace maestro::runtime {

// The bucket size this process uses (the gradient all-reduce's and ZeRO-1's
// reduce-scatter's): MAESTRO_GRADIENT_BUCKET_BYTES when set to a positive
// integer (tests make several buckets of a tiny model with it), else
// plan::kGradientBucketBytes (25 MiB, PyTorch DDP's bucket_cap_mb), which
// compiler/memory_model.cc prices.
int64_t GradientBucketBytes();
// How many buckets AllReduceGradients uses for `elements` fp32 gradients.
int64_t GradientBucketCount(int64_t elements, int64_t bucket_bytes);

// Sums the gradients of `params` (each with a defined fp32 .grad(), any
// shape) over `group` and writes the sums back; a no-op for a group of one.
// The gradients are packed, in order, into one bucket of at most
// `bucket_bytes` (a gradient larger than a bucket goes in slices) and the
// bucket is all-reduced, then copied back, bucket after bucket: what this
// holds beyond the gradients is one bucket (and MPI's reduction buffer of
// it), not a flat copy of them all. The waits count in *blocked_seconds.
Status AllReduceGradients(launcher::Backend& group, const std::vector<torch::Tensor>& params, double* blocked_seconds,
                          int64_t bucket_bytes = GradientBucketBytes());

}  // namespace maestro::runtime
