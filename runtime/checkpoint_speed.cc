// SPDX-License-Identifier: Apache-2.0
// One rank's state of a sharded checkpoint for `maestro-bench checkpoint`
// (see checkpoint_speed.h).
#include "runtime/checkpoint_speed.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <utility>

#include "base/checks.h"
#include "runtime/checkpoint_boxes.h"
#include "runtime/checkpoint_slices.h"
#include "runtime/models/encoders.h"
#include "runtime/parallel/tensor_parallel.h"
#include "runtime/replica_owners.h"
#include "runtime/torch_call.h"

namespace maestro::runtime {

namespace {

using datalayer::Box;

constexpr char kExpAvg[] = "adamw.exp_avg";
constexpr char kExpAvgSq[] = "adamw.exp_avg_sq";

// One parameter as this rank holds it: its TP slice (`parts` blocks along
// `dim`, this rank's slice of each, as checkpoint_slices.cc maps them).
struct HeldParameter {
  std::string name;
  std::vector<int64_t> global_shape;
  TensorParallelSplit split;
  int tp_rank = 0, tp_size = 1;
  torch::Tensor local;                // the parameter
  torch::Tensor exp_avg, exp_avg_sq;  // whole local moments (no ZeRO-1), else undefined
  bool tp_split() const { return split.sharded() && tp_size > 1; }

  // A box of the local tensor as (local part, global box) pairs.
  std::vector<std::pair<Box, Box>> Map(const Box& local_box) const {
    const int split_dim = tp_split() ? split.dim : -1;
    return LocalToGlobal(ShapeOf(local), split_dim, split.parts, tp_rank, tp_size).Map(local_box);
  }
};

// A run of a ZeRO-1 shard: elements [begin, end) of parameter `param`'s
// local tensor, at `at` in the shard's flat moments.
struct ShardRun {
  size_t param = 0;
  int64_t begin = 0, end = 0, at = 0;
};

}  // namespace

std::string CheckpointLayout::Name() const {
  return fmt::format("tp{}.dp{}{}", tp, dp, zero1 ? ".zero1" : "");
}

struct CheckpointSpeedRank::State {
  std::string component;
  CheckpointLayout layout;
  int tp_rank = 0, dp_rank = 0;
  std::vector<HeldParameter> params;
  torch::Tensor shard_exp_avg, shard_exp_avg_sq;  // ZeRO-1: this rank's flat range
  std::vector<ShardRun> runs;
  int64_t global_bytes = 0;
  std::vector<torch::Tensor> snapshot;
  std::vector<GroupOwner> owners;  // the rank that writes each parameter (runtime/replica_owners.h)

  // As checkpoint_slices.cc: every TP rank of the owner replica its slice of
  // a split parameter, the owner rank alone a whole one.
  bool WritesParameter(size_t i) const { return owners[i].Writes(dp_rank, tp_rank); }
};

CheckpointSpeedRank::CheckpointSpeedRank(std::unique_ptr<State> state) : state_(std::move(state)) {}
CheckpointSpeedRank::~CheckpointSpeedRank() = default;

namespace {

// ZeRO-1: the flat range of the concatenated local parameters that DP rank
// `dp_rank` of `dp` holds (near-equal ranges), as runs per parameter.
std::vector<ShardRun> ShardRuns(const std::vector<HeldParameter>& params, int dp_rank, int dp) {
  int64_t total = 0;
  for (const auto& p : params) total += p.local.numel();
  const int64_t per = (total + dp - 1) / dp;
  const int64_t lo = std::min(total, per * dp_rank), hi = std::min(total, per * (dp_rank + 1));
  std::vector<ShardRun> runs;
  int64_t start = 0, at = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t n = params[i].local.numel();
    const int64_t b = std::max(lo, start), e = std::min(hi, start + n);
    if (e > b) {
      runs.push_back({i, b - start, e - start, at});
      at += e - b;
    }
    start += n;
  }
  return runs;
}

torch::Tensor Filled(const std::vector<int64_t>& shape, torch::Generator& gen) {
  torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(torch::kFloat32));
  t.normal_(0.0, 0.02, gen);
  return t;
}

}  // namespace

