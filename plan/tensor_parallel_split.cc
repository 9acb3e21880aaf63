// SPDX-License-Identifier: Apache-2.0
#include "plan/encoder_tp_split.h"

#include <fmt/format.h>

#include <string>
#include <utility>
#include <vector>

namespace maestro::plan {
namespace {

int64_t ExtraInteger(const ModelDesc& m, const char* key) {
  auto it = m.extra.find(key);
  return it != m.extra.end() && it->second > 0 ? static_cast<int64_t>(it->second) : 0;
}

}  // namespace

Status CheckEncoderTensorParallelSplit(const ModelDesc& m, int tp) {
  if (tp < 1) return Status::InvalidArgument(fmt::format("tensor parallelism: tp = {} must be >= 1", tp));
  std::vector<std::pair<const char*, int64_t>> must_divide;
  switch (m.kind) {
    case ModelKind::kVit: {
      must_divide = {{"heads", m.heads}, {"ffn_hidden", m.ffn_hidden}};
      const int64_t merge = ExtraInteger(m, "spatial_merge");
      if (merge > 0) {
        const int64_t hidden = ExtraInteger(m, "merger_hidden");
        must_divide.push_back({"merger_hidden", hidden > 0 ? hidden : merge * merge * m.hidden});
      }
      break;
    }
    case ModelKind::kAudioEncoder: must_divide = {{"heads", m.heads}, {"ffn_hidden", m.ffn_hidden}}; break;
    case ModelKind::kProjector: must_divide = {{"out_dim", m.out_dim}}; break;
    case ModelKind::kDecoder:
      return Status::InvalidArgument("CheckEncoderTensorParallelSplit: a decoder is not an encoder");
  }
  std::string sizes;
  for (const auto& [name, value] : must_divide) {
    sizes += fmt::format("{}{} = {}", sizes.empty() ? "" : ", ", name, value);
  }
  for (const auto& [name, value] : must_divide) {
    if (value % tp != 0) {
      return Status::InvalidArgument(fmt::format(
          "tensor parallelism of the {} ({}): tp = {} must divide {}; pick a tp that divides them all (or tp = 1)",
          ModelKindName(m.kind), sizes, tp, name));
    }
  }
  return Status::Ok();
}

}  // namespace maestro::plan
