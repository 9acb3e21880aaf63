// SPDX-License-Identifier: Apache-2.0
#include "hf/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <system_error>

#include "base/checks.h"
#include "base/files.h"

namespace maestro::hf {

namespace fs = std::filesystem;

namespace {

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(fmt::format("cannot read '{}'", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The shard names an index maps to, each opened once.
StatusOr<std::map<std::string, std::string>> ReadWeightMap(const std::string& index_path) {
  MAESTRO_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(index_path));
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(fmt::format("'{}' is not valid JSON: {}", index_path, e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return Status::Corruption(fmt::format("'{}' has no \"weight_map\" object", index_path));
  }
  std::map<std::string, std::string> map;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) {
      return Status::Corruption(fmt::format("'{}': weight_map[\"{}\"] is not a file name", index_path, name));
    }
    const std::string file = shard.get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return Status::Corruption(fmt::format("'{}': weight_map[\"{}\"] = \"{}\" is not a file name inside the directory",
                                            index_path, name, file));
    }
    map[name] = file;
  }
  return map;
}

Status FsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(fmt::format("cannot open '{}' to flush it", path));
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) return Status::IOError(fmt::format("cannot flush '{}'", path));
  return Status::Ok();
}

std::string ShapeList(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape.begin(), shape.end(), ", "));
}

std::string JoinProblems(const std::vector<std::string>& problems) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < problems.size() && i < kShown; ++i) out += "\n  " + problems[i];
  if (problems.size() > kShown) out += fmt::format("\n  ... and {} more", problems.size() - kShown);
  return out;
}

bool IsWeightDType(TensorDType dtype) {
  return dtype == TensorDType::kBF16 || dtype == TensorDType::kF16 || dtype == TensorDType::kF32 ||
         dtype == TensorDType::kF64;
}

}  // namespace

Status CheckCheckpointMatches(const HfCheckpoint& ckpt, const WeightNames& names, const std::string& desc_source) {
  std::vector<std::string> unexpected;
  for (const auto& name : ckpt.TensorNames()) {
    if (!names.Owns(name) || names.PassedOver(name) || names.ByHfName(name) != nullptr) continue;
    MAESTRO_ASSIGN_OR_RETURN(auto located, ckpt.Find(name));
    unexpected.push_back(fmt::format("'{}' {} in {}", name, located.info->ShapeText(), located.file->path()));
  }
  if (!unexpected.empty()) {
    return Status::InvalidArgument(fmt::format(
        "{}: {} tensor(s) that the {} model described by '{}' does not have (a different architecture, "
        "or a desc that does not match the checkpoint's config.json; docs/weights.md lists the names):{}",
        ckpt.dir(), unexpected.size(), WeightLayoutName(names.layout), desc_source, JoinProblems(unexpected)));
  }
  std::vector<std::string> missing;
  for (const auto& w : names.weights) {
    if (!ckpt.Find(w.hf_name).ok()) missing.push_back(fmt::format("'{}' {}", w.hf_name, ShapeList(w.shape)));
  }
  if (!missing.empty()) {
    return Status::NotFound(fmt::format("{}: {} tensor(s) the {} model needs are missing (name, expected shape):{}",
                                        ckpt.dir(), missing.size(), WeightLayoutName(names.layout),
                                        JoinProblems(missing)));
  }
  for (const auto& w : names.weights) {
    MAESTRO_ASSIGN_OR_RETURN(auto located, ckpt.Find(w.hf_name));
    const TensorInfo& info = *located.info;
    if (info.shape != w.shape) {
      return Status::InvalidArgument(
          fmt::format("tensor '{}' in {} has shape {}, but the model needs {} (is the desc "
                      "the one of this checkpoint's config.json?)",
                      w.hf_name, located.file->path(), info.ShapeText(), ShapeList(w.shape)));
    }
    if (!IsWeightDType(info.dtype)) {
      return Status::InvalidArgument(
          fmt::format("tensor '{}' in {}: dtype {} is not a floating-point weight dtype (BF16, F16, F32, F64)",
                      w.hf_name, located.file->path(), TensorDTypeName(info.dtype)));
    }
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<HfCheckpoint>> HfCheckpoint::Open(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::NotFound(
        fmt::format("weights '{}': no such directory (a Hugging Face checkpoint directory with "
                    "config.json and model.safetensors)",
                    dir));
  }
  auto ckpt = std::unique_ptr<HfCheckpoint>(new HfCheckpoint());
  ckpt->dir_ = dir;
  const std::string config = (fs::path(dir) / kConfigFileName).string();
  auto config_text = ReadWholeFile(config);
  if (!config_text.ok()) {
    return Status::NotFound(fmt::format("weights '{}': no config.json (every Hugging Face checkpoint has one)", dir));
  }
  ckpt->config_json_ = std::move(*config_text);

  const std::string single = (fs::path(dir) / kSingleFileName).string();
  const std::string index = (fs::path(dir) / kIndexFileName).string();
  std::map<std::string, std::string> weight_map;  // tensor -> shard; empty for one file
  std::vector<std::string> shard_names;
  if (fs::exists(index, ec)) {
    MAESTRO_ASSIGN_OR_RETURN(weight_map, ReadWeightMap(index));
    std::set<std::string> unique;
    for (const auto& [name, shard] : weight_map) unique.insert(shard);
    shard_names.assign(unique.begin(), unique.end());
  } else if (fs::exists(single, ec)) {
    shard_names = {kSingleFileName};
  } else {
    return Status::NotFound(
        fmt::format("weights '{}': neither model.safetensors nor model.safetensors.index.json "
                    "(only safetensors checkpoints are read; convert .bin files with "
                    "transformers' save_pretrained(safe_serialization=True))",
                    dir));
  }
  for (const std::string& shard : shard_names) {
    MAESTRO_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open((fs::path(dir) / shard).string()));
    for (const TensorInfo& t : file->tensors()) {
      if (!weight_map.empty()) {
        auto it = weight_map.find(t.name);
        if (it == weight_map.end() || it->second != shard) {
          return Status::Corruption(fmt::format("'{}' holds tensor '{}', which the index {}", file->path(), t.name,
                                                it == weight_map.end() ? "does not name" : "maps to " + it->second));
        }
      }
      ckpt->tensors_[t.name] = Located{file.get(), &t};
    }
    ckpt->files_.push_back(std::move(file));
  }
  for (const auto& [name, shard] : weight_map) {
    if (ckpt->tensors_.count(name) == 0) {
      return Status::Corruption(
          fmt::format("'{}' maps tensor '{}' to '{}', which does not hold it", index, name, shard));
    }
  }
  return ckpt;
}

