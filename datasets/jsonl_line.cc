// SPDX-License-Identifier: Apache-2.0
#include "datasets/jsonl_line.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "base/checks.h"
#include "datasets/image_decode.h"
#include "datasets/native_image.h"

namespace maestro::datasets::internal {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr std::array<std::string_view, 11> kKnownKeys = {
    "input_ids", "labels",          "loss_mask", "images", "image_positions", "videos", "video_positions",
    "audios",    "audio_positions", "id",        "meta"};
// The keys of one "videos" item.
constexpr std::array<std::string_view, 3> kVideoKeys = {"frames", "folder", "fps"};

// One kind of media a line lists and splices at its placeholder token: its
// keys, its noun in messages, and the options that give its placeholder.
struct MediaKind {
  const char* key;            // "images"
  const char* positions_key;  // "image_positions"
  const char* noun;           // "image"
  const char* example;        // "relative/path.jpg"
  const char* token_option;   // "image_token_id"
  const char* per_item;       // "tokens_per_image"
  int64_t token_id;
  int64_t tokens_per_item;
};

MediaKind ImageKind(const JsonlManifestOptions& o) {
  return {"images",         "image_positions",  "image",          "relative/path.jpg",
          "image_token_id", "tokens_per_image", o.image_token_id, o.tokens_per_image};
}

MediaKind VideoKind(const JsonlManifestOptions& o) {
  return {"videos",         "video_positions",
          "video",          "{\"frames\": [\"f0.jpg\", ...], \"fps\": 2.0}",
          "video_token_id", "native_resolution and video_token_id",
          o.video_token_id, 0};
}

MediaKind AudioKind(const JsonlManifestOptions& o) {
  return {"audios",         "audio_positions",  "audio clip",     "relative/clip.flac",
          "audio_token_id", "tokens_per_audio", o.audio_token_id, o.tokens_per_audio};
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The deepest nesting of arrays and objects, outside strings; stops counting
// past `limit`.
int JsonDepth(const char* data, size_t size, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < size; ++i) {
    const char c = data[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// A short rendering of a JSON value for messages.
std::string Brief(const json& v) {
  if (v.is_array()) return fmt::format("an array of {}", v.size());
  if (v.is_object()) return "an object";
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  if (v.is_string()) return "the string " + s;
  if (v.is_boolean()) return "the boolean " + s;
  if (v.is_null()) return "null";
  return s;
}

// An integer that fits int64; false for floats, strings, out-of-range values.
bool GetInt(const json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  return false;
}

// The maximal runs of `token_id` in `tokens` (none when token_id < 0).
std::vector<PlaceholderRun> MaximalRuns(const std::vector<int64_t>& tokens, int64_t token_id) {
  std::vector<PlaceholderRun> runs;
  if (token_id < 0) return runs;
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t t = 0; t < n;) {
    if (tokens[static_cast<size_t>(t)] != token_id) {
      ++t;
      continue;
    }
    int64_t e = t;
    while (e < n && tokens[static_cast<size_t>(e)] == token_id) ++e;
    runs.push_back({t, e - t});
    t = e;
  }
  return runs;
}

bool IsFrameFile(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

class LineParser {
 public:
  LineParser(const LineContext& ctx, int64_t line, int64_t sample) : ctx_(ctx), line_(line), sample_(sample) {}

  // One line of the manifest, checked in this order: a JSON object within
  // the limits, its "id", no unknown key, "input_ids", "labels" or
  // "loss_mask", "images", and the image placeholders (with
  // "image_positions"; native_resolution: each image's own run length),
  // "videos" and theirs, then "audios" and theirs. The first problem is the
  // error.
  StatusOr<ParsedLine> Parse(const char* data, size_t size) {
    ParsedLine out;
    json doc;
    MAESTRO_RETURN_IF_ERROR(ParseObject(data, size, &doc));
    MAESTRO_RETURN_IF_ERROR(ReadUserId(doc, &out));
    MAESTRO_RETURN_IF_ERROR(CheckKnownKeys(doc));
    MAESTRO_RETURN_IF_ERROR(ReadInputIds(doc, &out));
    MAESTRO_RETURN_IF_ERROR(ReadLossTargets(doc, &out));
    const JsonlManifestOptions& o = *ctx_.options;
    std::vector<std::string> written;  // the paths as in the line, for messages
    MAESTRO_RETURN_IF_ERROR(ReadMedia(doc, ImageKind(o), &out.image_paths, &written));
    if (o.native_resolution) {
      MAESTRO_RETURN_IF_ERROR(ReadNativeImages(doc, written, &out));
    } else {
      MAESTRO_RETURN_IF_ERROR(ReadPlaceholderRuns(doc, ImageKind(o), out.tokens, out.image_paths, written, &out.runs));
    }
    written.clear();
    MAESTRO_RETURN_IF_ERROR(ReadVideos(doc, &out, &written));
    written.clear();
    MAESTRO_RETURN_IF_ERROR(ReadMedia(doc, AudioKind(o), &out.audio_paths, &written));
    MAESTRO_RETURN_IF_ERROR(
        ReadPlaceholderRuns(doc, AudioKind(o), out.tokens, out.audio_paths, written, &out.audio_runs));
    return out;
  }

 private:
  // The line as a JSON object: at most kJsonlMaxLineBytes, nested at most
  // kJsonlMaxDepth deep, valid JSON, an object (into *parsed).
  Status ParseObject(const char* data, size_t size, json* parsed) const {
    if (size > static_cast<size_t>(kJsonlMaxLineBytes)) {
      return Bad(fmt::format("the line is longer than the limit of {} bytes", kJsonlMaxLineBytes),
                 "one sample per line, with a newline after each; split very long samples");
    }
    if (JsonDepth(data, size, kJsonlMaxDepth) > kJsonlMaxDepth) {
      return Bad(fmt::format("JSON nested deeper than {} levels", kJsonlMaxDepth),
                 "a line is a flat object of arrays; flatten \"meta\"");
    }
    json& doc = *parsed;
    doc = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) {
      // Parse again with exceptions only to word the error.
      std::string why = "invalid JSON";
      try {
        const json again = json::parse(data, data + size);
        (void)again;
      } catch (const json::exception& e) {
        why = e.what();
      }
      return Bad(fmt::format("not valid JSON ({})", why),
                 "each line must be one complete JSON object; check quoting and that objects are not split "
                 "across lines");
    }
    if (!doc.is_object()) {
      return Bad(fmt::format("the line is {}, not a JSON object", Brief(doc)),
                 "write each sample as {\"input_ids\": [...], ...}");
    }
    return Status::Ok();
  }

  // "id" (optional): a string or an integer; named in every later message.
  Status ReadUserId(const json& doc, ParsedLine* line) {
    ParsedLine& out = *line;
    if (const auto it = doc.find("id"); it != doc.end()) {
      if (!it->is_string() && !it->is_number_integer()) {
        return Bad(fmt::format("\"id\" is {}, not a string or an integer", Brief(*it)),
                   "write the sample's name as a string or an integer, or drop \"id\"");
      }
      out.user_id = it->dump(-1, ' ', false, json::error_handler_t::replace);
      if (out.user_id.size() > 64) out.user_id = out.user_id.substr(0, 61) + "...";
      user_id_ = out.user_id;
    }
    return Status::Ok();
  }

  // Every key is one the manifest knows (with a suggestion for a near miss).
  Status CheckKnownKeys(const json& doc) const {
    for (const auto& item : doc.items()) {
      const std::string& key = item.key();
      if (std::find(kKnownKeys.begin(), kKnownKeys.end(), key) != kKnownKeys.end()) continue;
      std::string_view nearest;
      size_t best = 4;  // suggest only close names
      for (std::string_view known : kKnownKeys) {
        const size_t d = EditDistance(key, known);
        if (d < best) best = d, nearest = known;
      }
      std::string shown = json(key).dump(-1, ' ', false, json::error_handler_t::replace);
      if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
      return Bad(fmt::format("unknown key {}{}", shown,
                             nearest.empty() ? std::string() : fmt::format(" (did you mean \"{}\"?)", nearest)),
                 "the known keys are input_ids, labels, loss_mask, images, image_positions, videos, "
                 "video_positions, audios, audio_positions, id, meta; put "
                 "anything else under \"meta\"");
    }
    return Status::Ok();
  }

  // "input_ids": 1 to seq_len + 1 token ids inside the vocabulary.
  Status ReadInputIds(const json& doc, ParsedLine* line) const {
    ParsedLine& out = *line;
    const JsonlManifestOptions& o = *ctx_.options;
    const auto ids = doc.find("input_ids");
    if (ids == doc.end()) {
      return Bad("no \"input_ids\"", "every line needs \"input_ids\": the token ids your processor produced");
    }
    if (!ids->is_array()) {
      return Bad(fmt::format("\"input_ids\" is {}, not an array of integers", Brief(*ids)),
                 "write the token ids as a JSON array of integers");
    }
    if (ids->empty()) return Bad("\"input_ids\" is empty", "drop the line, or give the sample its tokens");
    const int64_t n = static_cast<int64_t>(ids->size());
    if (n > o.seq_len + 1) {
      return Bad(fmt::format("\"input_ids\" has {} tokens, more than seq_len + 1 = {} (seq_len inputs and the "
                             "next-token target of the last)",
                             n, o.seq_len + 1),
                 "samples are never truncated: split the sample into shorter lines, or raise seq_len");
    }
    out.tokens.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) {
      const json& v = (*ids)[static_cast<size_t>(t)];
      int64_t id = 0;
      if (!GetInt(v, &id)) {
        return Bad(fmt::format("input_ids[{}] is {}, not an integer token id", t, Brief(v)),
                   "write token ids as JSON integers (no quotes, no decimal point)");
      }
      if (id < 0 || id >= o.vocab_size) {
        return Bad(fmt::format("input_ids[{}] = {} is outside the vocabulary [0, {})", t, id, o.vocab_size),
                   "tokenize with the model's own tokenizer, or set vocab_size to the model's");
      }
      out.tokens[static_cast<size_t>(t)] = id;
    }
    return Status::Ok();
  }

  // "labels" (-100 or a token id per input token) or "loss_mask" (0/1 per
  // input token), at most one of them.
  Status ReadLossTargets(const json& doc, ParsedLine* line) const {
    ParsedLine& out = *line;
    const JsonlManifestOptions& o = *ctx_.options;
    const int64_t n = static_cast<int64_t>(out.tokens.size());
    const auto labels = doc.find("labels");
    const auto mask = doc.find("loss_mask");
    if (labels != doc.end() && mask != doc.end()) {
      return Bad("both \"labels\" and \"loss_mask\" are given",
                 "give one: labels (-100 = no loss) or loss_mask (0/1 per token)");
    }
    if (labels != doc.end()) {
      if (!labels->is_array() || static_cast<int64_t>(labels->size()) != n) {
        return Bad(fmt::format("\"labels\" is {}, but input_ids has {} tokens", Brief(*labels), n),
                   "give one label per input token (the HF convention: -100 = no loss, else the token id)");
      }
      out.has_labels = true;
      out.labels.resize(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) {
        const json& v = (*labels)[static_cast<size_t>(t)];
        int64_t label = 0;
        if (!GetInt(v, &label) || (label != kJsonlIgnoreTarget && (label < 0 || label >= o.vocab_size))) {
          return Bad(fmt::format("labels[{}] is {}, neither -100 nor a token id in [0, {})", t, Brief(v), o.vocab_size),
                     "a label is -100 (no loss) or the token id to predict");
        }
        out.labels[static_cast<size_t>(t)] = label;
      }
    }
    if (mask != doc.end()) {
      if (!mask->is_array() || static_cast<int64_t>(mask->size()) != n) {
        return Bad(fmt::format("\"loss_mask\" is {}, but input_ids has {} tokens", Brief(*mask), n),
                   "give one 0/1 per input token (1 = the token is predicted)");
      }
      out.has_loss_mask = true;
      out.loss_mask.resize(static_cast<size_t>(n));
      for (int64_t t = 0; t < n; ++t) {
        const json& v = (*mask)[static_cast<size_t>(t)];
        int64_t m = 0;
        if (!GetInt(v, &m) || (m != 0 && m != 1)) {
          return Bad(fmt::format("loss_mask[{}] is {}, not 0 or 1", t, Brief(v)),
                     "write 1 where the token is predicted, 0 elsewhere (integers, not booleans)");
        }
        out.loss_mask[static_cast<size_t>(t)] = static_cast<uint8_t>(m);
      }
    }
    return Status::Ok();
  }

  // "images" ("audios"): path strings, resolved against the manifest's
  // folder (and checked to exist when asked); none unless the model takes
  // that kind (its placeholder id is set).
  Status ReadMedia(const json& doc, const MediaKind& kind, std::vector<std::string>* paths,
                   std::vector<std::string>* written_paths) const {
    std::vector<std::string>& written = *written_paths;
    if (const auto items = doc.find(kind.key); items != doc.end()) {
      if (!items->is_array()) {
        return Bad(fmt::format("\"{}\" is {}, not an array of paths", kind.key, Brief(*items)),
                   fmt::format("write \"{}\": [\"{}\", ...] (an empty array for none)", kind.key, kind.example));
      }
      for (size_t k = 0; k < items->size(); ++k) {
        const json& v = (*items)[k];
        if (!v.is_string()) {
          return Bad(fmt::format("{}[{}] is {}, not a path string", kind.key, k, Brief(v)),
                     fmt::format("write each {} as a path string relative to the manifest's folder", kind.noun));
        }
        std::string resolved;
        Status s = ResolvePath(kind, k, v.get_ref<const std::string&>(), PathIs::kFile, &resolved);
        if (!s.ok()) return s;
        written.push_back(v.get<std::string>());
        paths->push_back(std::move(resolved));
      }
    }
    const int64_t num = static_cast<int64_t>(paths->size());
    if (kind.token_id < 0 && num > 0) {
      return Bad(
          fmt::format("the line lists {} {}(s), but the model takes none (no {})", num, kind.noun, kind.token_option),
          fmt::format("use a manifest without {} for this model, or set {} and {}", kind.key, kind.token_option,
                      kind.per_item));
    }
    return Status::Ok();
  }

  // The placeholder tokens of one kind: tokens_per_item per listed item, in
  // runs that end within the first seq_len inputs, one run per item; and
  // "image_positions" ("audio_positions", optional), the start of each run.
  Status ReadPlaceholderRuns(const json& doc, const MediaKind& kind, const std::vector<int64_t>& tokens,
                             const std::vector<std::string>& paths, const std::vector<std::string>& written,
                             std::vector<PlaceholderRun>* runs) const {
    const JsonlManifestOptions& o = *ctx_.options;
    const int64_t num = static_cast<int64_t>(paths.size());
    const std::vector<PlaceholderRun> maximal = MaximalRuns(tokens, kind.token_id);
    int64_t placeholders = 0;
    for (const PlaceholderRun& run : maximal) placeholders += run.length;
    if (placeholders != num * kind.tokens_per_item) {
      return Bad(fmt::format("input_ids holds {} {} placeholder tokens (id {}), but \"{}\" lists {} {}(s) x {} {} = {}",
                             placeholders, kind.noun, kind.token_id, kind.key, num, kind.noun, kind.per_item,
                             kind.tokens_per_item, num * kind.tokens_per_item),
                 fmt::format("each {} needs exactly {} placeholders in a row (what the processor emits after "
                             "expanding); list one path per {}, and check {} and {} against the model",
                             kind.noun, kind.per_item, kind.noun, kind.per_item, kind.token_option));
    }
    for (const PlaceholderRun& run : maximal) {
      if (run.length % kind.tokens_per_item != 0) {
        return Bad(fmt::format("the {} placeholder run at input_ids[{}] has {} tokens, not a multiple of {} {}",
                               kind.noun, run.start, run.length, kind.per_item, kind.tokens_per_item),
                   fmt::format("each {} needs exactly {} placeholders in a row", kind.noun, kind.per_item));
      }
      if (run.start + run.length > o.seq_len) {
        return Bad(fmt::format("the placeholder run [{}, {}) reaches past the seq_len = {} inputs: the {} "
                               "would be cut",
                               run.start, run.start + run.length, o.seq_len, kind.noun),
                   fmt::format("shorten the sample so that its {} end within the first seq_len tokens, or raise "
                               "seq_len",
                               kind.key));
      }
      for (int64_t s = run.start; s < run.start + run.length; s += kind.tokens_per_item) {
        runs->push_back({s, kind.tokens_per_item});
      }
    }
    return CheckPositions(doc, kind, *runs, written);
  }

  // "image_positions" ("video_positions", "audio_positions"; optional): one
  // start per listed item, each equal to the start of the item's run.
  Status CheckPositions(const json& doc, const MediaKind& kind, const std::vector<PlaceholderRun>& runs,
                        const std::vector<std::string>& written) const {
    const int64_t num = static_cast<int64_t>(written.size());
    if (const auto pos = doc.find(kind.positions_key); pos != doc.end()) {
      if (!pos->is_array() || static_cast<int64_t>(pos->size()) != num) {
        return Bad(fmt::format("\"{}\" is {}, but \"{}\" lists {} {}(s)", kind.positions_key, Brief(*pos), kind.key,
                               num, kind.noun),
                   fmt::format("give one start position per {}, or drop \"{}\"", kind.noun, kind.positions_key));
      }
      for (size_t k = 0; k < pos->size(); ++k) {
        int64_t p = 0;
        if (!GetInt((*pos)[k], &p) || p < 0) {
          return Bad(fmt::format("{}[{}] is {}, not a non-negative integer", kind.positions_key, k, Brief((*pos)[k])),
                     fmt::format("give the index in input_ids where each {}'s placeholders start", kind.noun));
        }
        if (p != runs[k].start) {
          return Bad(fmt::format("{}[{}] = {}, but {} {} ({})'s placeholders start at input_ids[{}]",
                                 kind.positions_key, k, p, kind.noun, k, written[k], runs[k].start),
                     fmt::format("{} k fills the k-th run of placeholders: fix {} or the order of {}", kind.noun,
                                 kind.positions_key, kind.key));
        }
      }
    }
    return Status::Ok();
  }

  // ---- native resolution (the Qwen2-VL family) -------------------------------

  std::string Where() const {
    return fmt::format("{}:{} (sample {}{})", *ctx_.path, line_, sample_,
                       user_id_.empty() ? std::string() : ", id " + user_id_);
  }

  // The grid of `frames` frames whose first is `path` (`shown`: how the line
  // names it), from the file's header.
  StatusOr<VisualGrid> GridOf(const std::string& path, const std::string& shown, int64_t frames) const {
    StatusOr<std::pair<int, int>> size = ReadImageSize(path);
    if (!size.ok()) {
      return Status(size.status().code(),
                    fmt::format("{}: {}: {}; fix the path or replace the file (native resolution reads every "
                                "image's size when the manifest opens)",
                                Where(), shown, size.status().message()));
    }
    StatusOr<VisualGrid> grid = NativeVideoGrid(frames, size->first, size->second, ctx_.options->native);
    if (!grid.ok()) {
      return Bad(fmt::format("{} ({}x{}): {}", shown, size->first, size->second, grid.status().message()),
                 "crop or pad the image: Qwen2-VL's smart_resize refuses aspect ratios over 200");
    }
    return grid;
  }

  // native_resolution: image k's run is its own grid's tokens long.
  Status ReadNativeImages(const json& doc, const std::vector<std::string>& written, ParsedLine* line) {
    ParsedLine& out = *line;
    const JsonlManifestOptions& o = *ctx_.options;
    std::vector<int64_t> lengths;
    std::vector<std::string> shown;
    for (size_t k = 0; k < out.image_paths.size(); ++k) {
      shown.push_back(fmt::format("images[{}] \"{}\"", k, written[k]));
      MAESTRO_ASSIGN_OR_RETURN(const VisualGrid grid, GridOf(out.image_paths[k], shown.back(), 1));
      out.image_grids.push_back(grid);
      lengths.push_back(grid.tokens(o.native.merge));
    }
    MAESTRO_RETURN_IF_ERROR(CutNativeRuns(ImageKind(o), out.tokens, lengths, shown, &out.runs));
    return CheckPositions(doc, ImageKind(o), out.runs, written);
  }

  // native_resolution: the maximal runs of the kind's placeholder are cut,
  // in order, into one run per item of lengths[k] tokens (back-to-back items
  // share a maximal run); each must end within seq_len.
  Status CutNativeRuns(const MediaKind& kind, const std::vector<int64_t>& tokens, const std::vector<int64_t>& lengths,
                       const std::vector<std::string>& shown, std::vector<PlaceholderRun>* runs) const {
    const std::vector<PlaceholderRun> maximal = MaximalRuns(tokens, kind.token_id);
    int64_t placeholders = 0;
    for (const PlaceholderRun& run : maximal) placeholders += run.length;
    int64_t need = 0;
    std::string each;
    for (size_t k = 0; k < lengths.size(); ++k) {
      need += lengths[k];
      if (k < 4) each += fmt::format("{}{} needs {}", k == 0 ? "" : ", ", shown[k], lengths[k]);
    }
    if (lengths.size() > 4) each += ", ...";
    const std::string fix = fmt::format(
        "at native resolution each {} takes (h / {f}) * (w / {f}) placeholders for its smart_resize'd "
        "size h x w (video: times ceil(frames / {t})); tokenize with the processor and the same "
        "patch / merge / temporal / min_pixels / max_pixels as [data]",
        kind.noun, fmt::arg("f", ctx_.options->native.factor()), fmt::arg("t", ctx_.options->native.temporal));
    if (placeholders != need) {
      return Bad(fmt::format("input_ids holds {} {} placeholder tokens (id {}), but the {} {}(s) of \"{}\" need {}{}",
                             placeholders, kind.noun, kind.token_id, lengths.size(), kind.noun, kind.key, need,
                             each.empty() ? std::string() : " (" + each + ")"),
                 fix);
    }
    size_t r = 0;
    int64_t used = 0;
    for (size_t k = 0; k < lengths.size(); ++k) {
      if (used == maximal[r].length) ++r, used = 0;
      const PlaceholderRun& m = maximal[r];
      if (m.length - used < lengths[k]) {
        return Bad(fmt::format("{} needs {} placeholders in a row, but the run at input_ids[{}] has {} left of its {}",
                               shown[k], lengths[k], m.start + used, m.length - used, m.length),
                   fix);
      }
      const PlaceholderRun run{m.start + used, lengths[k]};
      if (run.start + run.length > ctx_.options->seq_len) {
        return Bad(fmt::format("the placeholder run [{}, {}) of {} reaches past the seq_len = {} inputs: the {} "
                               "would be cut",
                               run.start, run.start + run.length, shown[k], ctx_.options->seq_len, kind.noun),
                   fmt::format("shorten the sample so that its {} end within the first seq_len tokens, or raise "
                               "seq_len",
                               kind.key));
      }
      runs->push_back(run);
      used += lengths[k];
    }
    return Status::Ok();
  }

  // The frames of a video's "folder": its *.jpg, *.jpeg and *.png files
  // (any case), sorted by name; at least one.
  Status ListFrameFolder(const std::string& folder, const std::string& shown, std::vector<std::string>* frames) const {
    std::error_code ec;
    fs::directory_iterator it(folder, ec);
    if (ec) {
      const bool missing = ec == std::errc::no_such_file_or_directory || ec == std::errc::not_a_directory;
      const std::string what = fmt::format("{}: {} ({}) {}", Where(), shown, folder,
                                           missing ? "is not a folder" : "cannot be listed: " + ec.message());
      const std::string fix = "give the folder of the video's frames (relative to the manifest's folder)";
      return missing ? Status::NotFound(what + "; " + fix) : Status::IOError(what + "; " + fix);
    }
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      if (ec) break;
      if (it->is_regular_file(ec) && IsFrameFile(it->path())) frames->push_back(it->path().string());
    }
    if (ec)
      return Status::IOError(fmt::format("{}: {} ({}): listing failed: {}", Where(), shown, folder, ec.message()));
    if (frames->empty()) {
      return Bad(fmt::format("{} ({}) holds no .jpg, .jpeg or .png frame", shown, folder),
                 "extract the video's frames into the folder (e.g. ffmpeg -i clip.mp4 -r 2 f%05d.jpg), or list "
                 "them under \"frames\"");
    }
    std::sort(frames->begin(), frames->end());
    return Status::Ok();
  }

  // One item of "videos": {"frames": [paths], "fps": x} or {"folder": path,
  // "fps": x}, no other key; its frames resolved by the image path rules and
  // its grid from the first frame's header.
  StatusOr<JsonlVideo> ReadVideo(const json& item, size_t v) {
    const std::string name = fmt::format("videos[{}]", v);
    const std::string form =
        "write each video as {\"frames\": [\"f0.jpg\", ...], \"fps\": 2.0} or "
        "{\"folder\": \"clips/a\", \"fps\": 2.0}";
    if (!item.is_object()) return Bad(fmt::format("{} is {}, not an object", name, Brief(item)), form);
    for (const auto& field : item.items()) {
      if (std::find(kVideoKeys.begin(), kVideoKeys.end(), field.key()) == kVideoKeys.end()) {
        return Bad(fmt::format("{} has the unknown key \"{}\"", name, field.key()), form);
      }
    }
    const bool has_frames = item.contains("frames");
    if (has_frames == item.contains("folder")) {
      return Bad(fmt::format("{} has {} of \"frames\" and \"folder\"", name, has_frames ? "both" : "neither"), form);
    }
    JsonlVideo video;
    if (!item.contains("fps") || !item.at("fps").is_number() || !std::isfinite(item.at("fps").get<double>()) ||
        !(item.at("fps").get<double>() > 0)) {
      return Bad(fmt::format("{}.fps is {}, not a number > 0", name,
                             item.contains("fps") ? Brief(item.at("fps")) : std::string("missing")),
                 "give the frame rate the frames were sampled at (frames per second), e.g. \"fps\": 2.0");
    }
    video.fps = item.at("fps").get<double>();
    const std::string key = name + (has_frames ? ".frames" : ".folder");
    MediaKind kind = VideoKind(*ctx_.options);
    kind.key = key.c_str();
    kind.noun = "frame";
    std::string first_shown;
    if (has_frames) {
      const json& frames = item.at("frames");
      if (!frames.is_array() || frames.empty()) {
        return Bad(fmt::format("{} is {}, not a non-empty array of paths", key, Brief(frames)), form);
      }
      for (size_t f = 0; f < frames.size(); ++f) {
        if (!frames[f].is_string()) {
          return Bad(fmt::format("{}[{}] is {}, not a path string", key, f, Brief(frames[f])), form);
        }
        std::string resolved;
        MAESTRO_RETURN_IF_ERROR(
            ResolvePath(kind, f, frames[f].get_ref<const std::string&>(), PathIs::kFile, &resolved));
        video.frame_paths.push_back(std::move(resolved));
      }
      first_shown = fmt::format("{}[0] \"{}\"", key, frames[0].get<std::string>());
    } else {
      const json& folder = item.at("folder");
      if (!folder.is_string()) return Bad(fmt::format("{} is {}, not a path string", key, Brief(folder)), form);
      std::string resolved;
      MAESTRO_RETURN_IF_ERROR(ResolvePath(kind, 0, folder.get_ref<const std::string&>(), PathIs::kFolder, &resolved));
      const std::string shown = fmt::format("{} \"{}\"", key, folder.get<std::string>());
      MAESTRO_RETURN_IF_ERROR(ListFrameFolder(resolved, shown, &video.frame_paths));
      first_shown = fmt::format("{}'s first frame {}", shown, video.frame_paths[0]);
    }
    MAESTRO_ASSIGN_OR_RETURN(video.grid,
                             GridOf(video.frame_paths[0], first_shown, static_cast<int64_t>(video.frame_paths.size())));
    return video;
  }

  // "videos" (native_resolution with video_token_id): each video's run is
  // its grid's tokens long, in video_token_id placeholders; "video_positions"
  // cross-checks the starts.
  Status ReadVideos(const json& doc, ParsedLine* line, std::vector<std::string>* written) {
    ParsedLine& out = *line;
    const JsonlManifestOptions& o = *ctx_.options;
    const MediaKind kind = VideoKind(o);
    const auto items = doc.find("videos");
    if (items == doc.end()) {
      if (o.video_token_id < 0) return Status::Ok();
    } else if (!items->is_array()) {
      return Bad(fmt::format("\"videos\" is {}, not an array", Brief(*items)),
                 "write \"videos\": [{\"frames\": [...], \"fps\": 2.0}, ...] (an empty array for none)");
    } else if (o.video_token_id < 0 && !items->empty()) {
      return Bad(fmt::format("the line lists {} video(s), but the model takes none (no video_token_id)", items->size()),
                 "set [data] native_resolution and video_token_id (the model's video placeholder, Qwen2-VL's "
                 "<|video_pad|>), or drop \"videos\"");
    } else {
      for (size_t v = 0; v < items->size(); ++v) {
        MAESTRO_ASSIGN_OR_RETURN(JsonlVideo video, ReadVideo((*items)[v], v));
        out.videos.push_back(std::move(video));
        written->push_back(fmt::format("videos[{}]", v));
      }
    }
    std::vector<int64_t> lengths;
    for (const JsonlVideo& video : out.videos) lengths.push_back(video.grid.tokens(o.native.merge));
    MAESTRO_RETURN_IF_ERROR(CutNativeRuns(kind, out.tokens, lengths, *written, &out.video_runs));
    return CheckPositions(doc, kind, out.video_runs, *written);
  }

  Status Bad(const std::string& what, const std::string& fix) const {
    return Status::InvalidArgument(fmt::format("{}:{} (sample {}{}): {}; {}", *ctx_.path, line_, sample_,
                                               user_id_.empty() ? std::string() : ", id " + user_id_, what, fix));
  }

  // kFolder: a video's frame folder (checked to be a folder when listed).
  enum class PathIs { kFile, kFolder };

  Status ResolvePath(const MediaKind& kind, size_t k, const std::string& written, PathIs is,
                     std::string* resolved) const {
    const JsonlManifestOptions& o = *ctx_.options;
    std::string shown = json(written).dump(-1, ' ', false, json::error_handler_t::replace);
    if (shown.size() > 120) shown = shown.substr(0, 117) + "...";
    if (written.empty())
      return Bad(fmt::format("{}[{}] is an empty path", kind.key, k), fmt::format("give the {}'s path", kind.noun));
    if (written.find('\0') != std::string::npos) {
      return Bad(fmt::format("{}[{}] {} holds a NUL character", kind.key, k, shown),
                 fmt::format("give the {}'s path", kind.noun));
    }
    const fs::path given(written);
    fs::path full;
    if (given.is_absolute()) {
      if (!o.allow_absolute_paths) {
        return Bad(fmt::format("{}[{}] {} is an absolute path", kind.key, k, shown),
                   fmt::format("write it relative to the manifest's folder {}, or set allow_absolute_paths",
                               ctx_.dir->string()));
      }
      full = given.lexically_normal();
    } else {
      const fs::path normal = given.lexically_normal();
      if (!normal.empty() && *normal.begin() == "..") {
        if (!o.allow_absolute_paths) {
          return Bad(fmt::format("{}[{}] {} leaves the manifest's folder {} (via \"..\")", kind.key, k, shown,
                                 ctx_.dir->string()),
                     fmt::format("keep {} under the manifest's folder, or set allow_absolute_paths", kind.key));
        }
      }
      full = (*ctx_.dir / normal).lexically_normal();
    }
    *resolved = full.string();
    if (!ctx_.check_images_exist || is == PathIs::kFolder) return Status::Ok();
    struct stat st {};
    if (::stat(resolved->c_str(), &st) != 0) {
      const int err = errno;
      const std::string where = fmt::format("{}:{} (sample {}{})", *ctx_.path, line_, sample_,
                                            user_id_.empty() ? std::string() : ", id " + user_id_);
      if (err == ENOENT || err == ENOTDIR) {
        return Status::NotFound(
            fmt::format("{}: {}[{}] {} ({}) does not exist; fix the path (relative to "
                        "{}) or add the file",
                        where, kind.key, k, shown, *resolved, ctx_.dir->string()));
      }
      return Status::IOError(
          fmt::format("{}: {}[{}] {} ({}): {}", where, kind.key, k, shown, *resolved, std::strerror(err)));
    }
    if (!S_ISREG(st.st_mode)) {
      return Bad(fmt::format("{}[{}] {} ({}) is not a regular file", kind.key, k, shown, *resolved),
                 fmt::format("point at the {} file itself", kind.noun));
    }
    return Status::Ok();
  }

  const LineContext& ctx_;
  int64_t line_;
  int64_t sample_;
  std::string user_id_;
};

}  // namespace

