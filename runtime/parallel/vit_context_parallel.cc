// SPDX-License-Identifier: Apache-2.0
// The split of an encoder's visual sequence over a CP group, its
// block-diagonal attention, and the all-gathers it needs.
#include "runtime/parallel/vit_context_parallel.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "runtime/parallel/context_parallel.h"
#include "runtime/torch_compat.h"

namespace maestro::runtime {

EncoderSequenceSplit::EncoderSequenceSplit(std::vector<int64_t> segment_lengths, int cp_rank, int cp_size)
    : lengths_(std::move(segment_lengths)), cp_rank_(cp_rank), cp_size_(cp_size) {
  TORCH_CHECK(!lengths_.empty() && cp_size >= 1 && cp_rank >= 0 && cp_rank < cp_size, "EncoderSequenceSplit: segments ",
              lengths_.size(), ", cp rank ", cp_rank, " of ", cp_size);
  for (int64_t n : lengths_) {
    TORCH_CHECK(n >= 1, "EncoderSequenceSplit: a segment of ", n, " tokens");
    starts_.push_back(total_);
    total_ += n;
  }
  chunk_ = (total_ + cp_size - 1) / cp_size;
  const int64_t first = cp_rank * chunk_, end = first + chunk_;
  for (size_t s = 0; s < lengths_.size(); ++s) {
    const int64_t a = std::max(first, starts_[s]), b = std::min(end, starts_[s] + lengths_[s]);
    if (a < b) pieces_.push_back({a - first, b - a, starts_[s], lengths_[s]});
  }
  padding_ = end - std::max(first, std::min(end, total_));
}

torch::Tensor EncoderSequenceSplit::Local(const torch::Tensor& full) const {
  TORCH_CHECK(full.size(0) == total_, "EncoderSequenceSplit::Local: ", full.size(0), " rows for ", total_, " tokens");
  const int64_t first = std::min(total_, cp_rank_ * chunk_);
  auto mine = full.narrow(0, first, chunk_ - padding_);
  if (padding_ == 0) return mine;
  std::vector<int64_t> shape = full.sizes().vec();
  shape[0] = padding_;
  return torch::cat({mine, torch::zeros(shape, full.options())}, 0);
}

torch::Tensor EncoderSequenceSplit::DropPadding(const torch::Tensor& gathered) const {
  TORCH_CHECK(gathered.size(0) == chunk_ * cp_size_, "EncoderSequenceSplit::DropPadding: ", gathered.size(0),
              " rows for ", cp_size_, " chunks of ", chunk_);
  return gathered.narrow(0, 0, total_);
}

torch::Tensor EncoderSequenceSplit::LocalOffsetsInSegment(torch::Device device) const {
  std::vector<int64_t> offsets(static_cast<size_t>(chunk_), 0);
  for (const Piece& p : pieces_) {
    const int64_t offset = cp_rank_ * chunk_ + p.local_start - p.segment_start;
    for (int64_t i = 0; i < p.length; ++i) offsets[static_cast<size_t>(p.local_start + i)] = offset + i;
  }
  return torch::tensor(offsets, torch::kInt64).to(device);
}

torch::Tensor EncoderSequenceSplit::Attention(const torch::Tensor& q, const torch::Tensor& k,
                                              const torch::Tensor& v) const {
  TORCH_CHECK(q.dim() == 4 && q.size(0) == 1 && q.size(2) == chunk_ && k.size(2) == chunk_ * cp_size_ &&
                  v.size(2) == chunk_ * cp_size_,
              "EncoderSequenceSplit::Attention: q ", q.sizes(), ", k ", k.sizes(), " for chunks of ", chunk_, " x ",
              cp_size_);
  std::vector<torch::Tensor> parts;  // (1, H, rows, D) each, in local order
  size_t i = 0;
  while (i < pieces_.size()) {
    const Piece& p = pieces_[i];
    // Consecutive whole segments of one length attend as one batch (B = segments).
    size_t j = i;
    if (p.length == p.segment_length) {
      while (j + 1 < pieces_.size() && pieces_[j + 1].length == p.length && pieces_[j + 1].segment_length == p.length)
        ++j;
    }
    const int64_t n = static_cast<int64_t>(j - i + 1), rows = n * p.length;
    const int64_t h = q.size(1), d = q.size(3);
    // (1, H, n * L, D) -> (n, H, L, D)
    auto batch = [&](const torch::Tensor& t, int64_t start, int64_t length) {
      return t.narrow(2, start, n * length).reshape({h, n, length, d}).transpose(0, 1);
    };
    auto y = compat::ScaledDotProductAttention(batch(q, p.local_start, p.length),
                                               batch(k, p.segment_start, p.segment_length),
                                               batch(v, p.segment_start, p.segment_length), /*causal=*/false);
    parts.push_back(y.transpose(0, 1).reshape({1, h, rows, d}));
    i = j + 1;
  }
  if (padding_ > 0) {
    auto zeros = torch::zeros({1, q.size(1), padding_, q.size(3)}, q.options());
    // A rank of padding only still joins the k/v gathers' backward (each a
    // collective): its (zero) rows depend on k and v through empty sums.
    if (pieces_.empty()) zeros = zeros + (k.narrow(2, 0, 0).sum() + v.narrow(2, 0, 0).sum());
    parts.push_back(zeros);
  }
  return parts.size() == 1 ? parts[0] : torch::cat(parts, 2);
}

namespace {
ContextParallelTokenCounts& TokenCounts() {
  static ContextParallelTokenCounts counts;
  return counts;
}
}  // namespace

const ContextParallelTokenCounts& ContextParallelTokensOfThisProcess() {
  return TokenCounts();
}

void CountContextParallelForward(const EncoderSequenceSplit& split) {
  auto& counts = TokenCounts();
  counts.total += split.total();
  counts.mine += split.chunk() - split.padding();
  counts.padding += split.padding();
}

torch::Tensor GatherKeysOrValues(const torch::Tensor& local, const EncoderContextParallel& cp) {
  return GatherSequence(local, 2, *cp.group);
}

torch::Tensor GatherRows(const torch::Tensor& local, launcher::Backend& group) {
  return GatherSequence(local, 0, group);
}

}  // namespace maestro::runtime
