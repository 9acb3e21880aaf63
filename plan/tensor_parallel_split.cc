// SPDX-License-Identifier: Apache-2.0
#include "plan/tensor_parallel_split.h"

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

// The sizes TP must divide for `m`, by the runtime's sharding code.
std::vector<std::pair<const char*, int64_t>> SizesTpMustDivide(const ModelDesc& m) {
  std::vector<std::pair<const char*, int64_t>> must_divide;
  switch (m.kind) {
    case ModelKind::kDecoder:
      must_divide = {
          {"heads", m.heads}, {"kv_heads", m.kv_heads != 0 ? m.kv_heads : m.heads}, {"ffn_hidden", m.ffn_hidden}};
      if (m.experts > 0) {
        must_divide.push_back({"moe_ffn_hidden", m.moe_ffn_hidden != 0 ? m.moe_ffn_hidden : m.ffn_hidden});
        must_divide.push_back({"shared_expert_ffn_hidden", ExtraInteger(m, "shared_expert_ffn_hidden")});
      }
      break;
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
  }
  return must_divide;
}

}  // namespace

Status CheckTensorParallelSplit(const ModelDesc& m, int tp) {
  if (tp < 1) return Status::InvalidArgument(fmt::format("tensor parallelism: tp = {} must be >= 1", tp));
  const std::vector<std::pair<const char*, int64_t>> must_divide = SizesTpMustDivide(m);
  for (const auto& [name, value] : must_divide) {
    if (value % tp != 0) {
      std::string sizes;  // the message only (the planner asks millions of times)
      for (const auto& [other, size] : must_divide) {
        sizes += fmt::format("{}{} = {}", sizes.empty() ? "" : ", ", other, size);
      }
      return Status::InvalidArgument(fmt::format(
          "tensor parallelism of the {} ({}): tp = {} must divide {}; pick a tp that divides them all (or tp = 1)",
          ModelKindName(m.kind), sizes, tp, name));
    }
  }
  return Status::Ok();
}

Status CheckEncoderTensorParallelSplit(const ModelDesc& m, int tp) {
  if (m.kind == ModelKind::kDecoder) {
    return Status::InvalidArgument("CheckEncoderTensorParallelSplit: a decoder is not an encoder");
  }
  return CheckTensorParallelSplit(m, tp);
}

Status CheckExpertParallelSplit(const ModelDesc& m, int ep) {
  if (ep == 1) return Status::Ok();
  if (ep < 1 || m.kind != ModelKind::kDecoder || m.experts <= 0 || m.experts % ep != 0) {
    return Status::InvalidArgument(fmt::format(
        "expert parallelism over {} ranks needs a MoE decoder whose experts ({}) it divides", ep, m.experts));
  }
  return Status::Ok();
}

}  // namespace maestro::plan
