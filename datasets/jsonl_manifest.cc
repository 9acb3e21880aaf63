// SPDX-License-Identifier: Apache-2.0
// JSONL manifests of pretokenized multimodal samples. The rules are in
// jsonl_manifest.h (JsonlManifest::Open) and docs/data.md ("## JSONL
// manifests"); one line's checks and its sample are in jsonl_line.cc.
#include "datasets/jsonl_manifest.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string_view>

#include "base/checks.h"
#include "base/files.h"
#include "base/log.h"
#include "datasets/jsonl_line.h"

namespace maestro::datasets {

namespace {

using internal::BuildSample;
using internal::LineContext;
using internal::ParsedLine;
using internal::ParseJsonlLine;
using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int64_t kMaxSeqLen = std::numeric_limits<int32_t>::max();
constexpr size_t kReadChunk = size_t{1} << 20;

// FNV-1a, 64 bit: detects an in-place edit of a line between Open and Sample.
uint64_t HashBytes(const char* data, size_t size) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ull;
  }
  return h;
}

bool IsBlank(const char* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    const char c = data[i];
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  }
  return true;
}

// Per accepted sample: where its line is and what Open counted (56 bytes).
struct Entry {
  uint64_t offset = 0;
  uint64_t hash = 0;
  int64_t line = 0;
  uint32_t length = 0;
  uint32_t text = 0;
  uint32_t images = 0;  // visual items: images and videos
  uint32_t loss = 0;
  uint32_t audios = 0;
  uint32_t image_tokens = 0;  // visual placeholders (<= seq_len < 2^31)
  uint32_t videos = 0;
  uint32_t video_frames = 0;
};
static_assert(sizeof(Entry) == 56, "keep the per-sample table compact");

Status ValidateOptions(const std::string& path, const JsonlManifestOptions& o) {
  const auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(fmt::format("{}: manifest options: {}", path, what));
  };
  if (o.seq_len <= 0 || o.seq_len > kMaxSeqLen) {
    return bad(fmt::format("seq_len {} must be in [1, 2^31 - 1]; set it to the model's sequence length", o.seq_len));
  }
  if (o.vocab_size <= 0) return bad(fmt::format("vocab_size {} must be positive; use the model's", o.vocab_size));
  if (o.pad_id < 0 || o.pad_id >= o.vocab_size) {
    return bad(fmt::format("pad_id {} is outside the vocabulary [0, {}); use the tokenizer's pad token", o.pad_id,
                           o.vocab_size));
  }
  if (o.image_token_id < -1 || o.image_token_id >= o.vocab_size) {
    return bad(fmt::format("image_token_id {} is outside the vocabulary [0, {}) (and not -1 = no images)",
                           o.image_token_id, o.vocab_size));
  }
  if (o.native_resolution) {
    Status native = ValidateNativeVisionOptions(o.native);
    if (!native.ok()) return bad(native.message());
    if (o.tokens_per_image != 0) {
      return bad(
          fmt::format("tokens_per_image = {} is unused with native_resolution (each image's placeholder run "
                      "is as long as its own grid); leave it 0",
                      o.tokens_per_image));
    }
  } else if (o.video_token_id >= 0) {
    return bad(
        fmt::format("video_token_id = {} needs native_resolution (videos are only read at native "
                    "resolution, the Qwen2-VL family's processor); set native_resolution or video_token_id = -1",
                    o.video_token_id));
  }
  if (o.video_token_id < -1 || o.video_token_id >= o.vocab_size) {
    return bad(fmt::format("video_token_id {} is outside the vocabulary [0, {}) (and not -1 = no videos)",
                           o.video_token_id, o.vocab_size));
  }
  if (o.video_token_id >= 0 && (o.video_token_id == o.image_token_id || o.video_token_id == o.audio_token_id)) {
    return bad(fmt::format("video_token_id {} is also the {} placeholder id; each kind needs its own placeholder id",
                           o.video_token_id, o.video_token_id == o.image_token_id ? "image" : "audio"));
  }
  if (!o.native_resolution && o.image_token_id >= 0 && (o.tokens_per_image < 1 || o.tokens_per_image > o.seq_len)) {
    return bad(fmt::format("tokens_per_image {} must be in [1, seq_len = {}] when image_token_id is set",
                           o.tokens_per_image, o.seq_len));
  }
  if (o.audio_token_id < -1 || o.audio_token_id >= o.vocab_size) {
    return bad(fmt::format("audio_token_id {} is outside the vocabulary [0, {}) (and not -1 = no audio)",
                           o.audio_token_id, o.vocab_size));
  }
  if (o.audio_token_id >= 0 && (o.tokens_per_audio < 1 || o.tokens_per_audio > o.seq_len)) {
    return bad(fmt::format("tokens_per_audio {} must be in [1, seq_len = {}] when audio_token_id is set",
                           o.tokens_per_audio, o.seq_len));
  }
  if (o.audio_token_id >= 0 && o.audio_token_id == o.image_token_id) {
    return bad(fmt::format("audio_token_id and image_token_id are both {}; each kind needs its own placeholder id",
                           o.audio_token_id));
  }
  return Status::Ok();
}

}  // namespace

