// SPDX-License-Identifier: Apache-2.0
// Megatron indexed corpora: the writer (MegatronIndexedDatasetWriter,
// WriteMegatronIndexedDataset, declared in megatron_indexed.h), for tests and
// fixtures: the .bin streamed to a temporary file, the .idx exactly as
// Megatron-LM's _IndexWriter writes it, both in place only at Finalize. See
// docs/data.md. May call: base (Status, files), POSIX. No libtorch.
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "base/files.h"
#include "datasets/megatron_indexed.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "Megatron indexed datasets are little-endian; this writer assumes a little-endian host"
#endif

namespace maestro::datasets {

struct MegatronIndexedDatasetWriter::State {
  std::string prefix;
  MegatronDType dtype = MegatronDType::kUint16;
  bool with_modes = false;
  std::FILE* bin = nullptr;
  std::vector<int32_t> lengths;
  std::vector<int8_t> modes;
  std::vector<int64_t> document_indices{0};
  std::vector<uint8_t> buffer;
  bool finalized = false;

  std::string BinTmp() const { return prefix + ".bin.tmp"; }
  ~State() {
    if (bin != nullptr) std::fclose(bin);
    if (!finalized) std::remove(BinTmp().c_str());
  }
};

MegatronIndexedDatasetWriter::MegatronIndexedDatasetWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}
MegatronIndexedDatasetWriter::MegatronIndexedDatasetWriter(MegatronIndexedDatasetWriter&&) noexcept = default;
MegatronIndexedDatasetWriter& MegatronIndexedDatasetWriter::operator=(MegatronIndexedDatasetWriter&&) noexcept =
    default;
MegatronIndexedDatasetWriter::~MegatronIndexedDatasetWriter() = default;

StatusOr<MegatronIndexedDatasetWriter> MegatronIndexedDatasetWriter::Create(const std::string& prefix,
                                                                            MegatronDType dtype,
                                                                            bool with_sequence_modes) {
  if (!MegatronDTypeIsInteger(dtype)) {
    return Status::InvalidArgument(
        fmt::format("{}: cannot write a token corpus with dtype {} (code {}); use an "
                    "integer dtype (uint16 for vocabularies under 65500, else int32)",
                    prefix, MegatronDTypeName(dtype), static_cast<int>(dtype)));
  }
  auto state = std::make_unique<State>();
  state->prefix = prefix;
  state->dtype = dtype;
  state->with_modes = with_sequence_modes;
  state->bin = std::fopen(state->BinTmp().c_str(), "wb");
  if (state->bin == nullptr) {
    return Status::IOError(fmt::format("{}: cannot create: {}", state->BinTmp(), std::strerror(errno)));
  }
  return MegatronIndexedDatasetWriter(std::move(state));
}

namespace {
template <typename T>
bool PackTokens(const int64_t* tokens, size_t count, uint8_t* out, size_t* bad) {
  constexpr int64_t kMin = static_cast<int64_t>(std::numeric_limits<T>::min());
  constexpr int64_t kMax = static_cast<int64_t>(std::numeric_limits<T>::max());
  for (size_t i = 0; i < count; ++i) {
    if (tokens[i] < kMin || tokens[i] > kMax) {
      *bad = i;
      return false;
    }
    const T v = static_cast<T>(tokens[i]);
    std::memcpy(out + i * sizeof(T), &v, sizeof(T));
  }
  return true;
}
}  // namespace

