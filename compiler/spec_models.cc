// SPDX-License-Identifier: Apache-2.0
// The reader of [models.<name>] (ReadModel, declared in
// compiler/spec_tables.h with the other tables' readers): a built-in shape
// of a `kind` (which keys each kind has, their types and ranges), an
// imported Hugging Face config.json (`hf_config`), or a checkpoint folder
// (`weights`) whose tensors are checked now against the names and shapes the
// runtime will load.
#include <fmt/format.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <system_error>

#include "base/shell.h"
#include "compiler/model.h"
#include "compiler/spec_tables.h"
#include "hf/checkpoint.h"
#include "hf/name_map.h"

namespace maestro::compiler::internal {

namespace {

// Bit masks of the model kinds a shape key applies to.
constexpr unsigned kDecoderKey = 1u << 0;
constexpr unsigned kVitKey = 1u << 1;
constexpr unsigned kAudioKey = 1u << 2;
constexpr unsigned kProjectorKey = 1u << 3;

unsigned KindBit(plan::ModelKind kind) {
  switch (kind) {
    case plan::ModelKind::kDecoder: return kDecoderKey;
    case plan::ModelKind::kVit: return kVitKey;
    case plan::ModelKind::kAudioEncoder: return kAudioKey;
    case plan::ModelKind::kProjector: return kProjectorKey;
  }
  return kDecoderKey;
}

// One key of a built-in shape ([models.<name>] with a `kind`): an integer
// in [0, kMaxShapeValue] (kInt) or a flag, true or false (kFlag); each is
// checked for its TOML type, and the message points at the value. An integer
// sets `as_int`, a flag `as_bool`; a key with no field to set lands in
// ModelDesc::extra[key] (a flag as 1 or 0), where the cost model reads it.
enum class ShapeType { kInt, kFlag, kNumber };

struct ShapeKey {
  const char* key;
  unsigned kinds;  // kDecoderKey | kVitKey | ...
  ShapeType type;
  int64_t plan::ModelDesc::*as_int;  // nullptr: extra[key]
  bool plan::ModelDesc::*as_bool;    // nullptr: extra[key]
};

constexpr int64_t kMaxShapeValue = int64_t{1} << 40;
constexpr ShapeType kInt = ShapeType::kInt;
constexpr ShapeType kFlag = ShapeType::kFlag;
constexpr ShapeType kNumber = ShapeType::kNumber;  // a real in [0, 1e6], always to extra[key]

// The keys of each kind, read in this order (which is also the order of
// their messages and of the "did you mean" candidates); docs/spec.md lists
// them kind by kind.
const ShapeKey kShapeKeys[] = {
    {"hidden", kDecoderKey | kVitKey | kAudioKey, kInt, &plan::ModelDesc::hidden, nullptr},
    {"layers", kDecoderKey | kVitKey | kAudioKey, kInt, &plan::ModelDesc::layers, nullptr},
    {"heads", kDecoderKey | kVitKey | kAudioKey, kInt, &plan::ModelDesc::heads, nullptr},
    {"kv_heads", kDecoderKey, kInt, &plan::ModelDesc::kv_heads, nullptr},
    {"head_dim", kDecoderKey, kInt, &plan::ModelDesc::head_dim, nullptr},
    {"ffn_hidden", kDecoderKey | kVitKey | kAudioKey, kInt, &plan::ModelDesc::ffn_hidden, nullptr},
    {"vocab", kDecoderKey, kInt, &plan::ModelDesc::vocab, nullptr},
    {"tie_embeddings", kDecoderKey, kFlag, nullptr, &plan::ModelDesc::tie_embeddings},
    {"experts", kDecoderKey, kInt, &plan::ModelDesc::experts, nullptr},
    {"experts_per_token", kDecoderKey, kInt, &plan::ModelDesc::experts_per_token, nullptr},
    {"moe_ffn_hidden", kDecoderKey, kInt, &plan::ModelDesc::moe_ffn_hidden, nullptr},
    {"shared_expert_ffn_hidden", kDecoderKey, kInt, nullptr, nullptr},
    {"norm_topk_prob", kDecoderKey, kFlag, nullptr, nullptr},
    {"router_aux_loss_coef", kDecoderKey, kNumber, nullptr, nullptr},
    {"qk_norm", kDecoderKey, kFlag, nullptr, nullptr},
    {"decoder_sparse_step", kDecoderKey, kInt, nullptr, nullptr},
    {"mrope_section_t", kDecoderKey, kInt, nullptr, nullptr},  // M-RoPE (plan/mrope.h)
    {"mrope_section_h", kDecoderKey, kInt, nullptr, nullptr},
    {"mrope_section_w", kDecoderKey, kInt, nullptr, nullptr},
    {"mrope_interleaved", kDecoderKey, kFlag, nullptr, nullptr},
    {"image_size", kVitKey, kInt, &plan::ModelDesc::image_size, nullptr},
    {"patch_size", kVitKey, kInt, &plan::ModelDesc::patch_size, nullptr},
    {"channels", kVitKey, kInt, &plan::ModelDesc::channels, nullptr},
    {"temporal_patch", kVitKey, kInt, nullptr, nullptr},
    {"cls_token", kVitKey, kFlag, nullptr, nullptr},
    {"pos_embed", kVitKey, kFlag, nullptr, nullptr},
    {"patch_bias", kVitKey, kFlag, nullptr, nullptr},
    {"pre_norm", kVitKey, kFlag, nullptr, nullptr},
    {"final_norm", kVitKey, kFlag, nullptr, nullptr},
    {"pooler", kVitKey, kFlag, nullptr, nullptr},
    {"qkv_bias", kDecoderKey | kVitKey, kFlag, nullptr, nullptr},
    {"attn_out_bias", kDecoderKey, kFlag, nullptr, nullptr},
    {"mlp_bias", kDecoderKey, kFlag, nullptr, nullptr},
    {"mlp_gated", kDecoderKey, kFlag, nullptr, nullptr},
    {"norm_bias", kDecoderKey, kFlag, nullptr, nullptr},
    {"spatial_merge", kVitKey, kInt, nullptr, nullptr},
    {"merger_hidden", kVitKey, kInt, nullptr, nullptr},
    {"mel_bins", kAudioKey, kInt, &plan::ModelDesc::mel_bins, nullptr},
    {"audio_frames", kAudioKey, kInt, &plan::ModelDesc::audio_frames, nullptr},
    {"max_source_positions", kAudioKey, kInt, nullptr, nullptr},
    {"in_dim", kProjectorKey, kInt, &plan::ModelDesc::in_dim, nullptr},
    {"out_dim", kVitKey | kProjectorKey, kInt, &plan::ModelDesc::out_dim, nullptr},
    // A projector lists ffn_hidden after in_dim and out_dim.
    {"ffn_hidden", kProjectorKey, kInt, &plan::ModelDesc::ffn_hidden, nullptr},
};

// Reads k.key of the model's table (absent: nothing set, the key known all
// the same); a value of the wrong TOML type is reported at the value.
void ReadShapeKey(TableReader& r, const ShapeKey& k, plan::ModelDesc& desc) {
  const std::string key = k.key;
  if (k.type == ShapeType::kNumber) {
    double x = 0;
    if (r.Number(key, &x, 0.0, 1e6)) desc.extra[key] = x;
    return;
  }
  if (k.type == ShapeType::kFlag) {
    bool b = false;
    if (!r.Bool(key, &b)) return;
    if (k.as_bool) {
      desc.*k.as_bool = b;
    } else {
      desc.extra[key] = b ? 1.0 : 0.0;
    }
    return;
  }
  int64_t v = 0;
  if (!r.Int(key, &v, 0, kMaxShapeValue)) return;
  if (k.as_int) {
    desc.*k.as_int = v;
  } else {
    desc.extra[key] = static_cast<double>(v);
  }
}

// [models.<name>] with hf_config = "<path>": the imported config.
// `key` is where the config came from: "hf_config", or "weights" (its
// folder's config.json). `part` ("text" or "vision") chooses one model of a
// vision-language config (compiler/model.h ModelFromHfConfig).
void ReadHfModel(Diagnostics& d, TableReader& r, const std::string& hf, const std::string& key,
                 const std::string& base_dir, ModelSpec& m) {
  const std::string path = JoinPath(base_dir, hf);
  std::string part;
  const bool has_part = r.String("part", &part);
  auto desc = ModelFromHfConfigFile(path, part);
  if (!desc.ok()) {
    const bool about_part = has_part && desc.status().message().find("part") != std::string::npos;
    d.Error(r.PosOfKey(about_part ? "part" : key), desc.status().message());
  } else {
    m.desc = *desc;
    m.desc.source = hf;  // as written in the spec: stable across machines
  }
}

// [models.<name>] weights = "<dir>": a Hugging Face checkpoint folder. Its
// config.json is the model (unless hf_config names another); its tensors are
// checked now against the names and shapes the runtime will load, so a
// wrong folder fails here and not on every rank of a started job.
void ReadWeights(Diagnostics& d, TableReader& r, const std::string& where, const std::string& weights,
                 const std::string& base_dir, ModelSpec& m) {
  const SourcePos pos = r.PosOfKey("weights");
  if (weights.empty() || !IsSingleLine(weights)) {
    d.Error(pos, fmt::format("{}: weights must be the path of a Hugging Face checkpoint folder (config.json and "
                             "*.safetensors), on one line",
                             where));
    return;
  }
  const std::string dir = JoinPath(base_dir, weights);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    d.Error(pos, fmt::format("{}: weights = '{}': no folder '{}' (a Hugging Face checkpoint folder: config.json and "
                             "model.safetensors or shards with model.safetensors.index.json; the path is relative "
                             "to the spec)",
                             where, weights, dir));
    r.Get("hf_config");  // known all the same: one error, not two
    r.Get("part");
    return;
  }
  std::string hf;
  if (!r.String("hf_config", &hf)) {
    hf = (std::filesystem::path(weights) / hf::kConfigFileName).string();
    ReadHfModel(d, r, hf, "weights", base_dir, m);
  } else {
    ReadHfModel(d, r, hf, "hf_config", base_dir, m);
  }
  if (!d.ok()) return;
  m.desc.weights = dir;
  auto ckpt = hf::HfCheckpoint::Open(dir);
  if (!ckpt.ok()) {
    d.Error(pos, fmt::format("{}: weights = '{}': {}", where, weights, ckpt.status().message()));
    return;
  }
  auto names = hf::ExpandWeightNames(m.desc);
  Status matches = names.ok() ? hf::CheckCheckpointMatches(**ckpt, *names, m.desc.source) : names.status();
  if (!matches.ok()) d.Error(pos, fmt::format("{}: weights = '{}': {}", where, weights, matches.message()));
}

}  // namespace

