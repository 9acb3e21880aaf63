// SPDX-License-Identifier: Apache-2.0
#include "datalayer/sharded_checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "base/checks.h"
#include "datalayer/crc32c.h"

namespace maestro::datalayer {

int64_t Box::elements() const {
  int64_t n = 1;
  for (int64_t l : lengths) n *= l;
  return n;
}

std::optional<Box> Intersect(const Box& a, const Box& b) {
  if (a.offsets.size() != b.offsets.size()) return std::nullopt;
  Box out;
  for (size_t d = 0; d < a.offsets.size(); ++d) {
    const int64_t lo = std::max(a.offsets[d], b.offsets[d]);
    const int64_t hi = std::min(a.offsets[d] + a.lengths[d], b.offsets[d] + b.lengths[d]);
    if (hi <= lo) return std::nullopt;
    out.offsets.push_back(lo);
    out.lengths.push_back(hi - lo);
  }
  return out;
}

namespace {

// BoxesOfFlatRange below dimension `d`: the prefix (offsets of dimensions
// < d, lengths 1) is in `prefix`.
void FlatRangeBoxes(const std::vector<int64_t>& shape, size_t d, int64_t begin, int64_t end, Box prefix,
                    std::vector<Box>* out) {
  if (begin >= end) return;
  if (d == shape.size()) {  // a scalar (or the last element of a prefix)
    out->push_back(std::move(prefix));
    return;
  }
  int64_t inner = 1;
  for (size_t k = d + 1; k < shape.size(); ++k) inner *= shape[k];
  auto with = [&](int64_t offset, int64_t length) {
    Box b = prefix;
    b.offsets.push_back(offset);
    b.lengths.push_back(length);
    return b;
  };
  auto whole_below = [&](Box b) {
    for (size_t k = d + 1; k < shape.size(); ++k) {
      b.offsets.push_back(0);
      b.lengths.push_back(shape[k]);
    }
    return b;
  };
  int64_t first = begin / inner;
  const int64_t last = (end - 1) / inner;
  if (first == last && (begin % inner != 0 || end % inner != 0 || end - begin < inner)) {
    FlatRangeBoxes(shape, d + 1, begin - first * inner, end - first * inner, with(first, 1), out);
    return;
  }
  if (begin % inner != 0) {  // the head: part of row `first`
    FlatRangeBoxes(shape, d + 1, begin % inner, inner, with(first, 1), out);
    ++first;
  }
  const int64_t full_end = end / inner;  // rows [first, full_end) are whole
  if (full_end > first) out->push_back(whole_below(with(first, full_end - first)));
  if (end % inner != 0) FlatRangeBoxes(shape, d + 1, 0, end % inner, with(full_end, 1), out);
}

nlohmann::json RecordJson(const SliceRecord& r) {
  nlohmann::json j{{"tensor", r.tensor},
                   {"global_shape", r.global_shape},
                   {"dtype", hf::TensorDTypeName(r.dtype)},
                   {"offsets", r.box.offsets},
                   {"lengths", r.box.lengths},
                   {"file", r.file},
                   {"key", r.key}};
  if (r.crc_block_bytes > 0) {
    j["crc_block_bytes"] = r.crc_block_bytes;
    j["block_crc32c"] = r.block_crc32c;
  } else {
    j["crc32c"] = r.crc32c;
  }
  return j;
}

// The CRC-32C of each kPieceCrcBlockBytes block of `bytes`.
std::vector<uint32_t> BlockCrcs(std::string_view bytes) {
  std::vector<uint32_t> out;
  for (size_t at = 0; at < bytes.size(); at += static_cast<size_t>(kPieceCrcBlockBytes)) {
    out.push_back(Crc32c(bytes.data() + at, std::min(bytes.size() - at, static_cast<size_t>(kPieceCrcBlockBytes))));
  }
  return out;
}

}  // namespace

std::vector<Box> BoxesOfFlatRange(const std::vector<int64_t>& shape, int64_t begin, int64_t end) {
  std::vector<Box> out;
  FlatRangeBoxes(shape, 0, begin, end, Box{}, &out);
  return out;
}

std::string ShardedCheckpointDirName(int64_t step) {
  return fmt::format("ckpt-{:010d}", step);
}

std::string RankShardFileName(int rank) {
  return fmt::format("rank-{:05d}.safetensors", rank);
}

StatusOr<std::vector<SliceRecord>> WriteRankShard(const std::string& dir, int rank,
                                                  const std::vector<SliceToWrite>& slices, Env* env) {
  std::vector<SliceRecord> records;
  if (slices.empty()) return records;
  const std::string file = RankShardFileName(rank);
  const std::string path = dir + "/" + file;
  std::vector<hf::TensorToWrite> tensors;
  for (size_t i = 0; i < slices.size(); ++i) {
    const SliceToWrite& s = slices[i];
    if (s.box.offsets.size() != s.global_shape.size() || s.box.lengths.size() != s.global_shape.size()) {
      return Status::InvalidArgument(fmt::format("{}: piece of '{}' has a box of another rank", path, s.tensor));
    }
    for (size_t d = 0; d < s.global_shape.size(); ++d) {
      if (s.box.offsets[d] < 0 || s.box.lengths[d] < 0 || s.box.offsets[d] + s.box.lengths[d] > s.global_shape[d]) {
        return Status::InvalidArgument(
            fmt::format("{}: piece of '{}' leaves its global shape in dimension {}", path, s.tensor, d));
      }
    }
    SliceRecord r;
    r.tensor = s.tensor;
    r.global_shape = s.global_shape;
    r.dtype = s.dtype;
    r.box = s.box;
    r.file = file;
    r.key = fmt::format("{}@{}", s.tensor, fmt::join(s.box.offsets, ","));
    r.crc_block_bytes = kPieceCrcBlockBytes;
    r.block_crc32c = BlockCrcs(s.bytes);
    tensors.push_back(hf::TensorToWrite{r.key, s.dtype, s.box.lengths, s.bytes});
    records.push_back(std::move(r));
  }
  MAESTRO_ASSIGN_OR_RETURN(const std::string head, hf::EncodeSafetensorsHead(path, tensors));
  MAESTRO_RETURN_IF_ERROR(env->CreateDirs(dir));
  const std::string tmp = path + ".tmp";
  {
    MAESTRO_ASSIGN_OR_RETURN(auto out, env->NewWritableFile(tmp));
    MAESTRO_RETURN_IF_ERROR(out->Append(head));
    for (const auto& t : tensors) {
      if (!t.bytes.empty()) MAESTRO_RETURN_IF_ERROR(out->Append(t.bytes));
    }
    MAESTRO_RETURN_IF_ERROR(out->Sync());
    MAESTRO_RETURN_IF_ERROR(out->Close());
  }
  MAESTRO_RETURN_IF_ERROR(env->RenameFile(tmp, path));
  MAESTRO_RETURN_IF_ERROR(env->SyncDir(dir));
  return records;
}

std::string SliceRecordsToJson(const std::vector<SliceRecord>& records) {
  nlohmann::json out = nlohmann::json::array();
  for (const SliceRecord& r : records) out.push_back(RecordJson(r));
  return out.dump();
}

StatusOr<std::vector<SliceRecord>> SliceRecordsFromJson(std::string_view text) {
  const nlohmann::json parsed = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (parsed.is_discarded() || !parsed.is_array()) return Status::Corruption("checkpoint pieces: not a JSON array");
  std::vector<SliceRecord> records;
  try {
    for (const auto& e : parsed) {
      SliceRecord r;
      r.tensor = e.at("tensor").get<std::string>();
      r.global_shape = e.at("global_shape").get<std::vector<int64_t>>();
      MAESTRO_ASSIGN_OR_RETURN(r.dtype, hf::TensorDTypeFromName(e.at("dtype").get<std::string>()));
      r.box.offsets = e.at("offsets").get<std::vector<int64_t>>();
      r.box.lengths = e.at("lengths").get<std::vector<int64_t>>();
      r.file = e.at("file").get<std::string>();
      r.key = e.at("key").get<std::string>();
      if (e.contains("block_crc32c")) {
        r.crc_block_bytes = e.at("crc_block_bytes").get<int64_t>();
        r.block_crc32c = e.at("block_crc32c").get<std::vector<uint32_t>>();
        const int64_t bytes = static_cast<int64_t>(hf::TensorDTypeSize(r.dtype)) * r.box.elements();
        const int64_t blocks = r.crc_block_bytes > 0 ? (bytes + r.crc_block_bytes - 1) / r.crc_block_bytes : -1;
        if (blocks != static_cast<int64_t>(r.block_crc32c.size())) {
          return Status::Corruption(fmt::format("checkpoint piece of '{}' in {}: {} block checksums for {} bytes",
                                                r.tensor, r.file, r.block_crc32c.size(), bytes));
        }
      } else {
        r.crc32c = e.at("crc32c").get<uint32_t>();  // written before block checksums
      }
      if (r.file.find('/') != std::string::npos || r.file.rfind("rank-", 0) != 0) {
        return Status::Corruption(
            fmt::format("checkpoint piece of '{}': file '{}' is not a rank file", r.tensor, r.file));
      }
      records.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::Corruption(std::string("checkpoint pieces: ") + e.what());
  }
  return records;
}

Status CheckSlicesTile(const std::vector<SliceRecord>& records, const std::string& where) {
  std::map<std::string, std::vector<const SliceRecord*>> by_tensor;
  for (const SliceRecord& r : records) by_tensor[r.tensor].push_back(&r);
  for (const auto& [name, pieces] : by_tensor) {
    const SliceRecord& first = *pieces.front();
    int64_t numel = 1, covered = 0;
    for (int64_t d : first.global_shape) numel *= d;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const SliceRecord& p = *pieces[i];
      if (p.global_shape != first.global_shape || p.dtype != first.dtype) {
        return Status::Corruption(fmt::format("{}: the pieces of '{}' disagree on its shape or dtype", where, name));
      }
      if (p.box.offsets.size() != p.global_shape.size() || p.box.lengths.size() != p.global_shape.size()) {
        return Status::Corruption(fmt::format("{}: a piece of '{}' has a box of another rank", where, name));
      }
      for (size_t d = 0; d < p.global_shape.size(); ++d) {
        if (p.box.offsets[d] < 0 || p.box.lengths[d] <= 0 || p.box.offsets[d] + p.box.lengths[d] > p.global_shape[d]) {
          return Status::Corruption(fmt::format("{}: a piece of '{}' leaves the tensor", where, name));
        }
      }
      for (size_t j = 0; j < i; ++j) {
        if (Intersect(p.box, pieces[j]->box)) {
          return Status::Corruption(
              fmt::format("{}: two pieces of '{}' overlap (in {} and {})", where, name, p.file, pieces[j]->file));
        }
      }
      covered += p.box.elements();
    }
    if (covered != numel) {
      return Status::Corruption(
          fmt::format("{}: the pieces of '{}' cover {} of its {} elements", where, name, covered, numel));
    }
  }
  return Status::Ok();
}

std::pair<int64_t, int64_t> ByteSpanOf(const Box& piece, const Box& part, int64_t element_size) {
  if (part.elements() == 0) return {0, 0};
  // C-order offsets (within the piece) of part's first and last elements.
  int64_t first = 0, last = 0;
  for (size_t d = 0; d < piece.lengths.size(); ++d) {
    const int64_t at = part.offsets[d] - piece.offsets[d];
    first = first * piece.lengths[d] + at;
    last = last * piece.lengths[d] + at + part.lengths[d] - 1;
  }
  return {first * element_size, (last + 1) * element_size};
}

StatusOr<std::string_view> ShardReader::Bytes(const SliceRecord& record) {
  return Bytes(record, 0, INT64_MAX);
}

StatusOr<std::string_view> ShardReader::Bytes(const SliceRecord& record, int64_t begin, int64_t end) {
  auto& file = files_[record.file];
  if (!file) {
    auto opened = hf::SafetensorsFile::Open(dir_ + "/" + record.file);
    if (!opened.ok()) {
      files_.erase(record.file);
      return opened.status().WithContext("reading a checkpoint shard");
    }
    file = std::move(*opened);
  }
  const hf::TensorInfo* info = file->Find(record.key);
  if (info == nullptr || info->dtype != record.dtype || info->shape != record.box.lengths) {
    return Status::Corruption(
        fmt::format("{}: no tensor '{}' of the metadata's dtype and shape; the checkpoint is "
                    "damaged (an older committed one can be restored by hand, docs/datalayer.md)",
                    file->path(), record.key));
  }
  const hf::TensorView view = file->View(*info);
  const std::string_view bytes(reinterpret_cast<const char*>(view.data), view.bytes);
  const auto size = static_cast<int64_t>(bytes.size());
  const bool blocks = record.crc_block_bytes > 0;
  const int64_t block = blocks ? record.crc_block_bytes : std::max<int64_t>(size, 1);
  const size_t count = blocks ? record.block_crc32c.size() : 1;
  std::vector<bool>& verified = verified_[record.file + "/" + record.key];
  if (verified.size() != count) verified.assign(count, false);
  begin = std::clamp<int64_t>(begin, 0, size);
  end = std::clamp<int64_t>(end, begin, size);
  const int64_t first = begin / block, last = end > begin ? (end - 1) / block : first - 1;
  for (int64_t b = first; b <= last && b < static_cast<int64_t>(count); ++b) {
    if (verified[static_cast<size_t>(b)]) continue;
    const std::string_view part = bytes.substr(static_cast<size_t>(b * block), static_cast<size_t>(block));
    const uint32_t want = blocks ? record.block_crc32c[static_cast<size_t>(b)] : record.crc32c;
    if (Crc32c(part.data(), part.size()) != want) {
      return Status::Corruption(
          fmt::format("{}: tensor '{}' fails its checksum (bytes {}..{}); the checkpoint is damaged", file->path(),
                      record.key, b * block, b * block + part.size()));
    }
    verified[static_cast<size_t>(b)] = true;
  }
  return bytes;
}

StatusOr<std::string> ReadWholeTensor(ShardReader& reader, const std::vector<const SliceRecord*>& pieces) {
  if (pieces.empty()) return Status::InvalidArgument("ReadWholeTensor: no pieces");
  const std::vector<int64_t>& shape = pieces.front()->global_shape;
  const size_t esize = hf::TensorDTypeSize(pieces.front()->dtype);
  const size_t rank = shape.size();
  std::vector<int64_t> stride(rank, 1);  // global C-order strides, in elements
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * shape[d];
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  std::string out(static_cast<size_t>(numel) * esize, '\0');
  for (const SliceRecord* piece : pieces) {
    MAESTRO_ASSIGN_OR_RETURN(std::string_view bytes, reader.Bytes(*piece));
    const Box& box = piece->box;
    if (rank == 0) {
      out.assign(bytes.data(), bytes.size());
      continue;
    }
    // Row by row: a row is the box's extent along the last dimension.
    const size_t row_bytes = static_cast<size_t>(box.lengths[rank - 1]) * esize;
    std::vector<int64_t> at(rank - 1, 0);
    size_t from = 0;
    while (from < bytes.size()) {
      int64_t flat = box.offsets[rank - 1];
      for (size_t d = 0; d + 1 < rank; ++d) flat += (box.offsets[d] + at[d]) * stride[d];
      std::memcpy(out.data() + static_cast<size_t>(flat) * esize, bytes.data() + from, row_bytes);
      from += row_bytes;
      for (size_t d = rank - 1; d-- > 0;) {
        if (++at[d] < box.lengths[d]) break;
        at[d] = 0;
      }
      if (row_bytes == 0) break;
    }
  }
  return out;
}

}  // namespace maestro::datalayer