StatusOr<std::unique_ptr<CheckpointSpeedRank>> CheckpointSpeedRank::Create(const plan::ModelDesc& desc,
                                                                           const std::string& component,
                                                                           const CheckpointLayout& layout, int rank,
                                                                           uint64_t seed) {
  if (layout.tp < 1 || layout.dp < 1 || rank < 0 || rank >= layout.world()) {
    return Status::InvalidArgument(fmt::format("CheckpointSpeedRank: rank {} of layout {}", rank, layout.Name()));
  }
  auto state = std::make_unique<State>();
  state->component = component;
  state->layout = layout;
  state->tp_rank = rank % layout.tp;
  state->dp_rank = rank / layout.tp;
  ModelBuildOptions build;
  build.device = torch::kMeta;  // names and shapes only
  MAESTRO_ASSIGN_OR_RETURN(auto meta, BuildModel(desc, build));
  torch::Generator gen = at::detail::createCPUGenerator(seed + static_cast<uint64_t>(rank));
  const bool whole_moments = !layout.zero1 || layout.dp == 1;
  MAESTRO_RETURN_IF_ERROR(TorchCall("CheckpointSpeedRank: allocating the state", [&] {
    torch::NoGradGuard guard;
    for (const auto& item : meta->named_parameters(/*recurse=*/true)) {
      HeldParameter p;
      p.name = item.key();
      p.global_shape = ShapeOf(item.value());
      p.split = TensorParallelSplitOf(p.name);
      p.tp_rank = state->tp_rank;
      p.tp_size = layout.tp;
      std::vector<int64_t> local = p.global_shape;
      if (p.tp_split()) {
        const auto d = static_cast<size_t>(p.split.dim);
        if (local[d] % (p.split.parts * layout.tp) != 0) {
          throw std::invalid_argument(fmt::format("TP {} does not split '{}'", layout.tp, p.name));
        }
        local[d] /= layout.tp;
      }
      p.local = Filled(local, gen);
      if (whole_moments) {
        p.exp_avg = Filled(local, gen);
        p.exp_avg_sq = Filled(local, gen).abs_();
      }
      int64_t numel = 1;
      for (int64_t s : p.global_shape) numel *= s;
      state->global_bytes += 3 * numel * static_cast<int64_t>(sizeof(float));
      state->params.push_back(std::move(p));
    }
    std::vector<GroupPiece> pieces;
    for (const auto& p : state->params) {
      pieces.push_back({static_cast<int64_t>(p.local.nbytes()) * (p.exp_avg.defined() ? 3 : 1), p.tp_split()});
    }
    state->owners = SpreadOverReplicaGroup(pieces, layout.dp, layout.tp);
    if (!whole_moments) {
      state->runs = ShardRuns(state->params, state->dp_rank, layout.dp);
      int64_t n = 0;
      for (const auto& r : state->runs) n += r.end - r.begin;
      state->shard_exp_avg = Filled({n}, gen);
      state->shard_exp_avg_sq = Filled({n}, gen).abs_();
    }
  }));
  return std::unique_ptr<CheckpointSpeedRank>(new CheckpointSpeedRank(std::move(state)));
}

int64_t CheckpointSpeedRank::state_bytes() const {
  int64_t n = 0;
  for (const auto& p : state_->params) {
    n += p.local.nbytes();
    if (p.exp_avg.defined()) n += p.exp_avg.nbytes() + p.exp_avg_sq.nbytes();
  }
  if (state_->shard_exp_avg.defined()) n += state_->shard_exp_avg.nbytes() + state_->shard_exp_avg_sq.nbytes();
  return n;
}

int64_t CheckpointSpeedRank::global_state_bytes() const {
  return state_->global_bytes;
}

std::string CheckpointSpeedRank::step_counter() const {
  return AdamStepCounter(state_->component);
}

void CheckpointSpeedRank::ReleaseSnapshot() {
  state_->snapshot.clear();
}

