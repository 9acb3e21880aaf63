// SPDX-License-Identifier: Apache-2.0
// The compact teacher rows of knowledge distillation (issue #41): computed
// once on the teacher's side from its logits, carried to the student instead
// of the teacher's hidden states, and the student's KL term from them. Two
// forms (docs/distillation.md, "Teacher row forms"):
//  - top-K: the teacher's K largest logits and their ids (Megatron-LM's
//    offline-logits distillation, K = 128); the student's KL is
//    MaskedPositionLoss's top-k formula (runtime/vocab_loss.h), biased;
//  - sampled: n ids drawn i.i.d. from the teacher's softmax(logits / T) and
//    its entropy, the random-sampling KD of Anshumann et al., "Sparse Logit
//    Sampling: Accelerating Knowledge Distillation in LLMs" (ACL 2025,
//    arXiv:2503.16870); the student's KL estimate has an unbiased gradient.
//
// Wire layouts, fp32, one row per position:
//   top-K:   width 2K: [0, K) the teacher's K largest raw logits (before any
//            temperature), rounded to `values_dtype` and back to fp32, in
//            descending order; [K, 2K) their token ids as floats (exact: the
//            vocabulary must be below 2^24, checked).
//   sampled: width n + 1: [0, n) n token ids drawn from softmax(logits / T)
//            as floats; [n] H(softmax(logits / T)) in nats.
//
// Owns: TopKTeacherRows, SampledTeacherRows, TopKRowsKl, SampledRowsKl.
// Runtime-internal: includes torch; only runtime/*.cc and tests/runtime
// include it. May call: libtorch, base (splitmix.h). Thread safety: pure
// functions of their arguments.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace maestro::runtime {

constexpr int64_t kMaxExactFloatId = int64_t{1} << 24;

// The teacher-side functions work over chunks of positions so that one
// (B, positions, V) temporary holds at most this many elements: top-K one
// fp32 copy of the logits' chunk (128 MiB), sampling at most two fp64 ones
// at once (2 x 256 MiB, the bytes of 2 x 64 Mi floats), beside the caller's
// logits. At V = 152K and B = 1: 220 positions a chunk.
constexpr int64_t kKdRowsChunkElements = int64_t{1} << 25;

// teacher_logits: (B, L, V) any float dtype, any device. Returns (B, L, 2K)
// fp32 on the same device. Not differentiable (the teacher is frozen).
torch::Tensor TopKTeacherRows(const torch::Tensor& teacher_logits, int64_t k, torch::ScalarType values_dtype);

// teacher_logits: (B, L, V). Draw j of position l of sample b is a pure
// function of (seed, sample_ids[b], first_position + l, j) -- the same on any
// device, any batch composition, any chunking over positions (so a resume or
// another layout redraws identical ids): its uniform u comes from SplitMix64
// on the host, the id is the inverse CDF of softmax(logits / T) at u, in
// fp64. sample_ids: B entries. Returns (B, L, n + 1) fp32 on the same device,
// n = draws. Not differentiable.
torch::Tensor SampledTeacherRows(const torch::Tensor& teacher_logits, int64_t draws, double temperature, uint64_t seed,
                                 const std::vector<int64_t>& sample_ids, int64_t first_position);

// student_logits: (B, L, V), differentiable; rows: (B, L, 2K) top-K rows.
// Returns (B, L) fp32 KL (not multiplied by T^2 or alpha; the caller does
// that), exactly the formula MaskedPositionLoss uses for top_k: the teacher
// renormalized over its K at temperature T against the student's
// log_softmax(z / T) at those ids.
torch::Tensor TopKRowsKl(const torch::Tensor& student_logits, const torch::Tensor& rows, double temperature);

// student_logits: (B, L, V), differentiable; rows: (B, L, n + 1) sampled
// rows (ids below V). Returns (B, L) fp32 KL_hat = (1/n) sum_j
// -log s_T[id_j] - H(p_T), s_T = softmax(z / T): its expectation is
// KL(p_T || s_T), its gradient's expectation that of KL(p_T || s_T).
torch::Tensor SampledRowsKl(const torch::Tensor& student_logits, const torch::Tensor& rows, double temperature);

}  // namespace maestro::runtime
