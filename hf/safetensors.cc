// SPDX-License-Identifier: Apache-2.0
#include "hf/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "base/checks.h"
#include "base/files.h"

namespace maestro::hf {

namespace {

// The reference reader refuses larger headers (safetensors' MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeEntry {
  TensorDType dtype;
  const char* name;
  size_t size;
};
constexpr std::array<DTypeEntry, 15> kDTypes = {{
    {TensorDType::kBool, "BOOL", 1},
    {TensorDType::kU8, "U8", 1},
    {TensorDType::kI8, "I8", 1},
    {TensorDType::kF8E5M2, "F8_E5M2", 1},
    {TensorDType::kF8E4M3, "F8_E4M3", 1},
    {TensorDType::kI16, "I16", 2},
    {TensorDType::kU16, "U16", 2},
    {TensorDType::kF16, "F16", 2},
    {TensorDType::kBF16, "BF16", 2},
    {TensorDType::kI32, "I32", 4},
    {TensorDType::kU32, "U32", 4},
    {TensorDType::kF32, "F32", 4},
    {TensorDType::kF64, "F64", 8},
    {TensorDType::kI64, "I64", 8},
    {TensorDType::kU64, "U64", 8},
}};

const DTypeEntry& EntryOf(TensorDType dtype) {
  for (const auto& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  return kDTypes[0];  // unreachable: every enumerator has an entry
}

uint64_t ReadLittleEndianU64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// A JSON parse that refuses a key given twice in one object (nlohmann keeps
// the last silently; the format wants every tensor named once).
nlohmann::json ParseJsonWithoutDuplicateKeys(std::string_view text, std::string* duplicate) {
  std::vector<std::set<std::string>> open_objects;
  auto callback = [&](int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    switch (event) {
      case nlohmann::json::parse_event_t::object_start: open_objects.emplace_back(); break;
      case nlohmann::json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case nlohmann::json::parse_event_t::key:
        if (!open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second &&
            duplicate->empty()) {
          *duplicate = parsed.get<std::string>();
        }
        break;
      default: break;
    }
    return true;
  };
  return nlohmann::json::parse(text.begin(), text.end(), callback);
}

Status Bad(const std::string& file, const std::string& what) {
  return Status::Corruption(
      fmt::format("safetensors file '{}': {} (re-export or re-download the file; a "
                  "truncated copy is the usual cause)",
                  file, what));
}

StatusOr<uint64_t> UnsignedOf(const nlohmann::json& v, const std::string& file, const std::string& what) {
  if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
    return Bad(file, fmt::format("{} must be a non-negative integer, got {}", what, v.dump()));
  }
  return v.get<uint64_t>();
}

StatusOr<TensorInfo> ReadTensorEntry(const std::string& name, const nlohmann::json& entry, const std::string& file) {
  if (!entry.is_object()) return Bad(file, fmt::format("tensor '{}': its entry is not an object", name));
  for (const auto& [key, unused] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return Bad(file, fmt::format("tensor '{}': unknown key '{}' (dtype, shape and data_offsets only)", name, key));
    }
  }
  if (!entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") ||
      !entry["shape"].is_array() || !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
      entry["data_offsets"].size() != 2) {
    return Bad(file,
               fmt::format("tensor '{}': needs a string dtype, an array shape and data_offsets [begin, end]", name));
  }
  TensorInfo info;
  info.name = name;
  auto dtype = TensorDTypeFromName(entry["dtype"].get<std::string>());
  if (!dtype.ok()) return Bad(file, fmt::format("tensor '{}': {}", name, dtype.status().message()));
  info.dtype = *dtype;
  uint64_t bytes = TensorDTypeSize(info.dtype);
  for (const auto& d : entry["shape"]) {
    MAESTRO_ASSIGN_OR_RETURN(uint64_t dim, UnsignedOf(d, file, fmt::format("tensor '{}': a dimension", name)));
    if (dim > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, dim, &bytes)) {
      return Bad(file, fmt::format("tensor '{}': its shape {} overflows", name, entry["shape"].dump()));
    }
    info.shape.push_back(static_cast<int64_t>(dim));
  }
  MAESTRO_ASSIGN_OR_RETURN(info.begin, UnsignedOf(entry["data_offsets"][0], file, "data_offsets"));
  MAESTRO_ASSIGN_OR_RETURN(info.end, UnsignedOf(entry["data_offsets"][1], file, "data_offsets"));
  if (info.end < info.begin || info.end - info.begin != bytes) {
    return Bad(file, fmt::format("tensor '{}': data_offsets [{}, {}] hold {} bytes, but {} {} needs {}", name,
                                 info.begin, info.end, info.end - std::min(info.begin, info.end),
                                 TensorDTypeName(info.dtype), info.ShapeText(), bytes));
  }
  return info;
}

}  // namespace

const char* TensorDTypeName(TensorDType dtype) {
  return EntryOf(dtype).name;
}

size_t TensorDTypeSize(TensorDType dtype) {
  return EntryOf(dtype).size;
}

StatusOr<TensorDType> TensorDTypeFromName(std::string_view name) {
  std::string known;
  for (const auto& e : kDTypes) {
    if (name == e.name) return e.dtype;
    known += known.empty() ? "" : ", ";
    known += e.name;
  }
  return Status::InvalidArgument(fmt::format("unknown dtype '{}' (known: {})", name, known));
}