std::vector<datalayer::SliceToWrite> CheckpointSpeedRank::Pieces(bool own_copy) {
  State& s = *state_;
  s.snapshot.clear();
  std::vector<datalayer::SliceToWrite> out;
  torch::NoGradGuard guard;
  // A piece: `data` (a view of the state) made contiguous, copied when
  // own_copy (what CollectRankPieces' HostBytesOf does on the CPU).
  auto add = [&](const std::string& name, const HeldParameter& p, const Box& global, const torch::Tensor& data) {
    torch::Tensor bytes = data.contiguous();
    if (own_copy && bytes.is_alias_of(data)) bytes = bytes.clone();
    datalayer::SliceToWrite w;
    w.tensor = name;
    w.global_shape = p.global_shape;
    w.dtype = hf::TensorDType::kF32;
    w.box = global;
    w.bytes = std::string_view(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.nbytes()));
    out.push_back(std::move(w));
    s.snapshot.push_back(std::move(bytes));
  };
  auto add_whole = [&](const std::string& name, const HeldParameter& p, const torch::Tensor& local) {
    const std::vector<int64_t> shape = ShapeOf(local);
    for (const auto& [l, g] : p.Map(WholeBox(shape))) {
      add(name, p, g, Narrow(local, l, std::vector<int64_t>(shape.size(), 0)));
    }
  };
  for (size_t i = 0; i < s.params.size(); ++i) {
    const HeldParameter& p = s.params[i];
    if (!s.WritesParameter(i)) continue;
    add_whole(ModelTensorName(s.component, p.name), p, p.local);
    if (!p.exp_avg.defined()) continue;
    add_whole(MomentTensorName(s.component, kExpAvg, p.name), p, p.exp_avg);
    add_whole(MomentTensorName(s.component, kExpAvgSq, p.name), p, p.exp_avg_sq);
  }
  for (const ShardRun& r : s.runs) {
    const HeldParameter& p = s.params[r.param];
    if (!p.tp_split() && s.tp_rank != 0) continue;  // TP rank 0's moments are every TP rank's
    const std::vector<int64_t> shape = ShapeOf(p.local);
    int64_t cursor = r.at;
    for (const Box& run : datalayer::BoxesOfFlatRange(shape, r.begin, r.end)) {
      const int64_t n = run.elements();
      for (const auto& [moment, flat] :
           {std::pair{kExpAvg, s.shard_exp_avg}, std::pair{kExpAvgSq, s.shard_exp_avg_sq}}) {
        const torch::Tensor data = flat.narrow(0, cursor, n).view(run.lengths);
        for (const auto& [l, g] : p.Map(run)) {
          add(MomentTensorName(s.component, moment, p.name), p, g, Narrow(data, l, run.offsets));
        }
      }
      cursor += n;
    }
  }
  return out;  // views: `snapshot` holds views (and any contiguous copy), not the state's bytes again
}

Status CheckpointSpeedRank::Load(const datalayer::CheckpointData& checkpoint, int64_t* bytes_spanned) {
  State& s = *state_;
  CheckpointTensors source(checkpoint);
  std::map<std::string, std::vector<const datalayer::SliceRecord*>> pieces;
  if (bytes_spanned != nullptr) {
    for (const auto& r : checkpoint.slices) pieces[r.tensor].push_back(&r);
  }
  torch::NoGradGuard guard;
  auto read_into = [&](const std::string& name, const HeldParameter& p, const Box& local_box, torch::Tensor local) {
    for (const auto& [l, g] : p.Map(local_box)) {
      MAESTRO_RETURN_IF_ERROR(source.CopyInto(name, p.global_shape, g, Narrow(local, l, local_box.offsets)));
      if (bytes_spanned == nullptr) continue;
      for (const datalayer::SliceRecord* r : pieces[name]) {
        const auto common = datalayer::Intersect(r->box, g);
        if (!common) continue;
        const auto [begin, end] =
            datalayer::ByteSpanOf(r->box, *common, static_cast<int64_t>(hf::TensorDTypeSize(r->dtype)));
        *bytes_spanned += end - begin;
      }
    }
    return Status::Ok();
  };
  for (HeldParameter& p : s.params) {
    const Box whole = WholeBox(ShapeOf(p.local));
    MAESTRO_RETURN_IF_ERROR(read_into(ModelTensorName(s.component, p.name), p, whole, p.local));
    if (!p.exp_avg.defined()) continue;
    MAESTRO_RETURN_IF_ERROR(read_into(MomentTensorName(s.component, kExpAvg, p.name), p, whole, p.exp_avg));
    MAESTRO_RETURN_IF_ERROR(read_into(MomentTensorName(s.component, kExpAvgSq, p.name), p, whole, p.exp_avg_sq));
  }
  for (const ShardRun& r : s.runs) {
    const HeldParameter& p = s.params[r.param];
    int64_t cursor = r.at;
    for (const Box& run : datalayer::BoxesOfFlatRange(ShapeOf(p.local), r.begin, r.end)) {
      const int64_t n = run.elements();
      for (const auto& [moment, flat] :
           {std::pair{kExpAvg, s.shard_exp_avg}, std::pair{kExpAvgSq, s.shard_exp_avg_sq}}) {
        MAESTRO_RETURN_IF_ERROR(read_into(MomentTensorName(s.component, moment, p.name), p, run,
                                          flat.narrow(0, cursor, n).view(run.lengths)));
      }
      cursor += n;
    }
  }
  return Status::Ok();
}

double CheckpointSpeedRank::Checksum() {
  double sum = 0.0;
  for (const auto& piece : Pieces(/*own_copy=*/false)) {
    const auto* values = reinterpret_cast<const float*>(piece.bytes.data());
    const size_t n = piece.bytes.size() / sizeof(float);
    for (size_t i = 0; i < n; ++i) sum += values[i];
  }
  ReleaseSnapshot();
  return sum;
}

}  // namespace maestro::runtime