void ReadModel(Diagnostics& d, const std::string& name, const toml::table& t, SourcePos pos,
               const std::string& base_dir, ModelSpec& m) {
  const std::string where = "[models." + name + "]";
  TableReader r(d, t, where);
  m.name = name;
  m.pos = pos;
  std::string hf, weights;
  if (r.String("weights", &weights)) {
    ReadWeights(d, r, where, weights, base_dir, m);
    r.Finish();
    return;
  }
  if (r.String("hf_config", &hf)) {
    ReadHfModel(d, r, hf, "hf_config", base_dir, m);
    r.Finish();
    return;
  }
  std::string kind;
  if (!r.String("kind", &kind)) {
    if (!t.get("kind"))
      d.Error(r.pos(), where + " needs 'kind' (decoder, vit, audio_encoder, projector), 'hf_config' or 'weights'");
    r.Finish();
    return;
  }
  static const std::map<std::string, plan::ModelKind> kinds = {{"decoder", plan::ModelKind::kDecoder},
                                                               {"vit", plan::ModelKind::kVit},
                                                               {"audio_encoder", plan::ModelKind::kAudioEncoder},
                                                               {"projector", plan::ModelKind::kProjector}};
  auto it = kinds.find(kind);
  if (it == kinds.end()) {
    d.Error(r.PosOfKey("kind"), fmt::format("unknown model kind '{}'{}", kind,
                                            Suggest(kind, {"decoder", "vit", "audio_encoder", "projector"})));
    r.Finish();
    return;
  }
  plan::ModelDesc& desc = m.desc;
  desc.kind = it->second;
  desc.source = "builtin";
  for (const ShapeKey& k : kShapeKeys) {
    if (k.kinds & KindBit(desc.kind)) ReadShapeKey(r, k, desc);
  }
  r.Get("kind");
  if (desc.kind == plan::ModelKind::kDecoder && desc.kv_heads == 0) desc.kv_heads = desc.heads;
  if (desc.kind == plan::ModelKind::kVit && desc.channels == 0) desc.channels = 3;
  if (desc.kind != plan::ModelKind::kDecoder && desc.kind != plan::ModelKind::kProjector) desc.kv_heads = desc.heads;
  r.Finish();
  if (d.ok()) {
    std::string key;
    Status s = CheckModelShape(desc, where, &key);
    // At the value, or at the table when the key was left to its default.
    if (!s.ok()) d.Error(!key.empty() && t.get(key) ? r.PosOfKey(key) : pos, s.message());
  }
}

}  // namespace maestro::compiler::internal
