// SPDX-License-Identifier: Apache-2.0
// The one rule for which tensor-parallel degrees split an encoder (ViT,
// audio encoder) or a projector, as runtime/models/encoders.h
// ShardEncoderForTensorParallel splits them (docs/encoder_tp.md): TP must
// divide the attention heads and the MLP's ffn_hidden (and a ViT patch
// merger's hidden width: extra.merger_hidden, or spatial_merge^2 x hidden),
// a projector's out_dim. The planner (compiler/candidates.h TpSplitsHeads)
// and the runtime (runtime/models/encoders.h CheckEncoderSplitsOverTp) both
// call it. A decoder's rule is not here (compiler/candidates.h,
// runtime/models/decoder.cc).
// Torch-free. May call: base, plan. Thread safety: pure functions.
#pragma once

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::plan {

// Ok when TP of degree `tp` (>= 1) splits `model`, an encoder or projector;
// else InvalidArgument naming the sizes and the one `tp` does not divide.
// A decoder: InvalidArgument (not an encoder).
Status CheckEncoderTensorParallelSplit(const ModelDesc& model, int tp);

}  // namespace maestro::plan
