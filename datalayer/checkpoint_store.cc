// SPDX-License-Identifier: Apache-2.0
#include "datalayer/checkpoint_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

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

}  // namespace

std::string CheckpointStore::FileName(int64_t step) {
  return fmt::format("ckpt-{:010d}.mckpt", step);
}

StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(const std::string& dir, int keep_last, Env* env) {
  if (keep_last < 1) return Status::InvalidArgument(fmt::format("keep_last must be >= 1, got {}", keep_last));
  MAESTRO_RETURN_IF_ERROR(env->CreateDirs(dir));
  return std::unique_ptr<CheckpointStore>(new CheckpointStore(dir, keep_last, env));
}

StatusOr<std::string> CheckpointStore::Write(const CheckpointData& data) {
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

StatusOr<CheckpointData> CheckpointStore::Read(const std::string& file_name) {
  const std::string path = dir_ + "/" + file_name;
  MAESTRO_ASSIGN_OR_RETURN(std::string bytes, env_->ReadFile(path));
  auto corrupt = [&](const std::string& why) {
    return Status::Corruption(
        fmt::format("checkpoint {} is {}; it is not loaded (an older committed checkpoint "
                    "can be restored by hand, see docs/datalayer.md)",
                    path, why));
  };
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

Status CheckpointStore::RemoveAllBut(const std::vector<int64_t>& keep) {
  MAESTRO_ASSIGN_OR_RETURN(auto names, env_->ListDir(dir_));
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    if (n.rfind("ckpt-", 0) != 0) continue;
    bool kept = false;
    for (int64_t s : keep) kept = kept || n == FileName(s);
    if (!kept) MAESTRO_RETURN_IF_ERROR(env_->RemoveFile(dir_ + "/" + n));
  }
  return Status::Ok();
}

}  // namespace maestro::datalayer
