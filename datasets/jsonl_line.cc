// SPDX-License-Identifier: Apache-2.0
#include "datasets/jsonl_line.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "base/checks.h"

namespace maestro::datasets::internal {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr std::array<std::string_view, 7> kKnownKeys = {"input_ids",       "labels", "loss_mask", "images",
                                                        "image_positions", "id",     "meta"};

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

class LineParser {
 public:
  LineParser(const LineContext& ctx, int64_t line, int64_t sample) : ctx_(ctx), line_(line), sample_(sample) {}

  // One line of the manifest, checked in this order: a JSON object within
  // the limits, its "id", no unknown key, "input_ids", "labels" or
  // "loss_mask", "images", and the image placeholders (with
  // "image_positions"). The first problem is the error.
  StatusOr<ParsedLine> Parse(const char* data, size_t size) {
    ParsedLine out;
    json doc;
    MAESTRO_RETURN_IF_ERROR(ParseObject(data, size, &doc));
    MAESTRO_RETURN_IF_ERROR(ReadUserId(doc, &out));
    MAESTRO_RETURN_IF_ERROR(CheckKnownKeys(doc));
    MAESTRO_RETURN_IF_ERROR(ReadInputIds(doc, &out));
    MAESTRO_RETURN_IF_ERROR(ReadLossTargets(doc, &out));
    std::vector<std::string> written;  // the image paths as in the line, for messages
    MAESTRO_RETURN_IF_ERROR(ReadImages(doc, &out, &written));
    MAESTRO_RETURN_IF_ERROR(ReadPlaceholderRuns(doc, written, &out));
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
                 "the known keys are input_ids, labels, loss_mask, images, image_positions, id, meta; put "
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

  // "images": path strings, resolved against the manifest's folder (and
  // checked to exist when asked); none unless the model takes images.
  Status ReadImages(const json& doc, ParsedLine* line, std::vector<std::string>* written_paths) const {
    ParsedLine& out = *line;
    const JsonlManifestOptions& o = *ctx_.options;
    std::vector<std::string>& written = *written_paths;
    if (const auto images = doc.find("images"); images != doc.end()) {
      if (!images->is_array()) {
        return Bad(fmt::format("\"images\" is {}, not an array of paths", Brief(*images)),
                   "write \"images\": [\"relative/path.jpg\", ...] (an empty array for no image)");
      }
      for (size_t k = 0; k < images->size(); ++k) {
        const json& v = (*images)[k];
        if (!v.is_string()) {
          return Bad(fmt::format("images[{}] is {}, not a path string", k, Brief(v)),
                     "write each image as a path string relative to the manifest's folder");
        }
        std::string resolved;
        Status s = ResolveImage(k, v.get_ref<const std::string&>(), &resolved);
        if (!s.ok()) return s;
        written.push_back(v.get<std::string>());
        out.image_paths.push_back(std::move(resolved));
      }
    }
    const int64_t num_images = static_cast<int64_t>(out.image_paths.size());
    if (o.image_token_id < 0 && num_images > 0) {
      return Bad(
          fmt::format("the line lists {} image(s), but the model takes no images (no image token id)", num_images),
          "use a manifest without images for this model, or set image_token_id and tokens_per_image");
    }
    return Status::Ok();
  }

  // The image placeholder tokens: tokens_per_image per listed image, in runs
  // that end within the first seq_len inputs, one run per image; and
  // "image_positions" (optional), the start of each image's run.
  Status ReadPlaceholderRuns(const json& doc, const std::vector<std::string>& written, ParsedLine* line) const {
    ParsedLine& out = *line;
    const JsonlManifestOptions& o = *ctx_.options;
    const int64_t n = static_cast<int64_t>(out.tokens.size());
    const int64_t num_images = static_cast<int64_t>(out.image_paths.size());
    int64_t placeholders = 0;
    std::vector<ImageTokenRun> maximal;
    if (o.image_token_id >= 0) {
      for (int64_t t = 0; t < n;) {
        if (out.tokens[static_cast<size_t>(t)] != o.image_token_id) {
          ++t;
          continue;
        }
        int64_t e = t;
        while (e < n && out.tokens[static_cast<size_t>(e)] == o.image_token_id) ++e;
        maximal.push_back({t, e - t});
        placeholders += e - t;
        t = e;
      }
    }
    if (placeholders != num_images * o.tokens_per_image) {
      return Bad(
          fmt::format("input_ids holds {} image placeholder tokens (id {}), but \"images\" lists {} "
                      "image(s) x tokens_per_image {} = {}",
                      placeholders, o.image_token_id, num_images, o.tokens_per_image, num_images * o.tokens_per_image),
          "each image needs exactly tokens_per_image placeholders in a row (what the processor emits "
          "after expanding); list one path per image, and check tokens_per_image and image_token_id "
          "against the model");
    }
    for (const ImageTokenRun& run : maximal) {
      if (run.length % o.tokens_per_image != 0) {
        return Bad(fmt::format("the placeholder run at input_ids[{}] has {} tokens, not a multiple of "
                               "tokens_per_image {}",
                               run.start, run.length, o.tokens_per_image),
                   "each image needs exactly tokens_per_image placeholders in a row");
      }
      if (run.start + run.length > o.seq_len) {
        return Bad(fmt::format("the placeholder run [{}, {}) reaches past the seq_len = {} inputs: the image "
                               "would be cut",
                               run.start, run.start + run.length, o.seq_len),
                   "shorten the sample so that its images end within the first seq_len tokens, or raise "
                   "seq_len");
      }
      for (int64_t s = run.start; s < run.start + run.length; s += o.tokens_per_image) {
        out.runs.push_back({s, o.tokens_per_image});
      }
    }
    if (const auto pos = doc.find("image_positions"); pos != doc.end()) {
      if (!pos->is_array() || static_cast<int64_t>(pos->size()) != num_images) {
        return Bad(fmt::format("\"image_positions\" is {}, but \"images\" lists {} image(s)", Brief(*pos), num_images),
                   "give one start position per image, or drop \"image_positions\"");
      }
      for (size_t k = 0; k < pos->size(); ++k) {
        int64_t p = 0;
        if (!GetInt((*pos)[k], &p) || p < 0) {
          return Bad(fmt::format("image_positions[{}] is {}, not a non-negative integer", k, Brief((*pos)[k])),
                     "give the index in input_ids where each image's placeholders start");
        }
        if (p != out.runs[k].start) {
          return Bad(fmt::format("image_positions[{}] = {}, but image {} ({})'s placeholders start at "
                                 "input_ids[{}]",
                                 k, p, k, written[k], out.runs[k].start),
                     "image k fills the k-th run of placeholders: fix image_positions or the order of images");
        }
      }
    }
    return Status::Ok();
  }

  Status Bad(const std::string& what, const std::string& fix) const {
    return Status::InvalidArgument(fmt::format("{}:{} (sample {}{}): {}; {}", *ctx_.path, line_, sample_,
                                               user_id_.empty() ? std::string() : ", id " + user_id_, what, fix));
  }

  Status ResolveImage(size_t k, const std::string& written, std::string* resolved) const {
    const JsonlManifestOptions& o = *ctx_.options;
    std::string shown = json(written).dump(-1, ' ', false, json::error_handler_t::replace);
    if (shown.size() > 120) shown = shown.substr(0, 117) + "...";
    if (written.empty()) return Bad(fmt::format("images[{}] is an empty path", k), "give the image's path");
    if (written.find('\0') != std::string::npos) {
      return Bad(fmt::format("images[{}] {} holds a NUL character", k, shown), "give the image's path");
    }
    const fs::path given(written);
    fs::path full;
    if (given.is_absolute()) {
      if (!o.allow_absolute_paths) {
        return Bad(fmt::format("images[{}] {} is an absolute path", k, shown),
                   fmt::format("write it relative to the manifest's folder {}, or set allow_absolute_paths",
                               ctx_.dir->string()));
      }
      full = given.lexically_normal();
    } else {
      const fs::path normal = given.lexically_normal();
      if (!normal.empty() && *normal.begin() == "..") {
        if (!o.allow_absolute_paths) {
          return Bad(
              fmt::format("images[{}] {} leaves the manifest's folder {} (via \"..\")", k, shown, ctx_.dir->string()),
              "keep images under the manifest's folder, or set allow_absolute_paths");
        }
      }
      full = (*ctx_.dir / normal).lexically_normal();
    }
    *resolved = full.string();
    if (!ctx_.check_images_exist) return Status::Ok();
    struct stat st {};
    if (::stat(resolved->c_str(), &st) != 0) {
      const int err = errno;
      const std::string where = fmt::format("{}:{} (sample {}{})", *ctx_.path, line_, sample_,
                                            user_id_.empty() ? std::string() : ", id " + user_id_);
      if (err == ENOENT || err == ENOTDIR) {
        return Status::NotFound(
            fmt::format("{}: images[{}] {} ({}) does not exist; fix the path (relative to "
                        "{}) or add the file",
                        where, k, shown, *resolved, ctx_.dir->string()));
      }
      return Status::IOError(fmt::format("{}: images[{}] {} ({}): {}", where, k, shown, *resolved, std::strerror(err)));
    }
    if (!S_ISREG(st.st_mode)) {
      return Bad(fmt::format("images[{}] {} ({}) is not a regular file", k, shown, *resolved),
                 "point at the image file itself");
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
  const auto is_placeholder = [&](int64_t id) { return o.image_token_id >= 0 && id == o.image_token_id; };
  s->user_id = p.user_id;
  s->input_ids.assign(static_cast<size_t>(L), o.pad_id);
  s->target_ids.assign(static_cast<size_t>(L), kJsonlIgnoreTarget);
  s->real_tokens = std::min(n, L);
  s->counts = {};
  for (int64_t t = 0; t < s->real_tokens; ++t) {
    const int64_t cur = p.tokens[static_cast<size_t>(t)];
    s->input_ids[static_cast<size_t>(t)] = cur;
    if (is_placeholder(cur)) {
      ++s->counts.image;
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
  s->counts.images = static_cast<int64_t>(p.image_paths.size());
  s->image_paths = p.image_paths;
  s->image_runs = p.runs;
}

}  // namespace maestro::datasets::internal
