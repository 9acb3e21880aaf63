// SPDX-License-Identifier: Apache-2.0
// Megatron-LM's indexed dataset (the ".bin + .idx" pair that
// tools/preprocess_data.py writes and megatron/core/datasets/indexed_dataset.py
// reads): a torch-free reader, the samples Maestro cuts from it, and a writer
// for tests and fixtures. The format and the sample rules are in docs/data.md
// ("Megatron indexed corpora").
//
//   <prefix>.idx  b"MMIDIDX\x00\x00" | version u64 (1) | dtype code u8
//                 | sequence_count u64 | document_count u64
//                 | sequence_lengths i32[sequence_count]
//                 | sequence_pointers i64[sequence_count]  (byte offsets into .bin)
//                 | document_indices i64[document_count]   (0, ..., sequence_count)
//                 | [sequence_modes i8[sequence_count]]    (multimodal corpora only)
//   <prefix>.bin  the tokens of every sequence back to back, in the dtype.
//   All numbers little-endian. A document is the run of sequences
//   document_indices[d] .. document_indices[d+1]; there are document_count - 1
//   documents.
//
// Owns: MegatronDType, MegatronIndexedDataset (mmap reader, validation, token
// reads, vocab check), MegatronSamples (the "pack" and "split" sample rules),
// MegatronIndexedDatasetWriter / WriteMegatronIndexedDataset.
// Where: megatron_indexed.cc (the dtypes, the reader and its validation),
// megatron_samples.cc (MegatronSamples), megatron_writer.cc (the writer).
// May call: base (Status, files), POSIX (open, mmap, pread). No libtorch.
// Thread safety: MegatronIndexedDataset and MegatronSamples are immutable after
// Open / Build; every const method may be called from many threads. Copies
// share the read-only mappings. The writer is single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace maestro::datasets {

// The dtype codes of Megatron-LM's DType enum (indexed_dataset.py).
enum class MegatronDType : uint8_t {
  kUint8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUint16 = 8,
};

// "uint16", ...; "unknown" for a code outside 1..8.
const char* MegatronDTypeName(MegatronDType dtype);
// Bytes per value (1, 2, 4 or 8); 0 for a code outside 1..8.
int MegatronDTypeSize(MegatronDType dtype);
// True for the six integer dtypes (the ones a token corpus can use).
bool MegatronDTypeIsInteger(MegatronDType dtype);

inline constexpr char kMegatronIdxMagic[] = "MMIDIDX\x00\x00";  // 9 bytes (plus the literal's own NUL)
inline constexpr size_t kMegatronIdxMagicSize = 9;
inline constexpr uint64_t kMegatronIdxVersion = 1;
inline constexpr size_t kMegatronIdxHeaderSize = 34;  // magic 9 + version 8 + dtype 1 + counts 16
// The label of a target position that carries no loss (PyTorch's ignore_index).
inline constexpr int64_t kIgnoreLabel = -100;

// A validated, memory-mapped Megatron corpus. Nothing of the .bin is read at
// Open; tokens are read from the mapping on demand.
class MegatronIndexedDataset {
 public:
  // `prefix_or_path` is the prefix (".../my-corpus_text_document") or either
  // file of the pair (a path ending in ".idx" or ".bin"). Maps both files
  // read-only and checks the whole index against both file sizes: magic,
  // version, dtype code (integer dtypes only: a token corpus), counts against
  // the .idx size, document indices (start at 0, never decrease, end at
  // sequence_count), every sequence inside the .bin and back to back with the
  // one before it, and the .bin size equal to the bytes the index describes.
  // NotFound names the missing file; Corruption / InvalidArgument name the
  // file, what is wrong, the document or sequence, and the fix.
  static StatusOr<MegatronIndexedDataset> Open(const std::string& prefix_or_path);
  static StatusOr<MegatronIndexedDataset> Open(const std::string& idx_path, const std::string& bin_path);

  const std::string& idx_path() const;
  const std::string& bin_path() const;
  MegatronDType dtype() const;
  int64_t sequence_count() const;
  int64_t document_count() const;  // document_indices entries - 1
  int64_t total_tokens() const;    // tokens in the .bin
  bool has_sequence_modes() const;

