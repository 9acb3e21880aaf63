// SPDX-License-Identifier: Apache-2.0
#include "compiler/spec_graph.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/graph.h"
#include "plan/native_vision.h"
#include "plan/plan.h"
#include "plan/teacher_rows.h"

namespace maestro::compiler::internal {

namespace {

std::vector<std::string> SectionNames(const Spec& spec) {
  std::vector<std::string> names;
  for (const auto& s : spec.sections) names.push_back(s.name);
  return names;
}

// The KD edge `e` into student `s`: its tensor names one of the teacher row
// forms (plan/teacher_rows.h), and the loss's keys fit that form.
void CheckTeacherRows(Diagnostics& d, const EdgeSpec& e, const SectionSpec& s, int64_t vocab) {
  const auto form = plan::TeacherRowsFormOf(e.tensor);
  if (!form) {
    d.Error(e.pos, fmt::format("edge {} -> {} carries '{}', but the kd loss of '{}' reads a teacher's rows: name the "
                               "tensor \"teacher_hidden\" (its final hidden states; the student applies its head), "
                               "\"teacher_topk\" (its top-k logits, k = loss.top_k) or \"teacher_sampled\" (token "
                               "ids drawn from its distribution, loss.draws a position), e.g. inputs = "
                               "[\"{}.teacher_hidden\"]",
                               e.from, e.to, e.tensor, s.name, e.from));
    return;
  }
  const std::string where = "section '" + s.name + "'";
  if (*form == plan::TeacherRowsForm::kTopK && (s.loss.top_k < 1 || s.loss.top_k > vocab)) {
    d.Error(s.loss_pos, fmt::format("{}: its teacher sends \"teacher_topk\" rows, so loss.top_k must name k in "
                                    "[1, {}] (the vocabulary); Megatron-LM's offline distillation keeps 128",
                                    where, vocab));
  }
  if (*form == plan::TeacherRowsForm::kSampled && s.loss.top_k > 0) {
    d.Error(s.loss_pos, fmt::format("{}: loss.top_k applies to \"teacher_hidden\" or \"teacher_topk\" rows; its "
                                    "teacher sends \"teacher_sampled\" rows (loss.draws a position): remove top_k",
                                    where));
  }
  if (*form != plan::TeacherRowsForm::kSampled && s.loss.draws > 0) {
    d.Error(s.loss_pos, fmt::format("{}: loss.draws applies to \"teacher_sampled\" rows; its teacher sends \"{}\": "
                                    "remove draws or send \"teacher_sampled\"",
                                    where, e.tensor));
  }
  if (*form != plan::TeacherRowsForm::kHidden && vocab >= plan::kMaxRowsVocab) {
    d.Error(e.pos, fmt::format("edge {} -> {}: \"{}\" rows carry token ids as fp32, exact below {}; the vocabulary "
                               "is {}: send \"teacher_hidden\"",
                               e.from, e.to, e.tensor, plan::kMaxRowsVocab, vocab));
  }
}

// A section's `loss`: only a training sink computes one; kd reads a frozen
// decoder's rows (CheckTeacherRows: its final hidden states and the student
// applies the teacher's output head, or the teacher's top-k or sampled
// logits), so teacher and student share the vocabulary.
// REQUIRES: every edge names existing sections.
void CheckLoss(Diagnostics& d, const Spec& spec, const SectionSpec& s) {
  const std::string where = "section '" + s.name + "'";
  if (s.mode != plan::SectionMode::kTrain) {
    d.Error(s.loss_pos, fmt::format("{}: a frozen section (mode = \"forward\") computes no loss; remove loss or "
                                    "make it mode = \"train\"",
                                    where));
    return;
  }
  for (const auto& e : spec.edges) {
    if (e.from == s.name) {
      d.Error(s.loss_pos, fmt::format("{}: only a sink section computes a loss, and this one feeds '{}'", where, e.to));
      return;
    }
  }
  if (s.loss.kind != "kd") return;
  const ModelSpec* student = spec.FindModel(s.model);
  if (student && student->desc.kind != plan::ModelKind::kDecoder) {
    d.Error(s.loss_pos, fmt::format("{}: loss kind = \"kd\" needs a decoder student (its model '{}' is a {})", where,
                                    s.model, plan::ModelKindName(student->desc.kind)));
    return;
  }
  bool found = false;
  std::string inputs;
  for (const auto& e : spec.edges) {
    if (e.to != s.name) continue;
    inputs += (inputs.empty() ? "" : ", ") + e.from + "." + e.tensor;
    const SectionSpec& up = spec.sections[static_cast<size_t>(spec.section_index(e.from))];
    const ModelSpec* teacher = spec.FindModel(up.model);
    if (up.mode != plan::SectionMode::kForward || !teacher || teacher->desc.kind != plan::ModelKind::kDecoder) continue;
    found = true;
    CheckTeacherRows(d, e, s, teacher->desc.vocab);
    if (student && teacher->desc.vocab != student->desc.vocab) {
      d.Error(s.loss_pos, fmt::format("{}: loss kind = \"kd\" compares token distributions, but the teacher '{}' has "
                                      "vocab {} and the student vocab {}; they must be equal",
                                      where, e.from, teacher->desc.vocab, student->desc.vocab));
    }
  }
  if (!found) {
    d.Error(s.loss_pos,
            fmt::format("{}: loss kind = \"kd\" needs an input edge from a frozen (mode = \"forward\") decoder "
                        "section that sends its rows (tensor \"teacher_hidden\", \"teacher_topk\" or "
                        "\"teacher_sampled\"); its inputs are {}",
                        where, inputs.empty() ? "none" : inputs));
  }
}

// The GPU types, the sections and what each names (model, activation,
// gpu_type), the profiles' sections.
void CheckSections(Diagnostics& d, const Spec& spec) {
  std::vector<std::string> model_names;
  for (const auto& m : spec.models) model_names.push_back(m.name);
  std::vector<std::string> modality_names = {"always"};
  for (const auto& m : spec.data.modalities) modality_names.push_back(m.name);
  std::vector<std::string> gpu_names;
  for (const auto& g : spec.cluster.gpu_types) gpu_names.push_back(g.name);

  if (spec.sections.empty()) d.Error({}, "the spec declares no [[section]]");
  if (spec.cluster.gpu_types.empty()) {
    d.Error(spec.cluster.pos, "declare at least one GPU type, e.g. [cluster.gpu.h100] with memory_gb and tflops_bf16");
  }
  if (!spec.cluster.default_gpu.empty() && !spec.cluster.Find(spec.cluster.default_gpu)) {
    d.Error(spec.cluster.pos, fmt::format("cluster.default_gpu '{}' is not a declared GPU type{}",
                                          spec.cluster.default_gpu, Suggest(spec.cluster.default_gpu, gpu_names)));
  }
  for (size_t i = 0; i < spec.sections.size(); ++i) {
    const SectionSpec& s = spec.sections[i];
    for (size_t j = 0; j < i; ++j) {
      if (spec.sections[j].name == s.name && !s.name.empty()) {
        d.Error(s.pos,
                fmt::format("section '{}' is declared twice (first at line {})", s.name, spec.sections[j].pos.line));
      }
    }
    if (!s.model.empty() && !spec.FindModel(s.model)) {
      d.Error(s.model_pos,
              fmt::format("section '{}': unknown model '{}'{}", s.name, s.model, Suggest(s.model, model_names)));
    }
    if (std::find(modality_names.begin(), modality_names.end(), s.activation) == modality_names.end()) {
      d.Error(s.activation_pos,
              fmt::format("section '{}': activation '{}' is neither 'always' nor a [[data.modality]]{}", s.name,
                          s.activation, Suggest(s.activation, modality_names)));
    }
    if (!s.gpu_type.empty() && !spec.cluster.Find(s.gpu_type)) {
      d.Error(s.gpu_type_pos,
              fmt::format("section '{}': unknown gpu_type '{}'{}", s.name, s.gpu_type, Suggest(s.gpu_type, gpu_names)));
    }
  }
  const std::vector<std::string> names = SectionNames(spec);
  for (const auto& p : spec.profiles) {
    if (spec.section_index(p.section) < 0) {
      d.Error(p.pos, fmt::format("profile of unknown section '{}'{}", p.section, Suggest(p.section, names)));
    }
  }
}

// Each edge's ends and its pinned fan-out. False when an edge names an
// unknown section or feeds its own section (the checks after it need every
// edge to join two distinct known sections).
bool CheckEdges(Diagnostics& d, const Spec& spec) {
  const std::vector<std::string> names = SectionNames(spec);
  bool edges_ok = true;
  for (const auto& e : spec.edges) {
    const int u = spec.section_index(e.from), v = spec.section_index(e.to);
    if (u < 0) {
      d.Error(e.from_pos,
              fmt::format("edge {} -> {}: unknown section '{}'{}", e.from, e.to, e.from, Suggest(e.from, names)));
      edges_ok = false;
    }
    if (v < 0) {
      d.Error(e.to_pos, fmt::format("edge {} -> {}: unknown section '{}'{}", e.from, e.to, e.to, Suggest(e.to, names)));
      edges_ok = false;
    }
    if (u < 0 || v < 0) {
      edges_ok = false;
      continue;
    }
    if (u == v) {
      d.Error(e.pos, fmt::format("edge {} -> {}: a section cannot feed itself", e.from, e.to));
      edges_ok = false;
    }
    const SectionSpec& su = spec.sections[static_cast<size_t>(u)];
    const SectionSpec& sv = spec.sections[static_cast<size_t>(v)];
    if (su.dp && sv.dp && !plan::EdgeDpRuleHolds(su.dp, sv.dp, e.fanout, e.fanin)) {
      d.Error(e.pos, fmt::format("the fan-out on edge {} -> {} is impossible: pinned dp {} and {}{} break "
                                 "DP_from * fanout = DP_to (fan-in likewise)",
                                 e.from, e.to, su.dp, sv.dp,
                                 e.fanout  ? fmt::format(" with fanout = {}", e.fanout)
                                 : e.fanin ? fmt::format(" with fanin = {}", e.fanin)
                                           : ""));
    }
  }
  return edges_ok;
}

// The first cycle base/graph.h's FindCycle meets, reported with its path at
// its closing edge. REQUIRES: every edge names existing sections.
void CheckCycles(Diagnostics& d, const Spec& spec) {
  DirectedEdges edges;
  for (const auto& e : spec.edges) edges.emplace_back(spec.section_index(e.from), spec.section_index(e.to));
  const GraphCycle cycle = FindCycle(static_cast<int>(spec.sections.size()), edges);
  if (!cycle.found()) return;
  std::string path;
  for (int v : cycle.vertices) path += spec.sections[static_cast<size_t>(v)].name + " -> ";
  path += spec.sections[static_cast<size_t>(cycle.vertices.front())].name;
  d.Error(spec.edges[static_cast<size_t>(cycle.closing_edge)].pos,
          fmt::format("the section graph has a cycle: {}; sections must form a DAG", path));
}

// One kind of media a manifest's lines carry, as the checks below word it.
struct ManifestMedia {
  plan::ModelKind kind;     // the encoder that reads it
  const char* kind_name;    // "vit": the spec's model kind
  const char* encoders;     // "ViTs"
  const char* an_encoder;   // "a ViT section"
  const char* items;        // "images"
  const char* item;         // "image"
  const char* one_section;  // "one vision section"
  const char* token_key;    // "image_token_id"
  const char* max_key;      // "max_images_per_sample"
  const char* example;      // "Qwen2-VL's <|image_pad|> = 151655"
  int64_t id;               // the spec's placeholder id (-1: unset)
  int64_t max_per_sample;
};

// A manifest's placeholder of one kind against the sections that read it:
// an encoder section of that kind needs the placeholder id (its rows replace
// those positions), the id needs exactly one such section and must embed in
// every decoder (`vocab`: the smallest), and K needs the section.
void CheckManifestMedia(Diagnostics& d, const Spec& spec, const ManifestMedia& k, int64_t vocab) {
  std::vector<std::string> encoders;
  for (const SectionSpec& s : spec.sections) {
    const ModelSpec* m = spec.FindModel(s.model);
    if (m && m->desc.kind == k.kind) encoders.push_back(s.name);
  }
  if (encoders.size() > 1) {
    d.Error(spec.data.pos, fmt::format("[data] manifest: sections '{}' and '{}' are both {}; a manifest's {} feed "
                                       "{} (keep one)",
                                       encoders[0], encoders[1], k.encoders, k.items, k.one_section));
  }
  if (!encoders.empty() && k.id < 0) {
    d.Error(spec.data.pos,
            fmt::format("[data] needs the key '{}': section '{}' encodes the manifest's {} and the decoder takes its "
                        "rows at the placeholder token; set {} to the id your processor repeats per {} (e.g. {})",
                        k.token_key, encoders[0], k.items, k.token_key, k.item, k.example));
  }
  if (encoders.empty() && k.id >= 0) {
    d.Error(spec.data.pos, fmt::format("data.{} = {}, but no section encodes {}; add a section of a kind = \"{}\" "
                                       "model, or drop {} (a manifest without {})",
                                       k.token_key, k.id, k.items, k.kind_name, k.token_key, k.items));
  }
  if (encoders.empty() && k.max_per_sample != 1) {
    d.Error(spec.data.pos, fmt::format("data.{} needs {} to encode the {}; drop it", k.max_key, k.an_encoder, k.items));
  }
  if (k.id >= 0 && vocab > 0 && k.id >= vocab) {
    d.Error(spec.data.pos, fmt::format("data.{} = {} is outside the decoders' vocabulary [0, {}); use the "
                                       "tokenizer's {} placeholder id",
                                       k.token_key, k.id, vocab, k.item));
  }
}

// Native-resolution images and videos (plan/native_vision.h): the ViT takes
// them, the pixel bounds hold, and videos (native only) have a placeholder of
// their own inside the vocabulary.
void CheckNativeVision(Diagnostics& d, const Spec& spec, int64_t vocab) {
  const DataSpec& data = spec.data;
  const bool native = data.image_resolution == plan::kImageResolutionNative;
  if (data.video_token_id >= 0 && !native) {
    d.Error(spec.data.pos, fmt::format("data.video_token_id = {}: videos are read at native resolution; set "
                                       "image_resolution = \"native\" or drop video_token_id",
                                       data.video_token_id));
  }
  if (data.video_token_id >= 0 &&
      (data.video_token_id == data.image_token_id || data.video_token_id == data.audio_token_id)) {
    d.Error(spec.data.pos, fmt::format("data.video_token_id = {} is also another kind's placeholder; each kind needs "
                                       "its own id (Qwen2-VL's <|video_pad|> = 151656)",
                                       data.video_token_id));
  }
  if (data.video_token_id >= 0 && vocab > 0 && data.video_token_id >= vocab) {
    d.Error(spec.data.pos, fmt::format("data.video_token_id = {} is outside the decoders' vocabulary [0, {})",
                                       data.video_token_id, vocab));
  }
  if (!native) return;
  plan::DataPlan plan_data;
  plan_data.image_resolution = data.image_resolution;
  plan_data.image_min_pixels = data.image_min_pixels;
  plan_data.image_max_pixels = data.image_max_pixels;
  bool vit = false;
  for (const SectionSpec& s : spec.sections) {
    const ModelSpec* m = spec.FindModel(s.model);
    if (!m || m->desc.kind != plan::ModelKind::kVit) continue;
    vit = true;
    const Status st = plan::CheckNativeResolution(plan_data, m->desc, "section '" + s.name + "'");
    if (!st.ok()) d.Error(spec.data.pos, st.message());
  }
  if (!vit) {
    d.Error(spec.data.pos,
            "data.image_resolution = \"native\" needs a vision section (a Qwen2-VL-family ViT) to "
            "encode the images; add one or drop image_resolution");
  }
}

// A JSONL manifest's images and audio clips (CheckManifestMedia each), and
// their placeholders apart.
void CheckManifestData(Diagnostics& d, const Spec& spec) {
  if (spec.data.manifest.empty()) return;
  int64_t vocab = 0;
  for (const SectionSpec& s : spec.sections) {
    const ModelSpec* m = spec.FindModel(s.model);
    if (m && m->desc.kind == plan::ModelKind::kDecoder && m->desc.vocab > 0) {
      vocab = vocab == 0 ? m->desc.vocab : std::min(vocab, m->desc.vocab);
    }
  }
  const auto& data = spec.data;
  CheckManifestMedia(
      d, spec,
      {plan::ModelKind::kVit, "vit", "ViTs", "a ViT section", "images", "image", "one vision section", "image_token_id",
       "max_images_per_sample", "Qwen2-VL's <|image_pad|> = 151655", data.image_token_id, data.max_images_per_sample},
      vocab);
  CheckManifestMedia(d, spec,
                     {plan::ModelKind::kAudioEncoder, "audio_encoder", "audio encoders", "an audio encoder section",
                      "audio clips", "clip", "one audio section", "audio_token_id", "max_audios_per_sample",
                      "Qwen2-Audio's <|AUDIO|> = 151646", data.audio_token_id, data.max_audios_per_sample},
                     vocab);
  if (data.audio_token_id >= 0 && data.audio_token_id == data.image_token_id) {
    d.Error(spec.data.pos, fmt::format("data.audio_token_id and data.image_token_id are both {}; each kind needs its "
                                       "own placeholder id",
                                       data.audio_token_id));
  }
  CheckNativeVision(d, spec, vocab);
}

}  // namespace

void CheckGraph(Diagnostics& d, const Spec& spec) {
  CheckSections(d, spec);
  CheckManifestData(d, spec);
  if (!CheckEdges(d, spec)) return;
  for (const SectionSpec& s : spec.sections) {
    if (s.has_loss) CheckLoss(d, spec, s);
  }
  CheckCycles(d, spec);
}

}  // namespace maestro::compiler::internal
