// SPDX-License-Identifier: Apache-2.0
// Megatron indexed corpora: the dtypes and the mapped reader with its
// validation. The "pack" and "split" sample rules are in
// megatron_samples.cc, the writer in megatron_writer.cc. See
// megatron_indexed.h and docs/data.md. May call: base, POSIX. No libtorch.
#include "datasets/megatron_indexed.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "base/checks.h"
#include "base/files.h"
#include "base/mapped_file.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Megatron indexed datasets are little-endian; this reader assumes a little-endian host"
#endif

namespace maestro::datasets {

namespace {

// A value of the mapped .idx, which is not aligned (the header is 34 bytes).
template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool EndsWith(const std::string& s, const char* suffix) {
  const size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

constexpr const char* kRegenerateFix =
    "regenerate the pair with Megatron-LM's tools/preprocess_data.py, or copy both files again from where they were "
    "written";

// A read-only mapping of one file of the pair, its errors saying how to fix it.
StatusOr<MappedFile> MapFile(const std::string& path, const char* what) {
  StatusOr<MappedFile> mapped = MappedFile::Open(path);
  if (mapped.ok()) return mapped;
  switch (mapped.status().code()) {
    case StatusCode::kNotFound:
      return Status::NotFound(
          fmt::format("{}: the Megatron {} file does not exist; pass the prefix that "
                      "preprocess_data.py printed (e.g. my-corpus_text_document, without "
                      ".bin/.idx), whose .bin and .idx sit side by side",
                      path, what));
    case StatusCode::kInvalidArgument:
      return Status::InvalidArgument(
          fmt::format("{}: is not a regular file; pass the Megatron {} file (or the prefix of the pair)", path, what));
    default: return Status::IOError(fmt::format("the Megatron {} file: {}", what, mapped.status().message()));
  }
}

// Widens count tokens of type T to int64. The .bin mapping is page-aligned and
// every token offset is a multiple of sizeof(T) (validated at Open), so `src`
// is aligned for T. The fixed-size inner loop is what GCC's -O2 vectoriser
// takes (its cost model leaves a loop of unknown trip count scalar): 16
// tokens per step in SSE2 unpacks instead of one load and one store per
// token, 2x faster on a cached window (docs/data.md, "Measured").
template <typename T>
void ConvertTokens(const uint8_t* src, int64_t count, int64_t* __restrict out) {
  const T* __restrict s = reinterpret_cast<const T*>(src);
  constexpr int64_t kBlock = 16;
  int64_t i = 0;
  for (; i + kBlock <= count; i += kBlock) {
    for (int64_t j = 0; j < kBlock; ++j) out[i + j] = static_cast<int64_t>(s[i + j]);
  }
  for (; i < count; ++i) out[i] = static_cast<int64_t>(s[i]);
}

// The index of the first id outside [0, vocab_size) in src[0, count), or -1.
template <typename T>
int64_t FindBadToken(const uint8_t* src, int64_t count, int64_t vocab_size) {
  const T* s = reinterpret_cast<const T*>(src);
  constexpr int64_t kBlock = 4096;
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t e = std::min(count, b + kBlock);
    bool bad = false;
    for (int64_t i = b; i < e; ++i) {
      const int64_t v = static_cast<int64_t>(s[i]);
      bad |= (v < 0) | (v >= vocab_size);
    }
    if (!bad) continue;
    for (int64_t i = b; i < e; ++i) {
      const int64_t v = static_cast<int64_t>(s[i]);
      if (v < 0 || v >= vocab_size) return i;
    }
  }
  return -1;
}

}  // namespace

// ---- dtypes ------------------------------------------------------------------

const char* MegatronDTypeName(MegatronDType dtype) {
  switch (dtype) {
    case MegatronDType::kUint8: return "uint8";
    case MegatronDType::kInt8: return "int8";
    case MegatronDType::kInt16: return "int16";
    case MegatronDType::kInt32: return "int32";
    case MegatronDType::kInt64: return "int64";
    case MegatronDType::kFloat64: return "float64";
    case MegatronDType::kFloat32: return "float32";
    case MegatronDType::kUint16: return "uint16";
  }
  return "unknown";
}

int MegatronDTypeSize(MegatronDType dtype) {
  switch (dtype) {
    case MegatronDType::kUint8:
    case MegatronDType::kInt8: return 1;
    case MegatronDType::kInt16:
    case MegatronDType::kUint16: return 2;
    case MegatronDType::kInt32:
    case MegatronDType::kFloat32: return 4;
    case MegatronDType::kInt64:
    case MegatronDType::kFloat64: return 8;
  }
  return 0;
}

bool MegatronDTypeIsInteger(MegatronDType dtype) {
  return MegatronDTypeSize(dtype) != 0 && dtype != MegatronDType::kFloat32 && dtype != MegatronDType::kFloat64;
}

// ---- the reader ----------------------------------------------------------------

struct MegatronIndexedDataset::Files {
  std::string idx_path;
  std::string bin_path;
  MappedFile idx;
  MappedFile bin;
  MegatronDType dtype = MegatronDType::kUint16;
  int itemsize = 0;
  int64_t sequence_count = 0;
  int64_t document_entries = 0;  // document_indices entries (documents + 1)
  const uint8_t* lengths = nullptr;
  const uint8_t* pointers = nullptr;
  const uint8_t* document_indices = nullptr;
  const uint8_t* modes = nullptr;  // null: no sequence modes
  int64_t total_tokens = 0;