  // REQUIRES for the inline accessors: 0 <= i < sequence_count(),
  // 0 <= d < document_count() (std::out_of_range otherwise).
  int64_t SequenceLength(int64_t i) const;
  int64_t SequenceTokenOffset(int64_t i) const;  // first token's index among all tokens of the .bin
  int8_t SequenceMode(int64_t i) const;          // 0 when the index has no modes
  // [first, last) sequence indices of document d.
  std::pair<int64_t, int64_t> DocumentSequences(int64_t d) const;
  int64_t DocumentLength(int64_t d) const;       // tokens (all its sequences)
  int64_t DocumentTokenOffset(int64_t d) const;  // = total_tokens() for an empty last document
  // The document holding sequence i (the last one when empty documents share
  // its start).
  int64_t DocumentOfSequence(int64_t i) const;

  // Token ids as int64 (converted from the stored dtype). InvalidArgument on
  // an index out of range, naming the file and the range.
  StatusOr<std::vector<int64_t>> Sequence(int64_t i) const;
  StatusOr<std::vector<int64_t>> Document(int64_t d) const;
  // Copies tokens [first_token, first_token + count) of the .bin's token
  // stream into `out` (count int64 values). REQUIRES: the range lies within
  // [0, total_tokens()) (std::out_of_range otherwise).
  void ReadTokens(int64_t first_token, int64_t count, int64_t* out) const;

  // Every token id in [0, vocab_size). InvalidArgument on the first that is
  // not, naming the .bin, the document, the position in the document, the
  // sequence and the id, and the fix.
  Status CheckTokenIds(int64_t vocab_size) const;
  Status CheckDocumentTokenIds(int64_t d, int64_t vocab_size) const;

  struct Files;  // the two mappings (defined in the .cc)

 private:
  explicit MegatronIndexedDataset(std::shared_ptr<const Files> files) : files_(std::move(files)) {}
  std::shared_ptr<const Files> files_;
};

// How documents become samples of seq_len inputs and seq_len targets. A
// sample is a window of seq_len + 1 tokens: inputs are its first seq_len,
// targets its last seq_len (the next token of each input).
enum class MegatronSampleRule {
  // Documents (each followed by eos_id when set) back to back in one stream;
  // sample k is the window starting at stream token k * seq_len (consecutive
  // samples share one token, as Megatron's GPTDataset without shuffling).
  // (stream_tokens - 1) / seq_len samples; the partial tail is dropped.
  kPack,
  // Each document (followed by eos_id when set) on its own, cut into windows
  // starting at k * seq_len within the document; the short last window is
  // padded with pad_id and its padded targets are kIgnoreLabel. A document
  // of fewer than 2 tokens (eos included) gives no sample.
  kSplit,
};

struct MegatronSampleOptions {
  MegatronSampleRule rule = MegatronSampleRule::kPack;
  int64_t seq_len = 0;            // > 0
  std::optional<int64_t> eos_id;  // appended after every document (empty ones included)
  int64_t pad_id = 0;             // kSplit: fills the inputs past a document's end
  int64_t vocab_size = 0;         // > 0: eos_id and pad_id must be below it
};

// One run of a sample's real tokens.
struct MegatronSamplePiece {
  int64_t document = 0;
  int64_t first_token = 0;  // index in the .bin's token stream; -1 for the eos piece
  int64_t count = 0;        // tokens; 1 for the eos piece
  bool eos = false;         // the piece is eos_id alone
};

// A sample as the trainer takes it.
struct MegatronTokenSample {
  std::vector<int64_t> input_ids;  // (seq_len)
  std::vector<int64_t> labels;     // (seq_len); kIgnoreLabel where masked
  int64_t real_tokens = 0;         // input positions that are not padding
  int64_t loss_tokens = 0;         // labels that are not kIgnoreLabel
};

