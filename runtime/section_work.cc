// SPDX-License-Identifier: Apache-2.0
#include "runtime/section_work.h"

#include <algorithm>

#include "plan/model_desc.h"
#include "plan/model_flops.h"

namespace maestro::runtime {

namespace {

// The components a section runs: its components when fused, else itself.
std::vector<const plan::SectionPlan*> ComponentsOf(const plan::SectionPlan& section) {
  std::vector<const plan::SectionPlan*> out;
  if (!section.fused()) {
    out.push_back(&section);
    return out;
  }
  for (const auto& c : section.components) out.push_back(&c);
  return out;
}

// The section (or, inside `fused`, the component) that feeds `name`, or null.
const plan::SectionPlan* UpstreamOf(const plan::Plan& plan, const plan::SectionPlan& fused, const std::string& name) {
  const auto& edges = fused.fused() ? fused.component_edges : plan.edges;
  for (const auto& e : edges) {
    if (e.to != name) continue;
    if (fused.fused()) {
      for (const auto& c : fused.components) {
        if (c.name == e.from) return &c;
      }
    } else if (const int from = plan.section_index(e.from); from >= 0) {
      return &plan.sections[static_cast<size_t>(from)];
    }
  }
  return nullptr;
}

// A projector's rows per sample: the rows its upstream encoder hands on per
// item (a ViT's plan::VitOutputTokens per image, an audio encoder's frames
// per clip; through a chain of projectors), times the items the sample
// carries. 0 without an encoder upstream.
int64_t ProjectorRows(const plan::Plan& plan, const plan::SectionPlan& fused, const plan::SectionPlan& projector,
                      const plan::SampleMedia& media, const std::vector<plan::PatchGrid>& grids) {
  const plan::SectionPlan* up = &projector;
  for (size_t hops = 0; hops <= plan.sections.size() + fused.components.size(); ++hops) {
    up = UpstreamOf(plan, fused, up->name);
    if (up == nullptr) return 0;
    switch (up->model.kind) {
      case plan::ModelKind::kVit: {
        if (grids.empty()) return media.images * plan::VitOutputTokens(up->model);
        int64_t rows = 0;  // native resolution: the items' LLM tokens
        for (const auto& grid : grids) rows += plan::LlmGridOf(grid, up->model).tokens();
        return rows;
      }
      case plan::ModelKind::kAudioEncoder: return media.audios * plan::AudioSequenceTokens(up->model);
      case plan::ModelKind::kProjector: continue;
      case plan::ModelKind::kDecoder: return 0;
    }
  }
  return 0;
}

// Component `c`'s forward work on one sample that activates it.
SectionWork ForwardWorkOfSample(const plan::Plan& plan, const plan::SectionPlan& fused, const plan::SectionPlan& c,
                                const SampleWorkItems& sample) {
  const plan::ModelDesc& m = c.model;
  // `items` sequences of `tokens` each.
  auto sequences = [&](int64_t items, int64_t tokens) {
    return SectionWork{static_cast<double>(items * tokens),
                       static_cast<double>(items) * plan::SequenceForwardFlops(m, tokens)};
  };
  switch (m.kind) {
    case plan::ModelKind::kDecoder: return sequences(1, sample.real_tokens);
    case plan::ModelKind::kVit: {
      if (sample.grids.empty()) return sequences(sample.media.images, plan::VitSequenceTokens(m));
      SectionWork work;  // native resolution: each item's attention sequences at their real length
      for (const auto& grid : sample.grids) {
        for (int64_t patches : plan::AttentionSequences(grid)) work += sequences(1, patches);
      }
      return work;
    }
    case plan::ModelKind::kAudioEncoder: return sequences(sample.media.audios, plan::AudioSequenceTokens(m));
    case plan::ModelKind::kProjector: return sequences(1, ProjectorRows(plan, fused, c, sample.media, sample.grids));
  }
  return {};
}

}  // namespace

std::vector<std::string> WorkSlotNames(const plan::Plan& plan) {
  std::vector<std::string> names;
  for (const auto& s : plan.sections) {
    for (const plan::SectionPlan* c : ComponentsOf(s)) names.push_back(c->name);
  }
  return names;
}

size_t FirstWorkSlot(const plan::Plan& plan, int section) {
  size_t first = 0;
  for (int s = 0; s < section; ++s) first += WorkSlotsOf(plan, s);
  return first;
}

size_t WorkSlotsOf(const plan::Plan& plan, int section) {
  const auto& s = plan.sections[static_cast<size_t>(section)];
  return s.fused() ? s.components.size() : 1;
}

std::vector<SectionWork> WorkOfSamples(const plan::Plan& plan, int section,
                                       const std::vector<SampleWorkItems>& samples) {
  const auto& fused = plan.sections[static_cast<size_t>(section)];
  const std::vector<const plan::SectionPlan*> components = ComponentsOf(fused);
  std::vector<SectionWork> work(components.size());
  for (size_t k = 0; k < components.size(); ++k) {
    const plan::SectionPlan& c = *components[k];
    SectionWork forward;
    for (const auto& sample : samples) {
      if (plan::SectionActivates(c, sample.media)) forward += ForwardWorkOfSample(plan, fused, c, sample);
    }
    work[k] = {forward.tokens, plan::ModelFlopsOfForward(c.mode, forward.model_flops)};
  }
  return work;
}

int64_t RealTokensOf(const datasets::SampleSource& samples, int64_t id, int64_t seq_len) {
  int64_t tokens = 0;
  for (const auto& [modality, n] : samples.TokensOf(id).tokens) tokens += n;
  return std::min(tokens, seq_len);
}

}  // namespace maestro::runtime