  Files() = default;
  Files(const Files&) = delete;
  Files& operator=(const Files&) = delete;
  ~Files() = default;

  int64_t Length(int64_t i) const { return Load<int32_t>(lengths + 4 * i); }
  int64_t Pointer(int64_t i) const { return Load<int64_t>(pointers + 8 * i); }
  int64_t DocIndex(int64_t e) const { return Load<int64_t>(document_indices + 8 * e); }
  int64_t TokenOffset(int64_t i) const { return i < sequence_count ? Pointer(i) / itemsize : total_tokens; }

  Status Corrupt(const std::string& path, const std::string& what) const {
    return Status::Corruption(fmt::format("{}: {}; {}", path, what, kRegenerateFix));
  }

  // Checks everything the reader relies on; called once by Open. In order:
  // the header and the index's size (sets dtype, itemsize, the counts and
  // where the arrays start), the document index, the sequences inside the
  // .bin (sets total_tokens).
  Status Validate();
  Status ValidateHeader();
  Status ValidateDocumentIndex() const;
  Status ValidateSequences();
};

Status MegatronIndexedDataset::Files::Validate() {
  MAESTRO_RETURN_IF_ERROR(ValidateHeader());
  MAESTRO_RETURN_IF_ERROR(ValidateDocumentIndex());
  return ValidateSequences();
}

// Magic, version, dtype, the counts against the .idx size, and what follows
// the document indices (nothing, or one mode per sequence).
Status MegatronIndexedDataset::Files::ValidateHeader() {
  const uint8_t* p = idx.data();
  const size_t size = idx.size();
  if (size < kMegatronIdxMagicSize || std::memcmp(p, kMegatronIdxMagic, kMegatronIdxMagicSize) != 0) {
    std::string seen;
    for (size_t i = 0; i < std::min(size, kMegatronIdxMagicSize); ++i) seen += fmt::format("{:02x}", p[i]);
    return Status::Corruption(
        fmt::format("{}: not a Megatron indexed-dataset index: it starts with bytes '{}' where the magic "
                    "'MMIDIDX\\x00\\x00' (4d4d4944494458 0000) was expected; pass the .idx that Megatron-LM's "
                    "tools/preprocess_data.py wrote (or its prefix, without .bin/.idx)",
                    idx_path, size == 0 ? std::string("(empty file)") : seen));
  }
  if (size < kMegatronIdxHeaderSize) {
    return Corrupt(idx_path, fmt::format("truncated header: {} bytes where the header alone takes {}", size,
                                         kMegatronIdxHeaderSize));
  }
  const uint64_t version = Load<uint64_t>(p + 9);
  if (version != kMegatronIdxVersion) {
    return Status::Corruption(
        fmt::format("{}: index version {} is not supported; Maestro reads version {} (Megatron-LM's MMIDIDX format of "
                    "megatron/core/datasets/indexed_dataset.py); re-run a current Megatron-LM tools/preprocess_data.py",
                    idx_path, version, kMegatronIdxVersion));
  }
  const uint8_t code = p[17];
  dtype = static_cast<MegatronDType>(code);
  itemsize = MegatronDTypeSize(dtype);
  if (itemsize == 0) {
    return Corrupt(idx_path, fmt::format("unknown dtype code {} (Megatron's codes are 1 uint8, 2 int8, 3 int16, "
                                         "4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)",
                                         code));
  }
  if (!MegatronDTypeIsInteger(dtype)) {
    return Status::InvalidArgument(fmt::format(
        "{}: the corpus stores {} values (dtype code {}), not token ids; Maestro reads token corpora, whose ids "
        "are integers (preprocess_data.py picks uint16 for vocabularies under 65500, else int32): point the data "
        "source at the tokenized corpus",
        idx_path, MegatronDTypeName(dtype), code));
  }
  const uint64_t n = Load<uint64_t>(p + 18);
  const uint64_t m = Load<uint64_t>(p + 26);
  const uint64_t room = size - kMegatronIdxHeaderSize;
  const bool fits = n <= room / 12 && m <= (room - 12 * n) / 8;
  if (!fits) {
    constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
    const bool exact = n <= (kMax - kMegatronIdxHeaderSize) / 24 && m <= (kMax - kMegatronIdxHeaderSize) / 16;
    const std::string need =
        exact ? fmt::format("{}", kMegatronIdxHeaderSize + 12 * n + 8 * m) : std::string("more than 2^63");
    return Corrupt(idx_path,
                   fmt::format("truncated index: the header promises {} sequences and {} document-index entries, "
                               "which take {} bytes, but the file has {} bytes (an interrupted write or copy)",
                               n, m, need, size));
  }
  const uint64_t base64 = kMegatronIdxHeaderSize + 12 * n + 8 * m;
  const uint64_t tail = size - base64;
  if (tail != 0 && tail != n) {
    return Corrupt(idx_path, fmt::format("{} bytes follow the document indices, where Megatron writes none (text) or "
                                         "{} (one mode per sequence, multimodal); the file is damaged",
                                         tail, n));
  }
  // n and m fit in int64 here: 12 * n + 8 * m <= the file size.
  sequence_count = static_cast<int64_t>(n);
  document_entries = static_cast<int64_t>(m);
  lengths = p + kMegatronIdxHeaderSize;
  pointers = lengths + 4 * n;
  document_indices = pointers + 8 * n;
  modes = (tail == n && n != 0) ? document_indices + 8 * m : nullptr;
  return Status::Ok();
}

// Document indices: 0, never decreasing, sequence_count last.
Status MegatronIndexedDataset::Files::ValidateDocumentIndex() const {
  if (document_entries == 0) {
    return Corrupt(idx_path, "the document index is empty; Megatron writes at least its first entry, 0");
  }
  if (DocIndex(0) != 0) {
    return Corrupt(idx_path,
                   fmt::format("document 0 starts at sequence {}; the document index must start at 0", DocIndex(0)));
  }
  for (int64_t e = 1; e < document_entries; ++e) {
    const int64_t prev = DocIndex(e - 1);
    const int64_t cur = DocIndex(e);
    if (cur < prev) {
      return Corrupt(idx_path, fmt::format("the document index decreases: document {} ends at sequence {}, before "
                                           "it starts (sequence {}); document indices must never decrease",
                                           e - 1, cur, prev));
    }
    if (cur > sequence_count) {
      return Corrupt(idx_path, fmt::format("document {} ends at sequence {}, past the {} sequences of the index", e - 1,
                                           cur, sequence_count));
    }
  }
  if (DocIndex(document_entries - 1) != sequence_count) {
    return Corrupt(idx_path, fmt::format("the last document ends at sequence {} but the index holds {} sequences; "
                                         "every sequence must belong to a document",
                                         DocIndex(document_entries - 1), sequence_count));
  }
  return Status::Ok();
}

// Sequences: inside the .bin, back to back from byte 0, and the .bin exactly
// as long as the index says.
Status MegatronIndexedDataset::Files::ValidateSequences() {
  const uint64_t bin_size = bin.size();
  uint64_t expected = 0;  // where the next sequence must start
  for (int64_t d = 0; d + 1 < document_entries; ++d) {
    for (int64_t i = DocIndex(d); i < DocIndex(d + 1); ++i) {
      const int64_t len = Length(i);
      const int64_t ptr = Pointer(i);
      if (len < 0) {
        return Corrupt(idx_path, fmt::format("sequence {} (document {}) has a negative length {}", i, d, len));
      }
      const uint64_t bytes = static_cast<uint64_t>(len) * static_cast<uint64_t>(itemsize);
      if (ptr < 0 || static_cast<uint64_t>(ptr) > bin_size || bytes > bin_size - static_cast<uint64_t>(ptr)) {
        if (ptr >= 0 && static_cast<uint64_t>(ptr) == expected) {
          return Corrupt(bin_path,
                         fmt::format("truncated data file: sequence {} (document {}) takes bytes [{}, {}) but the "
                                     "file has {} bytes (the index {} describes more tokens than this .bin holds)",
                                     i, d, ptr, static_cast<uint64_t>(ptr) + bytes, bin_size, idx_path));
        }
        return Corrupt(idx_path, fmt::format("sequence {} (document {}) points at bytes [{}, {} + {}) of {}, outside "
                                             "its {} bytes; the .idx and .bin do not belong together",
                                             i, d, ptr, ptr, bytes, bin_path, bin_size));
      }
      if (static_cast<uint64_t>(ptr) != expected) {
        return Corrupt(idx_path,
                       fmt::format("sequence {} (document {}) starts at byte {} of {} but the sequences before it end "
                                   "at byte {}; Megatron writes sequences back to back, so the .idx is damaged or "
                                   "belongs to another .bin",
                                   i, d, ptr, bin_path, expected));
      }
      expected += bytes;
    }
  }
  if (expected != bin_size) {
    return Corrupt(bin_path, fmt::format("the file has {} bytes but its index {} describes {} bytes ({} {} tokens); "
                                         "the .bin and .idx come from different runs",
                                         bin_size, idx_path, expected, expected / itemsize, MegatronDTypeName(dtype)));
  }
  total_tokens = static_cast<int64_t>(expected / static_cast<uint64_t>(itemsize));
  return Status::Ok();
}

StatusOr<MegatronIndexedDataset> MegatronIndexedDataset::Open(const std::string& prefix_or_path) {
  std::string prefix = prefix_or_path;
  if (EndsWith(prefix, ".idx") || EndsWith(prefix, ".bin")) prefix.resize(prefix.size() - 4);
  return Open(prefix + ".idx", prefix + ".bin");
}

StatusOr<MegatronIndexedDataset> MegatronIndexedDataset::Open(const std::string& idx_path,
                                                              const std::string& bin_path) {
  auto files = std::make_shared<Files>();
  files->idx_path = idx_path;
  files->bin_path = bin_path;
  MAESTRO_ASSIGN_OR_RETURN(files->idx, MapFile(idx_path, "index (.idx)"));
  MAESTRO_ASSIGN_OR_RETURN(files->bin, MapFile(bin_path, "data (.bin)"));
  MAESTRO_RETURN_IF_ERROR(files->Validate());
  return MegatronIndexedDataset(std::move(files));
}

const std::string& MegatronIndexedDataset::idx_path() const {
  return files_->idx_path;
}
const std::string& MegatronIndexedDataset::bin_path() const {
  return files_->bin_path;
}
MegatronDType MegatronIndexedDataset::dtype() const {
  return files_->dtype;
}
int64_t MegatronIndexedDataset::sequence_count() const {
  return files_->sequence_count;
}
int64_t MegatronIndexedDataset::document_count() const {
  return files_->document_entries - 1;
}
int64_t MegatronIndexedDataset::total_tokens() const {
  return files_->total_tokens;
}
bool MegatronIndexedDataset::has_sequence_modes() const {
  return files_->modes != nullptr;
}

namespace {
void RequireIndex(int64_t i, int64_t count, const char* what) {
  if (i < 0 || i >= count) {
    throw std::out_of_range(fmt::format("{} {} is outside [0, {})", what, i, count));
  }
}
}  // namespace

int64_t MegatronIndexedDataset::SequenceLength(int64_t i) const {
  RequireIndex(i, files_->sequence_count, "sequence");
  return files_->Length(i);
}

int64_t MegatronIndexedDataset::SequenceTokenOffset(int64_t i) const {
  RequireIndex(i, files_->sequence_count, "sequence");
  return files_->TokenOffset(i);
}

int8_t MegatronIndexedDataset::SequenceMode(int64_t i) const {
  RequireIndex(i, files_->sequence_count, "sequence");
  return files_->modes == nullptr ? 0 : static_cast<int8_t>(files_->modes[i]);
}

std::pair<int64_t, int64_t> MegatronIndexedDataset::DocumentSequences(int64_t d) const {
  RequireIndex(d, document_count(), "document");
  return {files_->DocIndex(d), files_->DocIndex(d + 1)};
}

int64_t MegatronIndexedDataset::DocumentTokenOffset(int64_t d) const {
  RequireIndex(d, document_count(), "document");
  return files_->TokenOffset(files_->DocIndex(d));
}

int64_t MegatronIndexedDataset::DocumentLength(int64_t d) const {
  RequireIndex(d, document_count(), "document");
  return files_->TokenOffset(files_->DocIndex(d + 1)) - files_->TokenOffset(files_->DocIndex(d));
}

int64_t MegatronIndexedDataset::DocumentOfSequence(int64_t i) const {
  RequireIndex(i, files_->sequence_count, "sequence");
  // The last d with DocIndex(d) <= i (DocIndex(0) = 0 <= i < DocIndex(last)).
  int64_t lo = 0;
  int64_t hi = files_->document_entries - 1;  // DocIndex(hi) > i
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (files_->DocIndex(mid) <= i) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

void MegatronIndexedDataset::ReadTokens(int64_t first_token, int64_t count, int64_t* out) const {
  if (first_token < 0 || count < 0 || first_token > files_->total_tokens ||
      count > files_->total_tokens - first_token) {
    throw std::out_of_range(fmt::format("{}: tokens [{}, {} + {}) are outside the {} tokens of the file",
                                        files_->bin_path, first_token, first_token, count, files_->total_tokens));
  }
  if (count == 0) return;
  const uint8_t* src = files_->bin.data() + first_token * files_->itemsize;
  switch (files_->dtype) {
    case MegatronDType::kUint8: ConvertTokens<uint8_t>(src, count, out); return;
    case MegatronDType::kInt8: ConvertTokens<int8_t>(src, count, out); return;
    case MegatronDType::kInt16: ConvertTokens<int16_t>(src, count, out); return;
    case MegatronDType::kUint16: ConvertTokens<uint16_t>(src, count, out); return;
    case MegatronDType::kInt32: ConvertTokens<int32_t>(src, count, out); return;
    case MegatronDType::kInt64: ConvertTokens<int64_t>(src, count, out); return;
    case MegatronDType::kFloat32:
    case MegatronDType::kFloat64: break;
  }
  throw std::logic_error("MegatronIndexedDataset::ReadTokens: a float dtype passed Open");
}

StatusOr<std::vector<int64_t>> MegatronIndexedDataset::Sequence(int64_t i) const {
  if (i < 0 || i >= files_->sequence_count) {
    return Status::InvalidArgument(fmt::format("{}: sequence {} is outside the corpus's {} sequences [0, {})",
                                               files_->idx_path, i, files_->sequence_count, files_->sequence_count));
  }
  std::vector<int64_t> tokens(static_cast<size_t>(files_->Length(i)));
  ReadTokens(files_->TokenOffset(i), files_->Length(i), tokens.data());
  return tokens;
}

StatusOr<std::vector<int64_t>> MegatronIndexedDataset::Document(int64_t d) const {
  if (d < 0 || d >= document_count()) {
    return Status::InvalidArgument(fmt::format("{}: document {} is outside the corpus's {} documents [0, {})",
                                               files_->idx_path, d, document_count(), document_count()));
  }
  std::vector<int64_t> tokens(static_cast<size_t>(DocumentLength(d)));
  ReadTokens(DocumentTokenOffset(d), DocumentLength(d), tokens.data());
  return tokens;
}

Status MegatronIndexedDataset::CheckDocumentTokenIds(int64_t d, int64_t vocab_size) const {
  if (d < 0 || d >= document_count()) {
    return Status::InvalidArgument(fmt::format("{}: document {} is outside the corpus's {} documents [0, {})",
                                               files_->idx_path, d, document_count(), document_count()));
  }
  const int64_t first = DocumentTokenOffset(d);
  const int64_t count = DocumentLength(d);
  if (count == 0) return Status::Ok();
  const uint8_t* src = files_->bin.data() + first * files_->itemsize;
  int64_t bad = -1;
  switch (files_->dtype) {
    case MegatronDType::kUint8: bad = FindBadToken<uint8_t>(src, count, vocab_size); break;
    case MegatronDType::kInt8: bad = FindBadToken<int8_t>(src, count, vocab_size); break;
    case MegatronDType::kInt16: bad = FindBadToken<int16_t>(src, count, vocab_size); break;
    case MegatronDType::kUint16: bad = FindBadToken<uint16_t>(src, count, vocab_size); break;
    case MegatronDType::kInt32: bad = FindBadToken<int32_t>(src, count, vocab_size); break;
    case MegatronDType::kInt64: bad = FindBadToken<int64_t>(src, count, vocab_size); break;
    case MegatronDType::kFloat32:
    case MegatronDType::kFloat64: break;
  }
  if (bad < 0) return Status::Ok();
  int64_t value = 0;
  ReadTokens(first + bad, 1, &value);
  // The sequence holding the token: the last of the document's sequences
  // starting at or before it.
  const auto [s_begin, s_end] = DocumentSequences(d);
  int64_t seq = s_begin;
  for (int64_t i = s_begin; i < s_end; ++i) {
    if (files_->TokenOffset(i) <= first + bad) seq = i;
  }
  return Status::InvalidArgument(fmt::format(
      "{}: document {}, token {} (sequence {}, token {}) is id {}, outside the vocabulary [0, {}); the corpus was "
      "tokenized with another tokenizer: set the model's vocab_size to that tokenizer's, or re-tokenize the corpus "
      "with the model's tokenizer",
      files_->bin_path, d, bad, seq, first + bad - files_->TokenOffset(seq), value, vocab_size));
}

Status MegatronIndexedDataset::CheckTokenIds(int64_t vocab_size) const {
  if (vocab_size <= 0) {
    return Status::InvalidArgument(fmt::format("{}: vocab_size {} must be positive", files_->bin_path, vocab_size));
  }
  for (int64_t d = 0; d < document_count(); ++d) {
    MAESTRO_RETURN_IF_ERROR(CheckDocumentTokenIds(d, vocab_size));
  }
  return Status::Ok();
}

}  // namespace maestro::datasets
