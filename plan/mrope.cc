// SPDX-License-Identifier: Apache-2.0
#include "plan/mrope.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "plan/model_desc.h"

namespace maestro::plan {

namespace {

int64_t SectionKey(const ModelDesc& desc, const char* key) {
  auto it = desc.extra.find(key);
  return it == desc.extra.end() ? 0 : static_cast<int64_t>(it->second);
}

}  // namespace

std::optional<Mrope> MropeOf(const ModelDesc& desc) {
  if (desc.kind != ModelKind::kDecoder) return std::nullopt;
  Mrope m;
  m.section[0] = SectionKey(desc, kMropeSectionTKey);
  m.section[1] = SectionKey(desc, kMropeSectionHKey);
  m.section[2] = SectionKey(desc, kMropeSectionWKey);
  if (m.section[0] == 0 && m.section[1] == 0 && m.section[2] == 0) return std::nullopt;
  m.interleaved = SectionKey(desc, kMropeInterleavedKey) != 0;
  m.tokens_per_second = SectionKey(desc, kMropeTokensPerSecondKey);
  return m;
}

Status CheckMrope(const ModelDesc& desc, const std::string& where) {
  const auto m = MropeOf(desc);
  if (!m) return Status::Ok();
  const int64_t half = HeadDim(desc) / 2;
  const int64_t sum = m->section[0] + m->section[1] + m->section[2];
  if (m->section[0] < 0 || m->section[1] < 0 || m->section[2] < 0 || sum != half) {
    return Status::InvalidArgument(fmt::format(
        "{}: M-RoPE sections {} + {} + {} (extra.{}, {}, {}: the config's rope_scaling.mrope_section) must be >= 0 "
        "and sum to head_dim / 2 = {}",
        where, m->section[0], m->section[1], m->section[2], kMropeSectionTKey, kMropeSectionHKey, kMropeSectionWKey,
        half));
  }
  if (m->interleaved && (m->section[1] > m->section[0] || m->section[2] > m->section[0])) {
    return Status::InvalidArgument(
        fmt::format("{}: interleaved M-RoPE (extra.{}) needs the height and width sections ({}, {}) no larger than "
                    "the time section ({}): frequencies go t, h, w in turn while each lasts",
                    where, kMropeInterleavedKey, m->section[1], m->section[2], m->section[0]));
  }
  return Status::Ok();
}

std::vector<int> MropeFrequencyAxes(const Mrope& mrope, int64_t half_dim) {
  std::vector<int> axes(static_cast<size_t>(half_dim), 0);
  for (int64_t j = 0; j < half_dim; ++j) {
    int axis = 0;
    if (mrope.interleaved) {
      if (j % 3 == 1 && j < 3 * mrope.section[1]) axis = 1;
      if (j % 3 == 2 && j < 3 * mrope.section[2]) axis = 2;
    } else {
      axis = j < mrope.section[0] ? 0 : j < mrope.section[0] + mrope.section[1] ? 1 : 2;
    }
    axes[static_cast<size_t>(j)] = axis;
  }
  return axes;
}

StatusOr<LlmGrid> MropeImageGrid(const ModelDesc& vit) {
  if (vit.kind != ModelKind::kVit || vit.patch_size <= 0) {
    return Status::InvalidArgument("M-RoPE positions need a ViT with a patch size for the image tokens' grid");
  }
  if (VitLayout(vit) == kVitLayoutClip) {
    return Status::InvalidArgument(
        "M-RoPE positions need image rows that form a grid; a CLIP tower hands on its class token first (use a "
        "Qwen2-VL-layout tower, or a decoder without mrope_section)");
  }
  const int64_t side = vit.image_size / vit.patch_size;
  const int64_t merge = std::max<int64_t>(SpatialMerge(vit), 1);
  LlmGrid g;
  g.t = 1;
  g.h = side / merge;
  g.w = side / merge;
  return g;
}

const SectionPlan* MropeVisionSection(const Plan& plan, const SectionPlan& decoder) {
  std::map<std::string, const SectionPlan*> by_name;
  std::vector<const EdgePlan*> edges;
  for (const auto& s : plan.sections) {
    by_name[s.name] = &s;
    for (const auto& c : s.components) by_name[c.name] = &c;
    for (const auto& e : s.component_edges) edges.push_back(&e);
  }
  for (const auto& e : plan.edges) edges.push_back(&e);
  // Depth-first up the edges into `name`, through projectors only.
  std::vector<std::string> todo = {decoder.name};
  for (size_t guard = 0; !todo.empty() && guard < 4 * by_name.size() + 4; ++guard) {
    const std::string name = todo.back();
    todo.pop_back();
    for (const EdgePlan* e : edges) {
      if (e->to != name) continue;
      auto it = by_name.find(e->from);
      if (it == by_name.end()) continue;
      if (it->second->model.kind == ModelKind::kVit) return it->second;
      if (it->second->model.kind == ModelKind::kProjector) todo.push_back(e->from);
    }
  }
  return nullptr;
}

Status MropePositions(const int64_t* ids, int64_t length, int64_t image_token_id, const std::vector<LlmGrid>& images,
                      int64_t* out) {
  return MropePositions(ids, length, image_token_id, -1, images, 0, out);
}

Status MropePositions(const int64_t* ids, int64_t length, int64_t image_token_id, int64_t video_token_id,
                      const std::vector<LlmGrid>& items, int64_t tokens_per_second, int64_t* out) {
  int64_t* rows[3] = {out, out + length, out + 2 * length};
  int64_t st = 0;                 // the first token not yet placed
  int64_t next = 0;               // one past the largest position placed so far
  auto text = [&](int64_t end) {  // tokens [st, end) are text
    for (int64_t i = st; i < end; ++i, ++next) rows[0][i] = rows[1][i] = rows[2][i] = next;
    st = end;
  };
  for (size_t k = 0; k < items.size(); ++k) {
    const LlmGrid& g = items[k];
    const char* noun = g.video ? "video" : "image";
    const int64_t token = g.video ? video_token_id : image_token_id;
    const int64_t* found = std::find(ids + st, ids + length, token);
    const int64_t start = found - ids;
    if (start + g.tokens() > length) {
      return Status::InvalidArgument(
          fmt::format("M-RoPE: {} {} of the sample needs {} placeholder tokens (id {}, grid {}x{}x{}) from position "
                      "{}, past the sample's {} tokens",
                      noun, k, g.tokens(), token, g.t, g.h, g.w, start, length));
    }
    text(start);
    const int64_t base = next;
    // A video's time row (Qwen2.5-VL): i_t * trunc(seconds) * tokens_per_second.
    const int64_t time_step =
        g.video && tokens_per_second > 0 ? static_cast<int64_t>(g.seconds_per_t) * tokens_per_second : 1;
    int64_t largest = 0;
    for (int64_t t = 0; t < g.t; ++t) {
      for (int64_t h = 0; h < g.h; ++h) {
        for (int64_t w = 0; w < g.w; ++w, ++st) {
          if (ids[st] != token) {
            return Status::InvalidArgument(fmt::format(
                "M-RoPE: {} {} of the sample (grid {}x{}x{}) should hold placeholder tokens {}..{}, but token {} "
                "is {} (not the {} token {})",
                noun, k, g.t, g.h, g.w, start, start + g.tokens() - 1, st, ids[st], noun, token));
          }
          rows[0][st] = base + t * time_step;
          rows[1][st] = base + h;
          rows[2][st] = base + w;
          largest = std::max({largest, t * time_step, h, w});
        }
      }
    }
    next = base + largest + 1;
  }
  text(length);
  return Status::Ok();
}

}  // namespace maestro::plan
