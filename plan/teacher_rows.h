// SPDX-License-Identifier: Apache-2.0
// What a KD teacher sends its student, one rule for the compiler (edge bytes,
// head FLOPs on which side, memory, the spool's pricing) and the runtime
// (row shapes, the teacher's and the student's computation, the spool's
// codec). The edge's tensor names the form (docs/distillation.md,
// "Teacher row forms"):
//   "teacher_hidden"  the teacher's final hidden states (C wide); the student
//                     holds the teacher's LM head and makes the logits;
//   "teacher_topk"    the teacher's K largest logits and their ids (2K wide
//                     on the wire), computed on the teacher, K = loss.top_k;
//   "teacher_sampled" n token ids drawn from the teacher's distribution at
//                     the KD temperature and its entropy (n + 1 wide), n =
//                     loss.draws: the unbiased sparse estimator of
//                     Anshumann et al. (ACL 2025).
// The wire carries fp32 (ids exact below 2^24); the spool stores the compact
// bytes of SpoolBytesPerPosition.
// Torch-free. May call: plan/plan.h. Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "plan/plan.h"

namespace maestro::plan {

enum class TeacherRowsForm { kHidden, kTopK, kSampled };

inline constexpr const char* kTeacherHiddenTensor = "teacher_hidden";
inline constexpr const char* kTeacherTopKTensor = "teacher_topk";
inline constexpr const char* kTeacherSampledTensor = "teacher_sampled";

// Draws per position of the sampled form when the loss names none: our
// choice, not a measured optimum. The estimator is unbiased at any n and its
// variance falls as 1/n (Anshumann et al., "Sparse Logit Sampling:
// Accelerating Knowledge Distillation in LLMs", ACL 2025, arXiv:2503.16870);
// 16 draws take 68 bytes a position in the spool, a tenth of top-128's 768.
inline constexpr int kDefaultSampledDraws = 16;
inline constexpr int kMaxSampledDraws = 1024;
// Token ids travel as fp32 on the wire: exact below 2^24.
inline constexpr int64_t kMaxRowsVocab = int64_t{1} << 24;

// The form an edge's tensor names; nullopt for a tensor that is no KD row.
std::optional<TeacherRowsForm> TeacherRowsFormOf(const std::string& tensor);
const char* TeacherRowsFormName(TeacherRowsForm form);  // "hidden", "topk", "sampled"

// The draws of the sampled form: loss.draws, or kDefaultSampledDraws when 0.
int SampledDraws(const LossDesc& loss);

// Values per position on the wire: C (hidden), 2K, n + 1.
int64_t TeacherRowsWidth(TeacherRowsForm form, int64_t teacher_hidden, const LossDesc& loss);

// The spool's element type of hidden rows and of top-K values: "bf16",
// "f16" or "f32" (Plan::spool_dtype); its bytes. REQUIRES: a valid name.
// (plan.h IsSpoolDtype says which names are valid.)
int64_t SpoolValueBytes(const std::string& spool_dtype);

// Bytes a position's row takes in the spool: hidden C x value bytes; top-K
// K x (value bytes + 4-byte id); sampled 4 x (n ids + 1 entropy).
int64_t SpoolBytesPerPosition(TeacherRowsForm form, int64_t teacher_hidden, const LossDesc& loss,
                              const std::string& spool_dtype);

// What a decoder section sends a KD student: the form its out edge's tensor
// names, and the student's loss (its K, draws and temperature).
struct TeacherRowsSent {
  TeacherRowsForm form = TeacherRowsForm::kHidden;
  LossDesc loss;
  std::string student;
};
// Section `section` of `plan` when it is a decoder with an edge into a
// decoder whose tensor names a form; nullopt otherwise.
std::optional<TeacherRowsSent> TeacherRowsOf(const Plan& plan, int section);

// True when section `section` of `plan` keeps a spool of its output rows
// (runtime/executor.cc opens it): a forward-only section that feeds others,
// not expert-parallel (a spool hit would skip an exchange its EP peers wait
// for); a pipeline- or context-parallel one only when it runs ahead, a
// tensor-parallel one when it runs ahead or no section feeds it. A
// model-parallel section's spool is written by the rank that sends
// downstream (a fused component's: TP rank 0 of each replica; its TP peers
// read it). A fused section keeps none itself: its components do, as their
// expanded sections (plan::ExpandFusedSections).
bool KeepsSpool(const Plan& plan, int section);
// The disk one writing rank (DP replica) of such a section may take: the
// job's spool_gib split equally over the sections that keep a spool (a fused
// section's components counted as their expanded sections:
// plan::ExpandFusedSections), then over their replicas. 0 for a section
// that keeps none (a fused one: pass the expanded plan and the component).
int64_t SpoolBudgetPerWriter(const Plan& plan, int section);

// True when the student holds the teacher's head and makes its logits (the
// hidden form); the other forms run the head on the teacher.
inline bool StudentHoldsTeacherHead(TeacherRowsForm form) {
  return form == TeacherRowsForm::kHidden;
}

}  // namespace maestro::plan