int64_t TensorInfo::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::ShapeText() const {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file_bytes, const std::string& file_name) {
  if (file_bytes.size() < 8) {
    return Bad(file_name, fmt::format("{} bytes is too short for the 8-byte header size", file_bytes.size()));
  }
  const uint64_t n = ReadLittleEndianU64(reinterpret_cast<const unsigned char*>(file_bytes.data()));
  if (n < 2 || n > kMaxHeaderBytes) {
    return Bad(file_name, fmt::format("the header size {} is outside [2, {}]", n, kMaxHeaderBytes));
  }
  if (n > file_bytes.size() - 8) {
    return Bad(file_name, fmt::format("the header claims {} bytes but the file has only {} after the size", n,
                                      file_bytes.size() - 8));
  }
  const std::string_view text = file_bytes.substr(8, n);
  if (text.front() != '{') return Bad(file_name, "the header does not start with '{'");
  nlohmann::json header;
  std::string duplicate;
  try {
    header = ParseJsonWithoutDuplicateKeys(text, &duplicate);
  } catch (const nlohmann::json::exception& e) {
    return Bad(file_name, fmt::format("the header is not valid JSON: {}", e.what()));
  }
  if (!duplicate.empty()) return Bad(file_name, fmt::format("the header names '{}' twice", duplicate));
  if (!header.is_object()) return Bad(file_name, "the header is not a JSON object");
  SafetensorsHeader out;
  out.data_start = 8 + n;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) return Bad(file_name, "__metadata__ is not an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) return Bad(file_name, fmt::format("__metadata__ '{}' is not a string", key));
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    MAESTRO_ASSIGN_OR_RETURN(TensorInfo info, ReadTensorEntry(name, entry, file_name));
    out.tensors.push_back(std::move(info));
  }
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t buffer = file_bytes.size() - out.data_start;
  uint64_t expected = 0;
  for (const TensorInfo& t : out.tensors) {
    if (t.begin != expected) {
      return Bad(file_name, fmt::format("tensor '{}' begins at byte {} of the data, but the previous one ends at {} "
                                        "(tensors must tile the data with no hole or overlap)",
                                        t.name, t.begin, expected));
    }
    expected = t.end;
  }
  if (expected != buffer) {
    return Bad(file_name, fmt::format("the tensors cover {} bytes of data but the file holds {} after the header{}",
                                      expected, buffer, expected > buffer ? ": the file is truncated" : ""));
  }
  return out;
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string why = fmt::format("cannot open safetensors file '{}': {}", path, std::strerror(err));
    return err == ENOENT ? Status::NotFound(why) : Status::IOError(why);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::IOError(fmt::format("safetensors file '{}' is not a regular file", path));
  }
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->map_bytes_ = static_cast<size_t>(st.st_size);
  if (file->map_bytes_ > 0) {
    void* p = ::mmap(nullptr, file->map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Status::IOError(fmt::format("cannot map safetensors file '{}': {}", path, std::strerror(err)));
    }
    file->map_ = p;
  }
  ::close(fd);
  const std::string_view bytes(static_cast<const char*>(file->map_), file->map_bytes_);
  MAESTRO_ASSIGN_OR_RETURN(file->header_, ParseSafetensorsHeader(bytes, path));
  for (size_t i = 0; i < file->header_.tensors.size(); ++i) file->by_name_[file->header_.tensors[i].name] = i;
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
}

const TensorInfo* SafetensorsFile::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &header_.tensors[it->second];
}

TensorView SafetensorsFile::View(const TensorInfo& info) const {
  TensorView v;
  v.info = &info;
  v.data = static_cast<const std::byte*>(map_) + header_.data_start + info.begin;
  v.bytes = static_cast<size_t>(info.end - info.begin);
  return v;
}

StatusOr<uint64_t> TensorSpec::Bytes() const {
  uint64_t bytes = TensorDTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0) return Status::InvalidArgument(fmt::format("tensor '{}' has a negative dim", name));
    if (d != 0 && bytes > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      return Status::InvalidArgument(fmt::format("tensor '{}': its byte size overflows 64 bits", name));
    }
    bytes *= static_cast<uint64_t>(d);
  }
  return bytes;
}

StatusOr<std::string> EncodeSafetensorsHead(const std::string& path, const std::vector<TensorSpec>& tensors,
                                            const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const TensorSpec& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      return Status::InvalidArgument(
          fmt::format("writing '{}': tensor name '{}' is reserved or given twice", path, t.name));
    }
    auto bytes = t.Bytes();
    if (!bytes.ok()) return bytes.status().WithContext(fmt::format("writing '{}'", path));
    header[t.name] = {
        {"dtype", TensorDTypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string head(8, '\0');
  for (size_t i = 0; i < 8; ++i) head[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return head + text;
}

StatusOr<std::string> EncodeSafetensorsHead(const std::string& path, const std::vector<TensorToWrite>& tensors,
                                            const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const TensorToWrite& t : tensors) {
    TensorSpec spec{t.name, t.dtype, t.shape};
    auto bytes = spec.Bytes();
    if (!bytes.ok()) return bytes.status().WithContext(fmt::format("writing '{}'", path));
    if (*bytes != t.bytes.size()) {
      return Status::InvalidArgument(
          fmt::format("writing '{}': tensor '{}' ({} {}) needs {} bytes, got {}", path, t.name,
                      TensorDTypeName(t.dtype), fmt::format("[{}]", fmt::join(t.shape, ", ")), *bytes, t.bytes.size()));
    }
    specs.push_back(std::move(spec));
  }
  return EncodeSafetensorsHead(path, specs, metadata);
}

Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  MAESTRO_ASSIGN_OR_RETURN(const std::string head, EncodeSafetensorsHead(path, tensors, metadata));
  std::vector<std::string_view> pieces = {head};
  for (const TensorToWrite& t : tensors) pieces.push_back(t.bytes);
  return WriteFileAtomically(path, pieces);
}

}  // namespace maestro::hf
