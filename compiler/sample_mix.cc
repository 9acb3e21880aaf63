// SPDX-License-Identifier: Apache-2.0
#include "compiler/sample_mix.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "base/checks.h"
#include "compiler/model.h"
#include "plan/model_flops.h"
#include "plan/native_vision.h"
#include "plan/smart_resize.h"

namespace maestro::compiler {

namespace {

std::string Where(const std::string& path, const MixEntry& e) {
  return AtPos(path, e.pos, "[[data.modality.mix]]");
}

// The attention sequences of one native item (plan::AttentionSequences).
StatusOr<std::vector<int64_t>> NativeItemSequences(const MixEntry& e, const MixEncoder& enc, const std::string& path,
                                                   int64_t* llm_tokens) {
  const plan::ModelDesc& d = enc.desc;
  const int64_t merge = std::max<int64_t>(1, plan::SpatialMerge(d));
  const int64_t height = e.height > 0 ? e.height : d.image_size;
  const int64_t width = e.width > 0 ? e.width : d.image_size;
  auto size = plan::SmartResize(height, width, d.patch_size * merge, enc.min_pixels, enc.max_pixels);
  if (!size.ok()) {
    return Status::InvalidArgument(
        fmt::format("{}: height = {}, width = {}: {}", Where(path, e), height, width, size.status().message()));
  }
  const auto temporal = static_cast<int64_t>(std::max(1.0, ExtraValue(d, "temporal_patch", 1)));
  plan::PatchGrid grid;
  grid.t = e.frames > 0 ? (e.frames + temporal - 1) / temporal : 1;
  grid.h = size->first / d.patch_size;
  grid.w = size->second / d.patch_size;
  grid.video = e.frames > 0;
  *llm_tokens = grid.patches() / (merge * merge);
  return plan::AttentionSequences(grid);
}

}  // namespace

StatusOr<SampleShape> ShapeOfMixEntry(const MixEntry& e, const MixEncoder& enc, const std::string& path) {
  const plan::ModelDesc& d = enc.desc;
  const bool audio = d.kind == plan::ModelKind::kAudioEncoder;
  if (d.kind != plan::ModelKind::kVit && !audio) {
    return Status::InvalidArgument(
        fmt::format("{}: a mix describes the items an encoder reads (a ViT or an audio encoder); this modality's "
                    "section runs a {}: drop the mix",
                    Where(path, e), plan::ModelKindName(d.kind)));
  }
  if (e.count < 1) return Status::InvalidArgument(fmt::format("{}: count = {} must be >= 1", Where(path, e), e.count));
  const bool sized = e.height > 0 || e.width > 0 || e.frames > 0;
  if (sized && (audio || !enc.native)) {
    return Status::InvalidArgument(fmt::format(
        "{}: height, width and frames describe native-resolution images and videos; this {} reads every item at one "
        "size: {}",
        Where(path, e), audio ? "audio encoder" : "ViT",
        audio ? "give count only" : "set data.image_resolution = \"native\" or give count only"));
  }
  SampleShape out;
  std::vector<int64_t> sequences;
  if (enc.native) {
    int64_t item_llm = 0;
    MAESTRO_ASSIGN_OR_RETURN(sequences, NativeItemSequences(e, enc, path, &item_llm));
    out.llm_tokens = item_llm * e.count;
    if (enc.seq_len > 0 && out.llm_tokens > enc.seq_len) {
      return Status::InvalidArgument(fmt::format(
          "{}: {} item(s) of {} placeholders each ({}) do not fit data.seq_len = {}: lower count, the size or "
          "frames, or data.image_max_pixels",
          Where(path, e), e.count, item_llm, out.llm_tokens, enc.seq_len));
    }
  } else {
    if (e.count > enc.max_items) {
      return Status::InvalidArgument(fmt::format(
          "{}: count = {} is more than the {} items a sample may carry ({}): raise it or lower count", Where(path, e),
          e.count, enc.max_items, audio ? "data.max_audios_per_sample" : "data.max_images_per_sample"));
    }
    const int64_t seq = audio ? plan::AudioSequenceTokens(d) : plan::VitSequenceTokens(d);
    sequences.push_back(seq);
    out.llm_tokens = e.count * (audio ? seq : plan::VitOutputTokens(d));
  }
  for (int64_t i = 0; i < e.count; ++i) {
    for (int64_t s : sequences) {
      out.encoder_tokens += s;
      out.longest_sequence = std::max(out.longest_sequence, s);
      out.forward_flops += plan::SequenceForwardFlops(d, s);
    }
  }
  return out;
}

StatusOr<MixWork> MixWorkOf(const std::vector<MixEntry>& mix, const MixEncoder& enc, const std::string& path) {
  MixWork w;
  if (mix.empty()) return w;
  double total = 0;
  for (const MixEntry& e : mix) {
    if (!(e.weight > 0) || !std::isfinite(e.weight)) {
      return Status::InvalidArgument(fmt::format("{}: weight = {} must be > 0", Where(path, e), e.weight));
    }
    total += e.weight;
  }
  double attention_flops = 0;  // E[sum over sequences of s * AttentionFlopsPerToken(s)]
  double running = 0;
  for (const MixEntry& e : mix) {
    MAESTRO_ASSIGN_OR_RETURN(SampleShape s, ShapeOfMixEntry(e, enc, path));
    const double p = e.weight / total;
    running += e.weight;
    w.cdf.push_back(running / total);
    w.mean_encoder_tokens += p * static_cast<double>(s.encoder_tokens);
    w.mean_llm_tokens += p * static_cast<double>(s.llm_tokens);
    w.mean_forward_flops += p * s.forward_flops;
    attention_flops += p * (s.forward_flops - static_cast<double>(s.encoder_tokens) * 2.0 *
                                                  static_cast<double>(plan::MatmulParamsPerToken(enc.desc)));
    w.peak_encoder_tokens = std::max(w.peak_encoder_tokens, s.encoder_tokens);
    w.peak_sequence = std::max(w.peak_sequence, s.longest_sequence);
    w.shapes.push_back(s);
  }
  w.cdf.back() = 1.0;
  for (const SampleShape& s : w.shapes) w.relative_work.push_back(s.forward_flops / w.mean_forward_flops);
  // The context c at which the mean tokens' attention gives the mean's:
  // mean_tokens * AttentionFlopsPerToken(c) = E[attention FLOPs]; the
  // per-token attention grows with c (window layers saturate), so bisect.
  const double want = attention_flops / std::max(w.mean_encoder_tokens, 1.0);
  double lo = 1, hi = static_cast<double>(std::max<int64_t>(w.peak_sequence, 1));
  for (int i = 0; i < 64 && hi - lo > 0.25; ++i) {
    const double mid = 0.5 * (lo + hi);
    (plan::AttentionFlopsPerToken(enc.desc, mid) < want ? lo : hi) = mid;
  }
  w.attention_context = std::max<int64_t>(1, std::llround(0.5 * (lo + hi)));
  return w;
}

StatusOr<MixWork> ModalityMixWork(const Spec& spec, const std::string& name) {
  const auto& mods = spec.data.modalities;
  size_t i = 0;
  while (i < mods.size() && mods[i].name != name) ++i;
  if (i == mods.size() || i >= spec.data.modality_mixes.size() || spec.data.modality_mixes[i].empty()) {
    return MixWork();
  }
  const std::vector<MixEntry>& mix = spec.data.modality_mixes[i];
  for (const SectionSpec& s : spec.sections) {
    if (s.activation != name) continue;
    const ModelSpec* m = spec.FindModel(s.model);
    if (!m || (m->desc.kind != plan::ModelKind::kVit && m->desc.kind != plan::ModelKind::kAudioEncoder)) continue;
    MixEncoder enc;
    enc.desc = m->desc;
    const bool vit = m->desc.kind == plan::ModelKind::kVit;
    enc.native = vit && spec.data.image_resolution == plan::kImageResolutionNative;
    enc.min_pixels = spec.data.image_min_pixels;
    enc.max_pixels = spec.data.image_max_pixels;
    enc.max_items = vit ? spec.data.max_images_per_sample : spec.data.max_audios_per_sample;
    if (spec.data.manifest.empty()) enc.max_items = 1;  // built-in data: one item a sample
    enc.seq_len = spec.data.seq_len;
    return MixWorkOf(mix, enc, spec.path);
  }
  return Status::InvalidArgument(AtPos(
      spec.path, mix.front().pos,
      fmt::format("[[data.modality.mix]] of modality '{}': a mix describes the items an encoder reads, and no ViT or "
                  "audio-encoder section has activation = \"{}\": add one or drop the mix",
                  name, name)));
}

Status ResolveModalityMixes(Spec& spec) {
  for (size_t i = 0; i < spec.data.modalities.size() && i < spec.data.modality_mixes.size(); ++i) {
    if (spec.data.modality_mixes[i].empty()) continue;
    MAESTRO_ASSIGN_OR_RETURN(MixWork w, ModalityMixWork(spec, spec.data.modalities[i].name));
    spec.data.modalities[i].tokens = std::max<int64_t>(1, std::llround(w.mean_llm_tokens));
  }
  return Status::Ok();
}

std::vector<ModalityDraws> DrawsOf(const Spec& spec) {
  std::vector<ModalityDraws> out;
  for (const plan::ModalityDesc& m : spec.data.modalities) {
    auto w = ModalityMixWork(spec, m.name);
    if (!w.ok() || w->empty()) continue;  // ResolveModalityMixes reported it
    ModalityDraws d;
    d.modality = m.name;
    d.cdf = w->cdf;
    for (const SampleShape& s : w->shapes) d.llm_tokens.push_back(s.llm_tokens);
    out.push_back(std::move(d));
  }
  return out;
}

int DrawMixEntry(const std::vector<double>& cdf, uint64_t seed, uint64_t sample_id, int modality) {
  if (cdf.size() <= 1) return 0;
  // SplitMix64 of (seed, id, modality): independent of the draws that decide
  // whether the sample carries the modality.
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + sample_id * 0xD1B54A32D192ED03ull +
               static_cast<uint64_t>(modality + 1) * 0x8CB92BA72F3D8DD7ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const double u = static_cast<double>(z >> 11) * 0x1.0p-53;
  const auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
  return static_cast<int>(std::min<size_t>(static_cast<size_t>(it - cdf.begin()), cdf.size() - 1));
}

}  // namespace maestro::compiler
