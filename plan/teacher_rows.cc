// SPDX-License-Identifier: Apache-2.0
#include "plan/teacher_rows.h"

#include <algorithm>

namespace maestro::plan {

std::optional<TeacherRowsForm> TeacherRowsFormOf(const std::string& tensor) {
  if (tensor == kTeacherHiddenTensor) return TeacherRowsForm::kHidden;
  if (tensor == kTeacherTopKTensor) return TeacherRowsForm::kTopK;
  if (tensor == kTeacherSampledTensor) return TeacherRowsForm::kSampled;
  return std::nullopt;
}

const char* TeacherRowsFormName(TeacherRowsForm form) {
  switch (form) {
    case TeacherRowsForm::kHidden: return "hidden";
    case TeacherRowsForm::kTopK: return "topk";
    case TeacherRowsForm::kSampled: return "sampled";
  }
  return "?";
}

int SampledDraws(const LossDesc& loss) {
  return loss.draws > 0 ? loss.draws : kDefaultSampledDraws;
}

int64_t TeacherRowsWidth(TeacherRowsForm form, int64_t teacher_hidden, const LossDesc& loss) {
  switch (form) {
    case TeacherRowsForm::kHidden: return teacher_hidden;
    case TeacherRowsForm::kTopK: return 2 * static_cast<int64_t>(loss.top_k);
    case TeacherRowsForm::kSampled: return SampledDraws(loss) + 1;
  }
  return teacher_hidden;
}

int64_t SpoolValueBytes(const std::string& spool_dtype) {
  return spool_dtype == "f32" ? 4 : 2;
}

int64_t SpoolBytesPerPosition(TeacherRowsForm form, int64_t teacher_hidden, const LossDesc& loss,
                              const std::string& spool_dtype) {
  switch (form) {
    case TeacherRowsForm::kHidden: return teacher_hidden * SpoolValueBytes(spool_dtype);
    case TeacherRowsForm::kTopK: return static_cast<int64_t>(loss.top_k) * (SpoolValueBytes(spool_dtype) + 4);
    case TeacherRowsForm::kSampled: return 4 * (SampledDraws(loss) + 1);
  }
  return 0;
}

std::optional<TeacherRowsSent> TeacherRowsOf(const Plan& plan, int section) {
  const SectionPlan& s = plan.sections[static_cast<size_t>(section)];
  if (s.model.kind != ModelKind::kDecoder) return std::nullopt;
  for (const EdgePlan& e : plan.edges) {
    if (e.from != s.name) continue;
    const int to = plan.section_index(e.to);
    const auto form = TeacherRowsFormOf(e.tensor);
    if (to < 0 || !form || plan.sections[static_cast<size_t>(to)].model.kind != ModelKind::kDecoder) continue;
    return TeacherRowsSent{*form, plan.sections[static_cast<size_t>(to)].loss, e.to};
  }
  return std::nullopt;
}

bool KeepsSpool(const Plan& plan, int section) {
  const SectionPlan& s = plan.sections[static_cast<size_t>(section)];
  if (s.fused() || s.mode != SectionMode::kForward || s.config.ep > 1) return false;
  const bool feeds =
      std::any_of(plan.edges.begin(), plan.edges.end(), [&](const EdgePlan& e) { return e.from == s.name; });
  if (!feeds) return false;
  if (s.run_ahead > 0 || s.config.tp * s.config.cp * s.config.pp == 1) return true;
  // Model-parallel without run-ahead: TP peers compute the same rows in
  // lockstep, so they can agree on the ones to compute before each step
  // (docs/run_ahead.md), but only from the samples alone: not with an
  // upstream section, whose rows would have to be received and dropped for
  // spooled samples. CP and PP spread a forward over ranks that stream it.
  const bool upstream =
      std::any_of(plan.edges.begin(), plan.edges.end(), [&](const EdgePlan& e) { return e.to == s.name; });
  return s.config.cp == 1 && s.config.pp == 1 && !upstream;
}

int64_t SpoolBudgetPerWriter(const Plan& plan, int section) {
  if (!KeepsSpool(plan, section)) return 0;
  // Every spool of the job: fused sections' components count as their
  // expanded sections (runtime/fused_section.h keeps theirs so).
  const Plan expanded = ExpandFusedSections(plan);
  int spooled = 0;
  for (int i = 0; i < static_cast<int>(expanded.sections.size()); ++i) spooled += KeepsSpool(expanded, i) ? 1 : 0;
  const double writers = std::max(1, plan.sections[static_cast<size_t>(section)].config.dp);
  return static_cast<int64_t>(plan.spool_gib * static_cast<double>(int64_t{1} << 30) / spooled / writers);
}

}  // namespace maestro::plan