Status MegatronIndexedDatasetWriter::AddSequence(const int64_t* tokens, size_t count, int8_t mode) {
  State& s = *state_;
  if (s.finalized) return Status::FailedPrecondition(fmt::format("{}: the writer is finalized", s.prefix));
  if (count > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return Status::InvalidArgument(fmt::format("{}: sequence {} has {} tokens; Megatron stores lengths as int32",
                                               s.prefix, s.lengths.size(), count));
  }
  const size_t itemsize = static_cast<size_t>(MegatronDTypeSize(s.dtype));
  s.buffer.resize(count * itemsize);
  size_t bad = 0;
  bool ok = true;
  switch (s.dtype) {
    case MegatronDType::kUint8: ok = PackTokens<uint8_t>(tokens, count, s.buffer.data(), &bad); break;
    case MegatronDType::kInt8: ok = PackTokens<int8_t>(tokens, count, s.buffer.data(), &bad); break;
    case MegatronDType::kInt16: ok = PackTokens<int16_t>(tokens, count, s.buffer.data(), &bad); break;
    case MegatronDType::kUint16: ok = PackTokens<uint16_t>(tokens, count, s.buffer.data(), &bad); break;
    case MegatronDType::kInt32: ok = PackTokens<int32_t>(tokens, count, s.buffer.data(), &bad); break;
    case MegatronDType::kInt64: ok = PackTokens<int64_t>(tokens, count, s.buffer.data(), &bad); break;
    case MegatronDType::kFloat32:
    case MegatronDType::kFloat64: ok = false; break;
  }
  if (!ok) {
    return Status::InvalidArgument(fmt::format("{}: sequence {}, token {} is id {}, which does not fit dtype {}",
                                               s.prefix, s.lengths.size(), bad, tokens[bad],
                                               MegatronDTypeName(s.dtype)));
  }
  if (!s.buffer.empty() && std::fwrite(s.buffer.data(), 1, s.buffer.size(), s.bin) != s.buffer.size()) {
    return Status::IOError(fmt::format("{}: write failed: {}", s.BinTmp(), std::strerror(errno)));
  }
  s.lengths.push_back(static_cast<int32_t>(count));
  s.modes.push_back(mode);
  return Status::Ok();
}

Status MegatronIndexedDatasetWriter::EndDocument() {
  state_->document_indices.push_back(static_cast<int64_t>(state_->lengths.size()));
  return Status::Ok();
}

Status MegatronIndexedDatasetWriter::AddDocument(const std::vector<int64_t>& tokens) {
  MAESTRO_RETURN_IF_ERROR(AddSequence(tokens.data(), tokens.size()));
  return EndDocument();
}

Status MegatronIndexedDatasetWriter::Finalize() {
  State& s = *state_;
  if (s.finalized) return Status::FailedPrecondition(fmt::format("{}: the writer is finalized", s.prefix));
  const bool flushed = std::fflush(s.bin) == 0 && ::fsync(::fileno(s.bin)) == 0;
  const int flush_errno = errno;
  const bool closed = std::fclose(s.bin) == 0;
  s.bin = nullptr;
  if (!flushed || !closed) {
    return Status::IOError(fmt::format("{}: write failed: {}", s.BinTmp(), std::strerror(flush_errno)));
  }
  // The .idx exactly as Megatron's _IndexWriter writes it.
  const uint64_t n = s.lengths.size();
  const uint64_t m = s.document_indices.size();
  std::string idx;
  idx.reserve(kMegatronIdxHeaderSize + n * 13 + m * 8);
  auto put = [&idx](const void* p, size_t bytes) { idx.append(static_cast<const char*>(p), bytes); };
  put(kMegatronIdxMagic, kMegatronIdxMagicSize);
  put(&kMegatronIdxVersion, 8);
  const uint8_t code = static_cast<uint8_t>(s.dtype);
  put(&code, 1);
  put(&n, 8);
  put(&m, 8);
  put(s.lengths.data(), n * 4);
  const int64_t itemsize = MegatronDTypeSize(s.dtype);
  int64_t pointer = 0;
  for (int32_t len : s.lengths) {
    put(&pointer, 8);
    pointer += static_cast<int64_t>(len) * itemsize;
  }
  put(s.document_indices.data(), m * 8);
  if (s.with_modes) put(s.modes.data(), n);
  MAESTRO_RETURN_IF_ERROR(WriteFileAtomically(s.prefix + ".idx", idx));
  if (std::rename(s.BinTmp().c_str(), (s.prefix + ".bin").c_str()) != 0) {
    return Status::IOError(fmt::format("{}: cannot rename to {}.bin: {}", s.BinTmp(), s.prefix, std::strerror(errno)));
  }
  s.finalized = true;
  return Status::Ok();
}

Status WriteMegatronIndexedDataset(const std::string& prefix, const std::vector<std::vector<int64_t>>& documents,
                                   MegatronDType dtype) {
  MAESTRO_ASSIGN_OR_RETURN(MegatronIndexedDatasetWriter writer, MegatronIndexedDatasetWriter::Create(prefix, dtype));
  for (const auto& doc : documents) MAESTRO_RETURN_IF_ERROR(writer.AddDocument(doc));
  return writer.Finalize();
}

}  // namespace maestro::datasets
