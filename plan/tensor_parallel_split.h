// SPDX-License-Identifier: Apache-2.0
// The one rule for which tensor-parallel degrees split a model, as the
// runtime splits it: a decoder as runtime/models/decoder.cc
// ShardDecoderForTensorParallel does (TP divides the attention heads, the
// KV heads (no KV-head replication) and the MLP's ffn_hidden; a MoE decoder's
// expert and shared-expert widths too), an encoder (ViT, audio encoder) or a
// projector as runtime/models/encoders.h ShardEncoderForTensorParallel does
// (docs/encoder_tp.md): TP divides the attention heads and the MLP's
// ffn_hidden (and a ViT patch merger's hidden width: extra.merger_hidden, or
// spatial_merge^2 x hidden), a projector's out_dim. The planner
// (compiler/candidates.h TpSplitsHeads, the step model's pass checks) and
// the runtime both call it, so the planner never emits a TP the runtime
// refuses.
// Expert parallelism's rule is here too: EP of degree `ep` splits a MoE
// decoder whose experts it divides (runtime/models/decoder.cc
// ShardDecoderForExpertParallel keeps experts/ep of them per rank).
// Torch-free. May call: base, plan. Thread safety: pure functions.
#pragma once

#include "base/status.h"
#include "plan/plan.h"

namespace maestro::plan {

// Ok when TP of degree `tp` (>= 1) splits `model` (any kind); else
// InvalidArgument naming the sizes and the one `tp` does not divide.
Status CheckTensorParallelSplit(const ModelDesc& model, int tp);

// The same rule for an encoder or projector only (a decoder:
// InvalidArgument, not an encoder).
Status CheckEncoderTensorParallelSplit(const ModelDesc& model, int tp);

// Ok when EP of degree `ep` (>= 1) splits `model`'s routed experts: ep 1,
// or a MoE decoder whose experts ep divides; else InvalidArgument naming them.
Status CheckExpertParallelSplit(const ModelDesc& model, int ep);

}  // namespace maestro::plan