StatusOr<ParsedLine> ParseJsonlLine(const LineContext& ctx, int64_t line, int64_t sample, const char* data,
                                    size_t size) {
  LineParser parser(ctx, line, sample);
  return parser.Parse(data, size);
}

void BuildSample(const ParsedLine& p, const JsonlManifestOptions& o, JsonlSample* s) {
  const int64_t n = static_cast<int64_t>(p.tokens.size());
  const int64_t L = o.seq_len;
  const auto is_image = [&](int64_t id) { return o.image_token_id >= 0 && id == o.image_token_id; };
  const auto is_video = [&](int64_t id) { return o.video_token_id >= 0 && id == o.video_token_id; };
  const auto is_audio = [&](int64_t id) { return o.audio_token_id >= 0 && id == o.audio_token_id; };
  const auto is_placeholder = [&](int64_t id) { return is_image(id) || is_video(id) || is_audio(id); };
  s->user_id = p.user_id;
  s->input_ids.assign(static_cast<size_t>(L), o.pad_id);
  s->target_ids.assign(static_cast<size_t>(L), kJsonlIgnoreTarget);
  s->real_tokens = std::min(n, L);
  s->counts = {};
  for (int64_t t = 0; t < s->real_tokens; ++t) {
    const int64_t cur = p.tokens[static_cast<size_t>(t)];
    s->input_ids[static_cast<size_t>(t)] = cur;
    if (is_image(cur) || is_video(cur)) {
      ++s->counts.image;
    } else if (is_audio(cur)) {
      ++s->counts.audio;
    } else {
      ++s->counts.text;
    }
    if (t + 1 >= n) continue;
    const int64_t next = p.tokens[static_cast<size_t>(t + 1)];
    if (is_placeholder(cur) || is_placeholder(next)) continue;
    int64_t target = next;
    if (p.has_labels) {
      target = p.labels[static_cast<size_t>(t + 1)];
    } else if (p.has_loss_mask && p.loss_mask[static_cast<size_t>(t + 1)] == 0) {
      target = kJsonlIgnoreTarget;
    }
    s->target_ids[static_cast<size_t>(t)] = target;
    if (target != kJsonlIgnoreTarget) ++s->counts.loss;
  }
  s->counts.videos = static_cast<int64_t>(p.videos.size());
  s->counts.images = static_cast<int64_t>(p.image_paths.size()) + s->counts.videos;
  s->counts.video_frames = 0;
  for (const JsonlVideo& video : p.videos) s->counts.video_frames += static_cast<int64_t>(video.frame_paths.size());
  s->image_paths = p.image_paths;
  s->image_runs = p.runs;
  s->image_grids = p.image_grids;
  s->videos = p.videos;
  s->video_runs = p.video_runs;
  s->counts.audios = static_cast<int64_t>(p.audio_paths.size());
  s->audio_paths = p.audio_paths;
  s->audio_runs = p.audio_runs;
}

}  // namespace maestro::datasets::internal