std::vector<std::string> HfCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, unused] : tensors_) names.push_back(name);
  return names;
}

StatusOr<HfCheckpoint::Located> HfCheckpoint::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return Status::NotFound(fmt::format("weights '{}': no tensor '{}'", dir_, name));
  }
  return it->second;
}

StatusOr<std::unique_ptr<HfCheckpointWriter>> HfCheckpointWriter::Start(
    const std::string& dir, std::string_view config_json, const std::vector<TensorSpec>& tensors,
    uint64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    return Status::FailedPrecondition(fmt::format("'{}' already exists: remove it or choose another output", dir));
  }
  std::unique_ptr<HfCheckpointWriter> w(new HfCheckpointWriter());
  w->dir_ = dir;
  w->metadata_ = metadata;
  w->tensors_ = tensors;
  // Shards: consecutive tensors while they fit (a tensor larger than the
  // limit gets a shard of its own).
  uint64_t shard_bytes = 0;
  size_t shards = 1;
  std::set<std::string> names;
  for (const TensorSpec& t : tensors) {
    if (!names.insert(t.name).second) {
      return Status::InvalidArgument(fmt::format("writing '{}': tensor '{}' is given twice", dir, t.name));
    }
    auto bytes = t.Bytes();
    if (!bytes.ok()) return bytes.status().WithContext(fmt::format("writing '{}'", dir));
    if (shard_bytes > 0 && shard_bytes + *bytes > max_shard_bytes) {
      ++shards;
      shard_bytes = 0;
    }
    w->bytes_.push_back(*bytes);
    w->shard_of_.push_back(shards - 1);
    shard_bytes += *bytes;
  }
  for (size_t i = 0; i < shards; ++i) {
    w->file_names_.push_back(shards == 1 ? std::string(kSingleFileName)
                                         : fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards));
  }
  w->partial_ = fmt::format("{}.partial-{}", dir, ::getpid());
  fs::remove_all(w->partial_, ec);
  MAESTRO_RETURN_IF_ERROR(CreateDirectories(w->partial_));
  MAESTRO_RETURN_IF_ERROR(WriteFileAtomically((fs::path(w->partial_) / kConfigFileName).string(), config_json));
  MAESTRO_RETURN_IF_ERROR(w->OpenShard(0));
  return w;
}

