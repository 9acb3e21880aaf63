// SPDX-License-Identifier: Apache-2.0
// Megatron indexed corpora: the samples Maestro cuts from a corpus
// (MegatronSamples, declared in megatron_indexed.h): the "pack" rule (one
// token stream, eos between documents, fixed windows) and the "split" rule
// (windows inside each document, padded), read through the reader of
// megatron_indexed.cc. See docs/data.md ("Megatron indexed corpora"). May
// call: base. No libtorch.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "datasets/megatron_indexed.h"

namespace maestro::datasets {

StatusOr<MegatronSamples> MegatronSamples::Build(MegatronIndexedDataset dataset, MegatronSampleOptions options) {
  const std::string& idx = dataset.idx_path();
  if (options.seq_len <= 0) {
    return Status::InvalidArgument(
        fmt::format("{}: seq_len {} must be positive (the tokens per sample)", idx, options.seq_len));
  }
  if (options.seq_len > std::numeric_limits<int32_t>::max()) {
    return Status::InvalidArgument(fmt::format("{}: seq_len {} is too large (at most 2^31 - 1)", idx, options.seq_len));
  }
  auto check_id = [&](const char* name, int64_t id) -> Status {
    if (id < 0) {
      return Status::InvalidArgument(fmt::format("{}: {} {} is negative; token ids start at 0", idx, name, id));
    }
    if (options.vocab_size > 0 && id >= options.vocab_size) {
      return Status::InvalidArgument(fmt::format("{}: {} {} is outside the vocabulary [0, {}); use the tokenizer's {}",
                                                 idx, name, id, options.vocab_size, name));
    }
    return Status::Ok();
  };
  if (options.eos_id) MAESTRO_RETURN_IF_ERROR(check_id("eos_id", *options.eos_id));
  MAESTRO_RETURN_IF_ERROR(check_id("pad_id", options.pad_id));
  if (dataset.has_sequence_modes()) {
    for (int64_t i = 0; i < dataset.sequence_count(); ++i) {
      if (dataset.SequenceMode(i) != 0) {
        return Status::InvalidArgument(fmt::format(
            "{}: sequence {} (document {}) has mode {}, not 0 (text); Maestro's text samples read text-only "
            "corpora: point the text data source at a corpus preprocessed without modes",
            idx, i, dataset.DocumentOfSequence(i), static_cast<int>(dataset.SequenceMode(i))));
      }
    }
  }
  MegatronSamples s(std::move(dataset), std::move(options));
  const int64_t documents = s.dataset_.document_count();
  const int64_t seq_len = s.options_.seq_len;
  if (s.options_.rule == MegatronSampleRule::kPack) {
    const int64_t stream = s.StreamStart(documents);
    s.sample_count_ = stream >= 1 ? (stream - 1) / seq_len : 0;
  } else {
    s.first_sample_.resize(static_cast<size_t>(documents) + 1);
    int64_t total = 0;
    for (int64_t d = 0; d < documents; ++d) {
      s.first_sample_[static_cast<size_t>(d)] = total;
      const int64_t len = s.ExtendedLength(d);
      if (len >= 2) total += (len - 2) / seq_len + 1;
    }
    s.first_sample_[static_cast<size_t>(documents)] = total;
    s.sample_count_ = total;
  }
  return s;
}

int64_t MegatronSamples::ExtendedLength(int64_t d) const {
  return dataset_.DocumentLength(d) + (options_.eos_id ? 1 : 0);
}

int64_t MegatronSamples::StreamStart(int64_t d) const {
  const int64_t tokens = d < dataset_.document_count() ? dataset_.DocumentTokenOffset(d) : dataset_.total_tokens();
  return tokens + (options_.eos_id ? d : 0);
}

int64_t MegatronSamples::DocumentAtStream(int64_t pos) const {
  // The last document d with StreamStart(d) <= pos (empty documents without
  // eos span nothing; the last of a run of equal starts holds pos).
  int64_t lo = 0;
  int64_t hi = dataset_.document_count();  // StreamStart(hi) = stream length > pos
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (StreamStart(mid) <= pos) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

int64_t MegatronSamples::DocumentOfSplitSample(int64_t k) const {
  // The last d with first_sample_[d] <= k (documents without samples share
  // the next one's first id; upper_bound skips them).
  const auto it = std::upper_bound(first_sample_.begin(), first_sample_.end(), k);
  return static_cast<int64_t>(it - first_sample_.begin()) - 1;
}

void MegatronSamples::CheckId(int64_t k) const {
  if (k < 0 || k >= sample_count_) {
    throw std::out_of_range(fmt::format("{}: sample {} is outside [0, {})", dataset_.idx_path(), k, sample_count_));
  }
}

int64_t MegatronSamples::RealTokens(int64_t k) const {
  CheckId(k);
  const int64_t seq_len = options_.seq_len;
  if (options_.rule == MegatronSampleRule::kPack) return seq_len;
  const int64_t d = DocumentOfSplitSample(k);
  const int64_t window = ExtendedLength(d) - (k - first_sample_[static_cast<size_t>(d)]) * seq_len;
  return std::min(window, seq_len);
}

int64_t MegatronSamples::LossTokens(int64_t k) const {
  CheckId(k);
  const int64_t seq_len = options_.seq_len;
  if (options_.rule == MegatronSampleRule::kPack) return seq_len;
  const int64_t d = DocumentOfSplitSample(k);
  const int64_t window = ExtendedLength(d) - (k - first_sample_[static_cast<size_t>(d)]) * seq_len;
  return std::min(window, seq_len + 1) - 1;
}

std::vector<MegatronSamplePiece> MegatronSamples::Pieces(int64_t k) const {
  CheckId(k);
  const int64_t seq_len = options_.seq_len;
  std::vector<MegatronSamplePiece> pieces;
  // One document's extended tokens [from, from + want) as pieces.
  auto take = [&](int64_t d, int64_t from, int64_t want) {
    const int64_t len = dataset_.DocumentLength(d);
    if (from < len && want > 0) {
      const int64_t c = std::min(want, len - from);
      pieces.push_back({d, dataset_.DocumentTokenOffset(d) + from, c, false});
      from += c;
      want -= c;
    }
    if (want > 0 && options_.eos_id && from == len) {
      pieces.push_back({d, -1, 1, true});
      --want;
    }
    return want;
  };
  if (options_.rule == MegatronSampleRule::kSplit) {
    const int64_t d = DocumentOfSplitSample(k);
    const int64_t from = (k - first_sample_[static_cast<size_t>(d)]) * seq_len;
    take(d, from, std::min(seq_len + 1, ExtendedLength(d) - from));
    return pieces;
  }
  const int64_t pos = k * seq_len;
  int64_t d = DocumentAtStream(pos);
  int64_t from = pos - StreamStart(d);
  int64_t want = seq_len + 1;
  while (want > 0) {
    want = take(d, from, want);
    ++d;
    from = 0;
  }
  return pieces;
}

int64_t MegatronSamples::ReadWindow(int64_t k, int64_t* tokens) const {
  CheckId(k);
  const int64_t seq_len = options_.seq_len;
  if (options_.rule == MegatronSampleRule::kPack && !options_.eos_id) {
    // The stream is the .bin itself.
    dataset_.ReadTokens(k * seq_len, seq_len + 1, tokens);
    return seq_len + 1;
  }
  int64_t n = 0;
  for (const MegatronSamplePiece& piece : Pieces(k)) {
    if (piece.eos) {
      tokens[n] = *options_.eos_id;
    } else {
      dataset_.ReadTokens(piece.first_token, piece.count, tokens + n);
    }
    n += piece.count;
  }
  std::fill(tokens + n, tokens + seq_len + 1, options_.pad_id);
  return n;
}

void MegatronSamples::ReadSample(int64_t k, MegatronTokenSample* out) const {
  const size_t seq_len = static_cast<size_t>(options_.seq_len);
  if (options_.rule == MegatronSampleRule::kPack && !options_.eos_id) {
    // The window converted once from the .bin; the labels are its last
    // seq_len tokens, copied while they are still in the cache.
    CheckId(k);
    out->input_ids.resize(seq_len + 1);
    out->labels.resize(seq_len);
    dataset_.ReadTokens(k * options_.seq_len, options_.seq_len + 1, out->input_ids.data());
    std::memcpy(out->labels.data(), out->input_ids.data() + 1, seq_len * sizeof(int64_t));
    out->input_ids.resize(seq_len);
    out->real_tokens = options_.seq_len;
    out->loss_tokens = options_.seq_len;
    return;
  }
  out->input_ids.resize(seq_len + 1);
  const int64_t real = ReadWindow(k, out->input_ids.data());
  out->labels.assign(out->input_ids.begin() + 1, out->input_ids.end());
  for (int64_t i = std::max<int64_t>(real - 1, 0); i < static_cast<int64_t>(seq_len); ++i) {
    out->labels[static_cast<size_t>(i)] = kIgnoreLabel;
  }
  out->input_ids.resize(seq_len);
  out->real_tokens = std::min<int64_t>(real, static_cast<int64_t>(seq_len));
  out->loss_tokens = real - 1;
}

StatusOr<MegatronTokenSample> MegatronSamples::Sample(int64_t k) const {
  if (k < 0 || k >= sample_count_) {
    return Status::InvalidArgument(fmt::format("{}: sample {} is outside the {} samples [0, {})", dataset_.idx_path(),
                                               k, sample_count_, sample_count_));
  }
  MegatronTokenSample sample;
  ReadSample(k, &sample);
  return sample;
}

std::vector<int64_t> MegatronSamples::TokenCounts() const {
  std::vector<int64_t> counts(static_cast<size_t>(sample_count_), options_.seq_len);
  if (options_.rule == MegatronSampleRule::kPack) return counts;
  for (int64_t d = 0; d + 1 < static_cast<int64_t>(first_sample_.size()); ++d) {
    const int64_t first = first_sample_[static_cast<size_t>(d)];
    const int64_t last = first_sample_[static_cast<size_t>(d) + 1];
    if (last == first) continue;
    const int64_t tail = ExtendedLength(d) - (last - 1 - first) * options_.seq_len;
    counts[static_cast<size_t>(last - 1)] = std::min(tail, options_.seq_len);
  }
  return counts;
}

}  // namespace maestro::datasets