struct JsonlManifest::Impl {
  std::string path;
  std::string absolute_path;
  fs::path dir;
  JsonlManifestOptions options;
  int fd = -1;
  int64_t lines = 0;
  std::vector<Entry> entries;
  std::vector<JsonlSkippedLine> skipped;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  LineContext Context(bool check_images) const {
    LineContext ctx;
    ctx.path = &path;
    ctx.dir = &dir;
    ctx.options = &options;
    ctx.check_images_exist = check_images;
    return ctx;
  }

  const Entry& At(int64_t i) const {
    if (i < 0 || i >= static_cast<int64_t>(entries.size())) {
      throw std::out_of_range(fmt::format("{}: sample {} is outside [0, {})", path, i, entries.size()));
    }
    return entries[static_cast<size_t>(i)];
  }
};

StatusOr<JsonlManifest> JsonlManifest::Open(const std::string& path, const JsonlManifestOptions& options) {
  Status valid = ValidateOptions(path, options);
  if (!valid.ok()) return valid;
  auto impl = std::make_shared<Impl>();
  impl->path = path;
  impl->options = options;
  std::error_code ec;
  const fs::path absolute = fs::absolute(fs::path(path), ec).lexically_normal();
  if (ec) return Status::IOError(fmt::format("{}: cannot make the path absolute: {}", path, ec.message()));
  impl->absolute_path = absolute.string();
  impl->dir = absolute.parent_path();

  impl->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (impl->fd < 0) {
    const int err = errno;
    if (err == ENOENT) return Status::NotFound(fmt::format("{}: no such manifest file", path));
    return Status::IOError(fmt::format("{}: cannot open the manifest: {}", path, std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(impl->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return Status::IOError(fmt::format("{}: not a regular file; give the path of the .jsonl manifest", path));
  }

  const LineContext ctx = impl->Context(options.check_images_exist);
  const bool skip = options.on_bad_sample == BadSamplePolicy::kSkip;
  Status failed;
  JsonlSample built;  // reused: its buffers keep their capacity from line to line
  // Validates one line; false stops the read (kError and a bad line).
  const auto take_line = [&](const char* data, size_t size, uint64_t offset, bool overlong) -> bool {
    const int64_t line = ++impl->lines;
    if (!overlong && IsBlank(data, size)) return true;
    const int64_t sample = static_cast<int64_t>(impl->entries.size());
    StatusOr<ParsedLine> parsed =
        overlong ? ParseJsonlLine(ctx, line, sample, nullptr, static_cast<size_t>(kJsonlMaxLineBytes) + 1)
                 : ParseJsonlLine(ctx, line, sample, data, size);
    if (!parsed.ok()) {
      if (!skip) {
        failed = parsed.status();
        return false;
      }
      Log(LogLevel::kWarn, "skipping a bad manifest line: {}", parsed.status().message());
      impl->skipped.push_back({line, parsed.status()});
      return true;
    }
    BuildSample(*parsed, options, &built);
    Entry e;
    e.offset = offset;
    e.hash = HashBytes(data, size);
    e.line = line;
    e.length = static_cast<uint32_t>(size);
    e.text = static_cast<uint32_t>(built.counts.text);
    e.images = static_cast<uint32_t>(built.counts.images);
    e.loss = static_cast<uint32_t>(built.counts.loss);
    e.audios = static_cast<uint32_t>(built.counts.audios);
    e.image_tokens = static_cast<uint32_t>(built.counts.image);
    e.videos = static_cast<uint32_t>(built.counts.videos);
    e.video_frames =
        static_cast<uint32_t>(std::min<int64_t>(built.counts.video_frames, std::numeric_limits<uint32_t>::max()));
    impl->entries.push_back(e);
    return true;
  };

  std::vector<char> chunk(kReadChunk);
  std::string carry;         // the start of a line that crosses chunks
  bool overlong = false;     // the current line is past kJsonlMaxLineBytes (its bytes are dropped)
  uint64_t file_offset = 0;  // of chunk[0]
  uint64_t line_start = 0;   // of the current line
  bool stopped = false;
  while (!stopped) {
    const ssize_t got = ::read(impl->fd, chunk.data(), chunk.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(fmt::format("{}: read failed at byte {}: {}", path, file_offset, std::strerror(errno)));
    }
    if (got == 0) break;
    const char* p = chunk.data();
    const char* end = p + got;
    while (p < end && !stopped) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      const char* stop = nl != nullptr ? nl : end;
      const size_t piece = static_cast<size_t>(stop - p);
      if (!overlong && carry.size() + piece > static_cast<size_t>(kJsonlMaxLineBytes)) {
        overlong = true;
        std::string().swap(carry);
      }
      if (nl == nullptr) {
        if (!overlong) carry.append(p, piece);
        break;
      }
      if (overlong) {
        stopped = !take_line(nullptr, 0, line_start, true);
      } else if (carry.empty()) {
        stopped = !take_line(p, piece, line_start, false);
      } else {
        carry.append(p, piece);
        stopped = !take_line(carry.data(), carry.size(), line_start, false);
        carry.clear();
      }
      overlong = false;
      p = nl + 1;
      line_start = file_offset + static_cast<uint64_t>(p - chunk.data());
    }
    file_offset += static_cast<uint64_t>(got);
  }
  if (!stopped && (overlong || !carry.empty())) {  // a last line without a newline
    stopped = !take_line(carry.data(), carry.size(), line_start, overlong);
  }
  if (!failed.ok()) return failed;
  impl->entries.shrink_to_fit();
  return JsonlManifest(std::move(impl));
}

const std::string& JsonlManifest::path() const {
  return impl_->path;
}
const std::string& JsonlManifest::absolute_path() const {
  return impl_->absolute_path;
}
const JsonlManifestOptions& JsonlManifest::options() const {
  return impl_->options;
}
int64_t JsonlManifest::size() const {
  return static_cast<int64_t>(impl_->entries.size());
}
int64_t JsonlManifest::lines() const {
  return impl_->lines;
}
const std::vector<JsonlSkippedLine>& JsonlManifest::skipped() const {
  return impl_->skipped;
}

int64_t JsonlManifest::LineOf(int64_t i) const {
  return impl_->At(i).line;
}

JsonlTokenCounts JsonlManifest::Counts(int64_t i) const {
  const Entry& e = impl_->At(i);
  JsonlTokenCounts c;
  c.text = e.text;
  c.images = e.images;
  c.image = e.image_tokens;
  c.videos = e.videos;
  c.video_frames = e.video_frames;
  c.audios = e.audios;
  c.audio = static_cast<int64_t>(e.audios) * (impl_->options.audio_token_id >= 0 ? impl_->options.tokens_per_audio : 0);
  c.loss = e.loss;
  return c;
}

int64_t JsonlManifest::SampleOfLine(int64_t line) const {
  const auto& entries = impl_->entries;
  const auto it =
      std::lower_bound(entries.begin(), entries.end(), line, [](const Entry& e, int64_t l) { return e.line < l; });
  if (it == entries.end() || it->line != line) return -1;
  return static_cast<int64_t>(it - entries.begin());
}

StatusOr<JsonlSample> JsonlManifest::Sample(int64_t i) const {
  const Impl& impl = *impl_;
  if (i < 0 || i >= size()) {
    return Status::InvalidArgument(
        fmt::format("{}: sample {} is outside the manifest's {} samples [0, {})", impl.path, i, size(), size()));
  }
  const Entry& e = impl.entries[static_cast<size_t>(i)];
  std::string bytes(e.length, '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::pread(impl.fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(e.offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(fmt::format("{}:{}: read failed: {}", impl.path, e.line, std::strerror(errno)));
    }
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  if (done != bytes.size() || HashBytes(bytes.data(), bytes.size()) != e.hash) {
    return Status::Corruption(
        fmt::format("{}:{} (sample {}): the line changed since the manifest was opened; "
                    "reopen the manifest (replace manifests by writing a new file and "
                    "renaming it, not by editing in place)",
                    impl.path, e.line, i));
  }
  const LineContext ctx = impl.Context(false);
  StatusOr<ParsedLine> parsed = ParseJsonlLine(ctx, e.line, i, bytes.data(), bytes.size());
  if (!parsed.ok()) return parsed.status();  // cannot happen: the same bytes passed at Open
  JsonlSample s;
  s.id = i;
  s.line = e.line;
  BuildSample(*parsed, impl.options, &s);
  return s;
}

std::vector<JsonlTokenCounts> JsonlManifest::TokenCounts() const {
  std::vector<JsonlTokenCounts> out;
  out.reserve(impl_->entries.size());
  for (int64_t i = 0; i < size(); ++i) out.push_back(Counts(i));
  return out;
}

std::string JsonlManifest::Location(int64_t i) const {
  return fmt::format("{}:{}", impl_->absolute_path, impl_->At(i).line);
}

StatusOr<int64_t> JsonlManifest::WriteIndexManifest(const std::string& path) const {
  // The manifest path is JSON-escaped once; each line appends ":<line>".
  std::string prefix = json(impl_->absolute_path).dump(-1, ' ', false, json::error_handler_t::replace);
  prefix.pop_back();  // the closing quote
  fmt::memory_buffer out;
  for (int64_t i = 0; i < size(); ++i) {
    const JsonlTokenCounts c = Counts(i);
    fmt::format_to(std::back_inserter(out), "{{\"id\": {}, \"location\": {}:{}\", \"tokens\": {{\"text\": {}", i,
                   prefix, LineOf(i), c.text);
    if (c.images > 0) fmt::format_to(std::back_inserter(out), ", \"image\": {}", c.image);
    if (c.audios > 0) fmt::format_to(std::back_inserter(out), ", \"audio\": {}", c.audio);
    fmt::format_to(std::back_inserter(out), "}}}}\n");
  }
  Status written = WriteFileAtomically(path, std::string_view(out.data(), out.size()));
  if (!written.ok()) return written.WithContext(fmt::format("index manifest for {}", impl_->path));
  return size();
}

StatusOr<std::pair<std::string, int64_t>> ParseJsonlLocation(const std::string& location) {
  const size_t colon = location.rfind(':');
  const auto bad = [&] {
    return Status::InvalidArgument(
        fmt::format("location \"{}\" is not \"<manifest>:<line>\" with a positive line number", location));
  };
  if (colon == std::string::npos || colon == 0 || colon + 1 == location.size()) return bad();
  int64_t line = 0;
  for (size_t k = colon + 1; k < location.size(); ++k) {
    const char c = location[k];
    if (c < '0' || c > '9' || line > (std::numeric_limits<int64_t>::max() - 9) / 10) return bad();
    line = line * 10 + (c - '0');
  }
  if (line <= 0) return bad();
  return std::make_pair(location.substr(0, colon), line);
}

}  // namespace maestro::datasets