// The samples of one corpus under one rule: sample id -> token ranges,
// without materialising the token stream. kPack keeps nothing in memory
// (sample -> document is a binary search over the mapped index); kSplit keeps
// one int64 per document (the first sample id of each document). Reading a
// sample costs O(log documents + seq_len).
class MegatronSamples {
 public:
  // InvalidArgument on seq_len <= 0, a negative eos_id / pad_id, one at or
  // above vocab_size, or a corpus with a sequence whose mode is not 0 (not
  // text), naming the .idx and the sequence.
  static StatusOr<MegatronSamples> Build(MegatronIndexedDataset dataset, MegatronSampleOptions options);

  int64_t size() const { return sample_count_; }
  int64_t seq_len() const { return options_.seq_len; }
  const MegatronSampleOptions& options() const { return options_; }
  const MegatronIndexedDataset& dataset() const { return dataset_; }

  // REQUIRES for all below: 0 <= k < size() (std::out_of_range otherwise).
  // Input positions holding real tokens (kPack: seq_len; kSplit: fewer on a
  // document's last window): the "text" token count of the sample index.
  int64_t RealTokens(int64_t k) const;
  int64_t LossTokens(int64_t k) const;  // targets that carry loss
  // The real tokens of window k in order (documents, eos pieces).
  std::vector<MegatronSamplePiece> Pieces(int64_t k) const;
  // Window k into `tokens` (seq_len + 1 values; pad_id past the real ones);
  // returns the number of real tokens (seq_len + 1 for kPack).
  int64_t ReadWindow(int64_t k, int64_t* tokens) const;
  // Window k as inputs and labels (reuses `out`'s buffers).
  void ReadSample(int64_t k, MegatronTokenSample* out) const;
  StatusOr<MegatronTokenSample> Sample(int64_t k) const;  // InvalidArgument when k is out of range
  // RealTokens of every sample, in id order.
  std::vector<int64_t> TokenCounts() const;

 private:
  MegatronSamples(MegatronIndexedDataset dataset, MegatronSampleOptions options)
      : dataset_(std::move(dataset)), options_(std::move(options)) {}
  void CheckId(int64_t k) const;
  int64_t ExtendedLength(int64_t d) const;  // document tokens + 1 with eos
  int64_t StreamStart(int64_t d) const;     // kPack: where document d starts in the stream
  int64_t DocumentAtStream(int64_t pos) const;
  int64_t DocumentOfSplitSample(int64_t k) const;

  MegatronIndexedDataset dataset_;
  MegatronSampleOptions options_;
  int64_t sample_count_ = 0;
  std::vector<int64_t> first_sample_;  // kSplit: first sample id of each document, plus the total
};

// Writes a corpus in Megatron's format, as Megatron's IndexedDatasetBuilder +
// _IndexWriter do: sequences back to back in <prefix>.bin, pointers from the
// lengths, document_indices starting with 0 and one entry per finished
// document. Both files are written to "<path>.tmp" and renamed by Finalize.
class MegatronIndexedDatasetWriter {
 public:
  // Integer dtypes only. `with_sequence_modes` writes the multimodal tail.
  static StatusOr<MegatronIndexedDatasetWriter> Create(const std::string& prefix, MegatronDType dtype,
                                                       bool with_sequence_modes = false);
  MegatronIndexedDatasetWriter(MegatronIndexedDatasetWriter&&) noexcept;
  MegatronIndexedDatasetWriter& operator=(MegatronIndexedDatasetWriter&&) noexcept;
  ~MegatronIndexedDatasetWriter();  // an unfinished writer removes its .tmp files

  // Appends one sequence to the current document. InvalidArgument when a
  // token does not fit the dtype (naming the sequence and position).
  Status AddSequence(const int64_t* tokens, size_t count, int8_t mode = 0);
  Status EndDocument();
  Status AddDocument(const std::vector<int64_t>& tokens);  // AddSequence + EndDocument
  // Writes the .idx and renames both files into place.
  Status Finalize();

  struct State;

 private:
  explicit MegatronIndexedDatasetWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// One sequence per document (as preprocess_data.py without sentence
// splitting). Writes <prefix>.bin and <prefix>.idx.
Status WriteMegatronIndexedDataset(const std::string& prefix, const std::vector<std::vector<int64_t>>& documents,
                                   MegatronDType dtype);

}  // namespace maestro::datasets
