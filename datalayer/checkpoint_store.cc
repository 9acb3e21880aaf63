// SPDX-License-Identifier: Apache-2.0
#include "datalayer/checkpoint_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/checks.h"
#include "datalayer/crc32c.h"

namespace maestro::datalayer {
namespace {

// Layout: magic(8) | u64 header_len | header JSON | blobs | trailer
// trailer: u32 crc32c(all bytes before the trailer) | u32 0 | magic_end(8)
constexpr char kMagic[8] = {'M', 'C', 'K', 'P', 'T', '0', '0', '1'};
constexpr char kMagicEnd[8] = {'M', 'C', 'K', 'P', 'T', 'E', 'N', 'D'};
constexpr size_t kTrailerBytes = 16;

void PutU64(std::string& out, uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  out.append(b, 8);
}

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::optional<std::string> Unhex(const std::string& text) {
  if (text.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < text.size(); i += 2) {
    unsigned value = 0;
    if (std::sscanf(text.substr(i, 2).c_str(), "%2x", &value) != 1) return std::nullopt;
    out += static_cast<char>(value);
  }
  return out;
}

// The metadata file of a format-2 checkpoint: the JSON text, a newline, and
// "crc32c <8 hex digits>\n" of the text (a torn or edited file is refused).
std::string EncodeMetadata(const CheckpointData& data) {
  nlohmann::json m;
  m["format_version"] = kShardedCheckpointFormatVersion;
  m["step"] = data.step;
  m["epoch"] = data.epoch;
  m["next_step"] = data.next_step;
  m["counters"] = data.counters;
  nlohmann::json rng = nlohmann::json::object();
  for (const auto& [name, bytes] : data.rng_states) rng[name] = Hex(bytes);
  m["rng_states"] = rng;
  m["slices"] = nlohmann::json::parse(SliceRecordsToJson(data.slices));
  const std::string text = m.dump(1);
  return text + fmt::format("\ncrc32c {:08x}\n", Crc32c(text.data(), text.size()));
}

// A checkpoint file that fails a check: never loaded.
Status Refused(const std::string& path, const std::string& why) {
  return Status::Corruption(
      fmt::format("checkpoint {} is {}; it is not loaded (an older committed checkpoint "
                  "can be restored by hand, see docs/datalayer.md)",
                  path, why));
}

bool IsShardedDirName(const std::string& name, int64_t* step) {
  long long s = -1;
  char extra = 0;
  if (name.size() != ShardedCheckpointDirName(0).size() ||
      std::sscanf(name.c_str(), "ckpt-%10lld%c", &s, &extra) != 1) {
    return false;
  }
  *step = s;
  return true;
}

}  // namespace

std::string CheckpointStore::ShardedDir(int64_t step) const {
  return dir_ + "/" + ShardedCheckpointDirName(step);
}

std::string CheckpointStore::FileName(int64_t step) {
  return fmt::format("ckpt-{:010d}.mckpt", step);
}

StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(const std::string& dir, int keep_last, Env* env) {
  if (keep_last < 1) return Status::InvalidArgument(fmt::format("keep_last must be >= 1, got {}", keep_last));
  MAESTRO_RETURN_IF_ERROR(env->CreateDirs(dir));
  return std::unique_ptr<CheckpointStore>(new CheckpointStore(dir, keep_last, env));
}

StatusOr<std::string> CheckpointStore::Write(const CheckpointData& data) {
  if (data.sharded()) {
    const std::string name = ShardedCheckpointDirName(data.step);
    const std::string dir = dir_ + "/" + name;
    MAESTRO_RETURN_IF_ERROR(CheckSlicesTile(data.slices, dir));
    const std::string path = dir + "/" + kShardedCheckpointMetadata;
    {
      MAESTRO_ASSIGN_OR_RETURN(auto file, env_->NewWritableFile(path + ".tmp"));
      MAESTRO_RETURN_IF_ERROR(file->Append(EncodeMetadata(data)));
      MAESTRO_RETURN_IF_ERROR(file->Sync());
      MAESTRO_RETURN_IF_ERROR(file->Close());
    }
    MAESTRO_RETURN_IF_ERROR(env_->RenameFile(path + ".tmp", path));
    MAESTRO_RETURN_IF_ERROR(env_->SyncDir(dir));
    return name;
  }
  nlohmann::json header;
  header["format_version"] = kCheckpointFormatVersion;
  header["step"] = data.step;
  header["epoch"] = data.epoch;
  header["next_step"] = data.next_step;
  nlohmann::json entries = nlohmann::json::array();
  std::vector<const std::string*> blobs;
  uint64_t offset = 0;
  auto add = [&](const std::string& kind, const std::string& name, const std::string& bytes) {
    entries.push_back({{"kind", kind},
                       {"name", name},
                       {"offset", offset},
                       {"bytes", bytes.size()},
                       {"crc32c", Crc32c(bytes.data(), bytes.size())}});
    offset += bytes.size();
    blobs.push_back(&bytes);
  };
  for (const auto& [name, state] : data.sections) {
    add("model", name, state.model);
    add("optimizer", name, state.optimizer);
  }
  for (const auto& [name, bytes] : data.rng_states) add("rng", name, bytes);
  header["entries"] = entries;
  const std::string header_text = header.dump();

  std::string head(kMagic, 8);
  PutU64(head, header_text.size());
  head += header_text;
  uint32_t crc = Crc32c(head.data(), head.size());
  for (const std::string* b : blobs) crc = Crc32c(b->data(), b->size(), crc);
  std::string trailer;
  trailer.append(reinterpret_cast<const char*>(&crc), 4);
  trailer.append(4, '\0');
  trailer.append(kMagicEnd, 8);

  const std::string name = FileName(data.step);
  const std::string final_path = dir_ + "/" + name;
  const std::string tmp_path = final_path + ".tmp";
  {
    MAESTRO_ASSIGN_OR_RETURN(auto file, env_->NewWritableFile(tmp_path));
    MAESTRO_RETURN_IF_ERROR(file->Append(head));
    for (const std::string* b : blobs) {
      if (!b->empty()) MAESTRO_RETURN_IF_ERROR(file->Append(*b));
    }
    MAESTRO_RETURN_IF_ERROR(file->Append(trailer));
    MAESTRO_RETURN_IF_ERROR(file->Sync());
    MAESTRO_RETURN_IF_ERROR(file->Close());
  }
  MAESTRO_RETURN_IF_ERROR(env_->RenameFile(tmp_path, final_path));
  MAESTRO_RETURN_IF_ERROR(env_->SyncDir(dir_));
  return name;
}

StatusOr<CheckpointData> CheckpointStore::ReadSharded(const std::string& name) {
  const std::string dir = dir_ + "/" + name;
  const std::string path = dir + "/" + kShardedCheckpointMetadata;
  MAESTRO_ASSIGN_OR_RETURN(std::string bytes, env_->ReadFile(path));
  auto corrupt = [&](const std::string& why) { return Refused(path, why); };
  const size_t tail = bytes.rfind("\ncrc32c ");
  if (tail == std::string::npos) return corrupt("torn (no checksum line)");
  unsigned want = 0;
  if (std::sscanf(bytes.c_str() + tail + 1, "crc32c %8x", &want) != 1) return corrupt("torn (checksum line)");
  if (Crc32c(bytes.data(), tail) != want) return corrupt("corrupt (checksum mismatch)");
  const nlohmann::json m = nlohmann::json::parse(bytes.data(), bytes.data() + tail, nullptr, false);
  if (m.is_discarded() || !m.is_object()) return corrupt("corrupt (JSON)");
  const int64_t version = m.value("format_version", int64_t{-1});
  if (version != kShardedCheckpointFormatVersion) {
    return Status::FailedPrecondition(fmt::format("checkpoint {} has format version {}, this Maestro reads {} and {}",
                                                  path, version, kCheckpointFormatVersion,
                                                  kShardedCheckpointFormatVersion));
  }
  CheckpointData data;
  data.dir = dir;
  try {
    data.step = m.at("step").get<int64_t>();
    data.epoch = m.at("epoch").get<int64_t>();
    data.next_step = m.at("next_step").get<int64_t>();
    data.counters = m.at("counters").get<std::map<std::string, int64_t>>();
    for (const auto& [key, value] : m.at("rng_states").items()) {
      auto raw = Unhex(value.get<std::string>());
      if (!raw) return corrupt("corrupt (rng state " + key + ")");
      data.rng_states[key] = std::move(*raw);
    }
    MAESTRO_ASSIGN_OR_RETURN(data.slices, SliceRecordsFromJson(m.at("slices").dump()));
  } catch (const nlohmann::json::exception& e) {
    return corrupt(std::string("corrupt (") + e.what() + ")");
  }
  MAESTRO_RETURN_IF_ERROR(CheckSlicesTile(data.slices, path));
  return data;
}

StatusOr<CheckpointData> CheckpointStore::Read(const std::string& file_name) {
  int64_t step = -1;
  if (IsShardedDirName(file_name, &step)) return ReadSharded(file_name);
  const std::string path = dir_ + "/" + file_name;
  MAESTRO_ASSIGN_OR_RETURN(std::string bytes, env_->ReadFile(path));
  auto corrupt = [&](const std::string& why) { return Refused(path, why); };
  if (bytes.size() < 16 + kTrailerBytes || std::memcmp(bytes.data(), kMagic, 8) != 0) {
    return corrupt("not a Maestro checkpoint (bad magic or too short)");
  }
  const size_t body = bytes.size() - kTrailerBytes;
  if (std::memcmp(bytes.data() + body + 8, kMagicEnd, 8) != 0) return corrupt("torn (no trailer)");
  uint32_t want_crc = 0;
  std::memcpy(&want_crc, bytes.data() + body, 4);
  if (Crc32c(bytes.data(), body) != want_crc) return corrupt("corrupt (checksum mismatch)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data() + 8, 8);
  if (16 + header_len > body) return corrupt("corrupt (header length)");
  const nlohmann::json header =
      nlohmann::json::parse(bytes.data() + 16, bytes.data() + 16 + header_len, nullptr, false);
  if (header.is_discarded() || !header.is_object()) return corrupt("corrupt (header JSON)");
  const auto version_it = header.find("format_version");
  const int64_t version =
      version_it != header.end() && version_it->is_number_integer() ? version_it->get<int64_t>() : -1;
  if (version != kCheckpointFormatVersion) {
    return Status::FailedPrecondition(fmt::format("checkpoint {} has format version {}, this Maestro reads {}", path,
                                                  version, kCheckpointFormatVersion));
  }
  CheckpointData data;
  try {
    data.step = header.at("step").get<int64_t>();
    data.epoch = header.at("epoch").get<int64_t>();
    data.next_step = header.at("next_step").get<int64_t>();
    const size_t blob_base = 16 + header_len;
    for (const auto& e : header.at("entries")) {
      const auto off = e.at("offset").get<uint64_t>();
      const auto n = e.at("bytes").get<uint64_t>();
      if (blob_base + off + n > body) return corrupt("corrupt (entry out of range)");
      std::string blob(bytes.data() + blob_base + off, n);
      const std::string kind = e.at("kind").get<std::string>();
      const std::string name = e.at("name").get<std::string>();
      if (kind == "model") {
        data.sections[name].model = std::move(blob);
      } else if (kind == "optimizer") {
        data.sections[name].optimizer = std::move(blob);
      } else if (kind == "rng") {
        data.rng_states[name] = std::move(blob);
      } else {
        return corrupt("corrupt (unknown entry kind " + kind + ")");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return corrupt(std::string("corrupt (header: ") + e.what() + ")");
  }
  return data;
}

StatusOr<std::vector<int64_t>> CheckpointStore::ListSteps() {
  MAESTRO_ASSIGN_OR_RETURN(auto names, env_->ListDir(dir_));
  std::vector<int64_t> steps;
  for (const std::string& n : names) {
    int64_t dir_step = -1;
    if (IsShardedDirName(n, &dir_step)) {
      if (env_->FileExists(dir_ + "/" + n + "/" + kShardedCheckpointMetadata)) steps.push_back(dir_step);
      continue;
    }
    long long step = -1;
    char tail[8] = {0};
    if (n.size() == FileName(0).size() && std::sscanf(n.c_str(), "ckpt-%10lld.%5s", &step, tail) == 2 &&
        std::strcmp(tail, "mckpt") == 0) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Status CheckpointStore::RemoveAllBut(const std::vector<int64_t>& keep, int64_t spare_after) {
  MAESTRO_ASSIGN_OR_RETURN(auto names, env_->ListDir(dir_));
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    if (n.rfind("ckpt-", 0) != 0) continue;
    long long step = -1;  // every name here starts "ckpt-<step>" (a directory, a .mckpt file, a .tmp)
    if (std::sscanf(n.c_str(), "ckpt-%10lld", &step) == 1 && step > spare_after) continue;
    bool kept = false;
    for (int64_t s : keep) kept = kept || n == FileName(s) || n == ShardedCheckpointDirName(s);
    if (kept) continue;
    std::error_code ec;
    if (std::filesystem::is_directory(dir_ + "/" + n, ec)) {
      // The metadata first: a directory without it is no checkpoint, whatever is left of it.
      const std::string sub = dir_ + "/" + n;
      MAESTRO_RETURN_IF_ERROR(env_->RemoveFile(sub + "/" + kShardedCheckpointMetadata));
      MAESTRO_ASSIGN_OR_RETURN(auto files, env_->ListDir(sub));
      for (const std::string& f : files) MAESTRO_RETURN_IF_ERROR(env_->RemoveFile(sub + "/" + f));
      MAESTRO_RETURN_IF_ERROR(env_->RemoveDir(sub));
    } else {
      MAESTRO_RETURN_IF_ERROR(env_->RemoveFile(dir_ + "/" + n));
    }
  }
  return Status::Ok();
}

}  // namespace maestro::datalayer
