// SPDX-License-Identifier: Apache-2.0
// Model FLOPs: the one rule of how many floating-point operations a model's
// forward pass costs per token and per sequence. The compiler prices and
// plans by it (compiler/model.cc ComputeModelFacts: flops_per_token,
// attention_flops_per_token, matmul_params), and the runtime reports each
// section's model FLOPs per second by it from the real, unpadded lengths of
// the sequences it ran (runtime/section_work.h, metrics.jsonl).
//
// The rule: 2 FLOPs per multiply-accumulate of every weight matrix a token
// passes through (MoE: the router, the routed experts and the shared expert
// only; a decoder's LM head even when tied to the embedding; embedding
// lookups excluded; a ViT's patch stem and patch merger, the merger's per
// patch; an audio encoder's two convolutions, conv1 at twice the output
// rate), plus the attention core (scores and weighted values),
// 4 * keys * heads * head_dim per token and layer, where the keys a query
// attends are the whole sequence for encoders (ViT, audio encoder) and the
// causal average (half of it; with a sliding window W shorter than the
// sequence: W - W^2 / (2 * seq_len)) for decoders. A projector has no
// attention. Training costs 3 forwards (the backward twice the forward);
// a forward-only section 1.
// May call: base, plan (model_desc). Torch-free. Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "plan/plan.h"

namespace maestro::plan {

// Weights of the matrix products one token goes through (see above).
// REQUIRES: a desc the compiler's CheckModelShape accepts.
int64_t MatmulParamsPerToken(const ModelDesc& desc);

// Forward FLOPs per token of the attention core in a sequence of `seq_len`
// tokens, over all layers (0 for a projector).
double AttentionFlopsPerToken(const ModelDesc& desc, double seq_len);

// Forward FLOPs per token in a sequence of `seq_len` tokens:
// 2 * MatmulParamsPerToken + AttentionFlopsPerToken.
double ForwardFlopsPerToken(const ModelDesc& desc, double seq_len);

// Forward FLOPs of one sequence of `tokens` tokens (a decoder's sample, a
// ViT's image, an audio encoder's clip; a projector's rows, which attend
// nothing): tokens * ForwardFlopsPerToken(desc, tokens). 0 when tokens <= 0.
double SequenceForwardFlops(const ModelDesc& desc, int64_t tokens);

// Model FLOPs of a section's work of `forward_flops`: x3 when it trains
// (forward, and a backward of twice the forward), x1 when forward-only.
double ModelFlopsOfForward(SectionMode mode, double forward_flops);

// Tokens a ViT attends over per image: its patches, + the class token when
// it has one (extra.cls_token; absent: the CLIP and HF ViT layouts have
// one, the built-in and Qwen2-VL towers none: plan::VitLayout).
int64_t VitSequenceTokens(const ModelDesc& desc);

// Frames an audio encoder attends over per clip: ceil(audio_frames / 2),
// what its stride-2 convolution leaves of the clip's log-mel frames.
int64_t AudioSequenceTokens(const ModelDesc& desc);

}  // namespace maestro::plan