HfCheckpointWriter::~HfCheckpointWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_ && !partial_.empty()) {
    std::error_code ec;
    fs::remove_all(partial_, ec);
  }
}

Status HfCheckpointWriter::OpenShard(size_t shard) {
  std::vector<TensorSpec> in_shard;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    if (shard_of_[i] == shard) in_shard.push_back(tensors_[i]);
  }
  const std::string path = (fs::path(partial_) / file_names_[shard]).string();
  MAESTRO_ASSIGN_OR_RETURN(const std::string head, EncodeSafetensorsHead(path, in_shard, metadata_));
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::IOError(fmt::format("cannot create '{}': {}", path, std::strerror(errno)));
  open_shard_ = shard;
  if (int err = WriteFully(fd_, head); err != 0) {
    return Status::IOError(fmt::format("writing '{}': {}", path, std::strerror(err)));
  }
  return Status::Ok();
}

Status HfCheckpointWriter::CloseShard() {
  const std::string path = (fs::path(partial_) / file_names_[open_shard_]).string();
  const int fd = fd_;
  fd_ = -1;
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IOError(fmt::format("fsync of '{}': {}", path, std::strerror(err)));
  }
  if (::close(fd) != 0) return Status::IOError(fmt::format("closing '{}': {}", path, std::strerror(errno)));
  return Status::Ok();
}

Status HfCheckpointWriter::Append(std::string_view name, std::string_view bytes) {
  if (finished_ || next_ >= tensors_.size()) {
    return Status::InvalidArgument(fmt::format("writing '{}': tensor '{}' given after the last one", dir_, name));
  }
  const TensorSpec& spec = tensors_[next_];
  if (name != spec.name || bytes.size() != bytes_[next_]) {
    return Status::InvalidArgument(
        fmt::format("writing '{}': expected tensor '{}' ({} bytes) next, got '{}' ({} bytes)", dir_, spec.name,
                    bytes_[next_], name, bytes.size()));
  }
  if (shard_of_[next_] != open_shard_) {
    MAESTRO_RETURN_IF_ERROR(CloseShard());
    MAESTRO_RETURN_IF_ERROR(OpenShard(shard_of_[next_]));
  }
  if (int err = WriteFully(fd_, bytes); err != 0) {
    return Status::IOError(
        fmt::format("writing '{}': {}", (fs::path(partial_) / file_names_[open_shard_]).string(), std::strerror(err)));
  }
  ++next_;
  return Status::Ok();
}

Status HfCheckpointWriter::Finish() {
  if (next_ != tensors_.size()) {
    return Status::FailedPrecondition(fmt::format("writing '{}': {} of {} tensors given; the next is '{}'", dir_, next_,
                                                  tensors_.size(), tensors_[next_].name));
  }
  if (fd_ >= 0) MAESTRO_RETURN_IF_ERROR(CloseShard());
  if (file_names_.size() > 1) {
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    uint64_t total = 0;
    for (size_t i = 0; i < tensors_.size(); ++i) {
      weight_map[tensors_[i].name] = file_names_[shard_of_[i]];
      total += bytes_[i];
    }
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    MAESTRO_RETURN_IF_ERROR(WriteFileAtomically((fs::path(partial_) / kIndexFileName).string(), index.dump(2) + "\n"));
  }
  MAESTRO_RETURN_IF_ERROR(FsyncPath(partial_));
  std::error_code ec;
  fs::rename(partial_, dir_, ec);
  if (ec) return Status::IOError(fmt::format("cannot rename '{}' to '{}': {}", partial_, dir_, ec.message()));
  finished_ = true;
  const fs::path parent = fs::absolute(dir_, ec).parent_path();
  return FsyncPath(parent.string());
}

Status WriteHfCheckpoint(const std::string& dir, std::string_view config_json,
                         const std::vector<TensorToWrite>& tensors, uint64_t max_shard_bytes,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  // The bytes' sizes are checked by Append (a writer dropped on an error
  // removes its partial folder).
  for (const TensorToWrite& t : tensors) specs.push_back(TensorSpec{t.name, t.dtype, t.shape});
  MAESTRO_ASSIGN_OR_RETURN(auto writer, HfCheckpointWriter::Start(dir, config_json, specs, max_shard_bytes, metadata));
  for (const TensorToWrite& t : tensors) MAESTRO_RETURN_IF_ERROR(writer->Append(t.name, t.bytes));
  return writer->Finish();
}

}  // namespace maestro::hf
