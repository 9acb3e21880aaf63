// SPDX-License-Identifier: Apache-2.0
// SectionRunner's shared part: the members every kind of runner has, and
// the rules all follow (a section's seed, its rows' shape, the sum of
// forwards). Which kind a section gets: section_build.cc.
#include "runtime/section_runner.h"

#include <fmt/format.h>

#include <stdexcept>

#include "base/checks.h"
#include "base/splitmix.h"
#include "launcher/comm.h"
#include "plan/model_desc.h"
#include "plan/native_vision.h"
#include "plan/teacher_rows.h"
#include "runtime/models/decoder.h"
#include "runtime/parallel/expert_parallel.h"
#include "runtime/parallel/pipeline_parallel.h"
#include "runtime/parallel/tensor_parallel.h"
#include "runtime/plan_data.h"
#include "runtime/torch_compat.h"

namespace maestro::runtime {

uint64_t SectionSeed(uint64_t run_seed, const std::string& section_name) {
  return SplitMix64(run_seed ^ HashBytes(section_name));
}

std::vector<int64_t> RowShapeOf(const plan::Plan& plan, int section) {
  const auto& s = plan.sections[static_cast<size_t>(section)];
  switch (s.model.kind) {
    case plan::ModelKind::kDecoder: {
      // A KD teacher's rows: its hidden states, or 2K / draws + 1 wide (plan/teacher_rows.h).
      const auto sent = plan::TeacherRowsOf(plan, section);
      return {plan.data.seq_len,
              sent ? plan::TeacherRowsWidth(sent->form, s.model.hidden, sent->loss) : s.model.hidden};
    }
    case plan::ModelKind::kVit:
      // K images' rows per sample (native: seq_len), zero past the sample's own (VitRows).
      return {
          plan::VisionRowsPerSample(s.model, plan::NativeResolution(plan), MaxImagesPerSample(plan), plan.data.seq_len),
          VitOutputDim(s.model)};
    case plan::ModelKind::kProjector: {
      // As many rows as its input carries.
      for (size_t e = 0; e < plan.edges.size(); ++e) {
        if (plan.edges[e].to != s.name) continue;
        auto up = RowShapeOf(plan, plan.section_index(plan.edges[e].from));
        return {up.empty() ? 1 : up[0], s.model.out_dim};
      }
      return {1, s.model.out_dim};
    }
    case plan::ModelKind::kAudioEncoder:
      // K clips' rows per sample, zero past the sample's own (AudioRows).
      return {MaxAudiosPerSample(plan) * ((s.model.audio_frames + 1) / 2), s.model.hidden};
  }
  return {};
}

void SectionRunner::Output::AddLossAndCounts(const Output& part) {
  if (part.loss.defined()) loss = loss.defined() ? loss + part.loss : part.loss;
  loss_sum += part.loss_sum;
  loss_samples += part.loss_samples;
  answers += part.answers;
  answers_right += part.answers_right;
}

SectionRunner::SectionRunner(const plan::Plan& plan, int section, const RunnerOptions& options)
    : plan_(&plan), section_(section), section_plan_(plan.sections[static_cast<size_t>(section)]), options_(options) {
  for (size_t e = 0; e < plan.edges.size(); ++e) {
    if (plan.edges[e].to == section_plan_.name) in_edges_.push_back(static_cast<int>(e));
    if (plan.edges[e].from == section_plan_.name) out_edges_.push_back(static_cast<int>(e));
  }
}

SectionRunner::~SectionRunner() = default;

void SectionRunner::BackwardNoTokens(const std::vector<torch::Tensor>& outputs) {
  DecoderLMImpl::BackwardNoTokens(outputs);
}

void SectionRunner::EnsureGradients() {
  for (auto& p : Parameters()) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
}

void SectionRunner::WeightsChanged() {
  compat::ClearAutocastCache();
}

torch::nn::Module& SectionRunner::module() {
  throw std::logic_error("section '" + section_plan_.name + "' is fused: each component has its module");
}

bool SectionRunner::Sharded() const {
  return options_.tensor_parallel != nullptr && options_.tensor_parallel->size() > 1;
}

bool SectionRunner::ExpertSharded() const {
  return options_.expert_parallel != nullptr && options_.expert_parallel->size() > 1;
}

int SectionRunner::ContextParallelSize() const {
  return options_.context_parallel != nullptr ? options_.context_parallel->group().size() : 1;
}

bool SectionRunner::Staged() const {
  return options_.pipeline != nullptr && options_.pipeline->stages() > 1;
}

}  // namespace maestro::runtime
