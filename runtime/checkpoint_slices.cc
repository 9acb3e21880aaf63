// SPDX-License-Identifier: Apache-2.0
#include "runtime/checkpoint_slices.h"

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join (fmt 11+ keeps it here; libtorch 2.11 carries fmt 12)
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "base/checks.h"
#include "runtime/checkpoint_boxes.h"
#include "runtime/hf_weights.h"
#include "runtime/model_runner.h"  // LoadModuleBytes (format 1)
#include "runtime/parallel/distributed_optimizer.h"
#include "runtime/replica_owners.h"
#include "runtime/section_runner.h"
#include "runtime/torch_call.h"
#include "runtime/torch_compat.h"

namespace maestro::runtime {

namespace {

using datalayer::Box;
using Placement = SectionRunner::ParameterPlacement;

constexpr char kExpAvg[] = "adamw.exp_avg";
constexpr char kExpAvgSq[] = "adamw.exp_avg_sq";

// Drops this process's pages of `bytes`, a piece read from a rank file's
// read-only private mapping (hf::SafetensorsFile: never written, so no page
// is a private copy): they stay in the page cache and a later read faults
// them back. Without it every piece read stays resident until the file is
// unmapped, and reading a checkpoint larger than memory (an export, a load
// of a big share) would hold all of it. Edge pages shared with a
// neighbouring piece are kept.
void ReleaseMappedPages(std::string_view bytes) {
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t begin = (first + page - 1) & ~(page - 1);
  const uintptr_t end = (first + bytes.size()) & ~(page - 1);
  if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// Where a parameter's local tensor sits in its global tensor.
LocalToGlobal MapOf(const Placement& p) {
  return LocalToGlobal(ShapeOf(p.local), p.split_dim, p.split_parts, p.tp_rank, p.tp_size);
}

// Each TP rank holds its own slice of the parameter (else a whole copy).
bool TpSlice(const Placement& p) {
  return p.split_dim >= 0 && p.tp_size > 1;
}

// A placement the replica group holds alike, whose writer
// SpreadOverReplicaGroup picks (a routed expert has the EP rule instead).
bool Spread(const Placement& p) {
  return p.local.numel() > 0 && !p.tied_copy && !p.routed_expert;
}

// The rank of the DP x TP group that writes each of `placements`
// (runtime/replica_owners.h; {-1, -1} for those Spread leaves out): sized by
// the parameter and, with a replicated AdamW (`adam`), its two moments,
// written with it.
std::vector<GroupOwner> GroupOwners(const std::vector<Placement>& placements, bool adam,
                                    const plan::SectionPlan& section) {
  std::vector<GroupPiece> pieces;
  for (const Placement& p : placements) {
    if (!Spread(p)) continue;
    const int64_t weight = p.local.numel() * static_cast<int64_t>(p.local.element_size());
    pieces.push_back({adam && p.trainable ? 3 * weight : weight, TpSlice(p)});
  }
  const std::vector<GroupOwner> spread = SpreadOverReplicaGroup(pieces, section.config.dp, section.config.tp);
  std::vector<GroupOwner> owners(placements.size(), GroupOwner{-1, -1});
  for (size_t i = 0, k = 0; i < placements.size(); ++i) {
    if (Spread(placements[i])) owners[i] = spread[k++];
  }
  return owners;
}

// The one writer of each replicated piece (the header says who): `owner`
// is the rank GroupOwners gave the placement.
bool WritesParameter(const Placement& p, const plan::SectionPlan& section, const plan::RankCoords& coords,
                     const GroupOwner& owner) {
  if (p.local.numel() == 0 || p.tied_copy || coords.cp != 0) return false;
  if (p.routed_expert) return coords.dp < std::max(1, section.config.ep) && (TpSlice(p) || coords.tp == 0);
  return owner.Writes(coords.dp, coords.tp);
}

// How AddPiece holds a piece's bytes (CollectRankPieces' `memory`), and
// whether a device copy is still in flight.
struct PieceCopies {
  PieceMemory memory = PieceMemory::kViewWherePossible;
  bool device_copies = false;
};

// The piece's bytes on the host: a view of `data` where it may be one, a
// copy otherwise (pinned, asynchronous, from a device).
torch::Tensor HostBytesOf(const torch::Tensor& data, PieceCopies& copies) {
  const torch::Tensor src = data.detach().contiguous();
  if (src.is_cuda()) {
    torch::Tensor host = torch::empty(src.sizes(), src.options().device(torch::kCPU).pinned_memory(true));
    host.copy_(src, /*non_blocking=*/true);
    copies.device_copies = true;
    return host;
  }
  torch::Tensor cpu = src.to(torch::kCPU);
  if (copies.memory == PieceMemory::kOwnCopy && cpu.is_alias_of(data)) cpu = cpu.clone();
  return cpu;
}

Status AddPiece(RankPieces& out, PieceCopies& copies, const std::string& name, const std::vector<int64_t>& global_shape,
                const Box& box, const torch::Tensor& data) {
  torch::Tensor cpu = HostBytesOf(data, copies);
  MAESTRO_ASSIGN_OR_RETURN(hf::TensorDType dtype, HfDtypeOf(cpu.scalar_type()));
  datalayer::SliceToWrite s;
  s.tensor = name;
  s.global_shape = global_shape;
  s.dtype = dtype;
  s.box = box;
  s.bytes = std::string_view(static_cast<const char*>(cpu.data_ptr()), cpu.numel() * cpu.element_size());
  out.slices.push_back(std::move(s));
  out.storage.push_back(std::move(cpu));
  return Status::Ok();
}

// Every piece of `local` (a tensor of the parameter's local shape) under `name`.
Status AddWhole(RankPieces& out, PieceCopies& copies, const std::string& name, const LocalToGlobal& map,
                const torch::Tensor& local) {
  const std::vector<int64_t> shape = ShapeOf(local);
  for (const auto& [l, g] : map.Map(WholeBox(shape))) {
    MAESTRO_RETURN_IF_ERROR(
        AddPiece(out, copies, name, map.global_shape, g, Narrow(local, l, std::vector<int64_t>(shape.size(), 0))));
  }
  return Status::Ok();
}

// A flat range [begin, end) of a parameter's local tensor, held as `flat`
// (end - begin elements): its boxes, each with the part of `flat` it is.
template <typename Fn>
Status ForEachRun(const std::vector<int64_t>& local_shape, int64_t begin, int64_t end, const torch::Tensor& flat,
                  Fn&& fn) {
  int64_t cursor = begin;
  for (const Box& run : datalayer::BoxesOfFlatRange(local_shape, begin, end)) {
    const int64_t n = run.elements();
    MAESTRO_RETURN_IF_ERROR(fn(run, flat.narrow(0, cursor - begin, n).view(run.lengths)));
    cursor += n;
  }
  return Status::Ok();
}

std::vector<const Placement*> Trainable(const std::vector<Placement>& placements) {
  std::vector<const Placement*> out;
  for (const Placement& p : placements) {
    if (p.trainable) out.push_back(&p);
  }
  return out;
}

// Reads the pieces of `name` over `local` (the part `local_box` of the
// parameter's local tensor, as `local` is shaped) into `local`.
Status ReadInto(CheckpointTensors& source, const std::string& name, const LocalToGlobal& map, const Box& local_box,
                torch::Tensor local) {
  for (const auto& [l, g] : map.Map(local_box)) {
    MAESTRO_RETURN_IF_ERROR(source.CopyInto(name, map.global_shape, g, Narrow(local, l, local_box.offsets)));
  }
  return Status::Ok();
}

}  // namespace

std::string ModelTensorName(const std::string& component, const std::string& parameter) {
  return component + "/" + parameter;
}

std::string MomentTensorName(const std::string& component, const std::string& moment, const std::string& parameter) {
  return component + "/" + moment + "/" + parameter;
}

std::string AdamStepCounter(const std::string& component) {
  return component + "/adamw.step";
}

StatusOr<RankPieces> CollectRankPieces(const plan::SectionPlan& section, const plan::RankCoords& coords,
                                       const std::vector<SectionRunner*>& runners,
                                       const std::vector<DistributedOptimizer*>& sharded, PieceMemory memory) {
  RankPieces out;
  PieceCopies copies{memory};
  torch::NoGradGuard guard;
  for (size_t k = 0; k < runners.size(); ++k) {
    const std::string& component = runners[k]->section_plan().name;
    const std::vector<Placement> placements = runners[k]->ParameterPlacements();
    torch::optim::AdamW* adam = runners[k]->ReplicatedAdamW();
    DistributedOptimizer* zero = k < sharded.size() ? sharded[k] : nullptr;
    bool wrote_moments = false;
    const std::vector<GroupOwner> owners = GroupOwners(placements, adam != nullptr, section);
    for (size_t i = 0; i < placements.size(); ++i) {
      const Placement& p = placements[i];
      if (!WritesParameter(p, section, coords, owners[i])) continue;
      const LocalToGlobal map = MapOf(p);
      MAESTRO_RETURN_IF_ERROR(AddWhole(out, copies, ModelTensorName(component, p.name), map, p.local));
      if (adam == nullptr || !p.trainable) continue;
      // A parameter AdamW never stepped has zero moments (its step() would create them so).
      torch::optim::AdamWParamState* state = compat::FindAdamWState(*adam, p.local);
      const torch::Tensor m = state ? state->exp_avg() : torch::zeros_like(p.local);
      const torch::Tensor v = state ? state->exp_avg_sq() : torch::zeros_like(p.local);
      MAESTRO_RETURN_IF_ERROR(AddWhole(out, copies, MomentTensorName(component, kExpAvg, p.name), map, m));
      MAESTRO_RETURN_IF_ERROR(AddWhole(out, copies, MomentTensorName(component, kExpAvgSq, p.name), map, v));
      wrote_moments = true;
    }
    if (wrote_moments && adam != nullptr) {
      // AdamW's step count over every parameter it stepped, not only those
      // this rank wrote: the same on every replica, whichever pieces it owns.
      int64_t adam_step = 0;
      for (const Placement& p : placements) {
        torch::optim::AdamWParamState* state = p.trainable ? compat::FindAdamWState(*adam, p.local) : nullptr;
        if (state != nullptr) adam_step = std::max<int64_t>(adam_step, state->step());
      }
      out.counters[AdamStepCounter(component)] = adam_step;
    }
    if (zero == nullptr) continue;
    const std::vector<const Placement*> trainable = Trainable(placements);
    for (const DistributedOptimizer::ShardPiece& piece : zero->ShardPieces()) {
      if (piece.param >= trainable.size()) return Status::Internal(component + ": a ZeRO-1 piece of no parameter");
      const Placement& p = *trainable[piece.param];
      // A tied copy's moments are the first stage's embedding's; a parameter
      // TP does not split has the same moments on every TP rank: TP rank 0's.
      if (p.tied_copy || (!(p.split_dim >= 0 && p.tp_size > 1) && coords.tp != 0)) continue;
      const LocalToGlobal map = MapOf(p);
      const std::vector<int64_t> shape = ShapeOf(p.local);
      for (const auto& [moment, flat] : {std::pair{kExpAvg, piece.exp_avg}, std::pair{kExpAvgSq, piece.exp_avg_sq}}) {
        const std::string name = MomentTensorName(component, moment, p.name);
        auto add_run = [&](const Box& run, const torch::Tensor& data) {
          for (const auto& [l, g] : map.Map(run)) {
            MAESTRO_RETURN_IF_ERROR(AddPiece(out, copies, name, map.global_shape, g, Narrow(data, l, run.offsets)));
          }
          return Status::Ok();
        };
        MAESTRO_RETURN_IF_ERROR(ForEachRun(shape, piece.begin, piece.end, flat, add_run));
      }
    }
    out.counters[AdamStepCounter(component)] = zero->step_count();
  }
  if (copies.device_copies) torch::cuda::synchronize();  // the pinned copies have landed
  return out;
}

CheckpointTensors::CheckpointTensors(const datalayer::CheckpointData& checkpoint)
    : checkpoint_(checkpoint), reader_(checkpoint.dir) {
  for (const auto& r : checkpoint.slices) pieces_[r.tensor].push_back(&r);
}

StatusOr<torch::Tensor> CheckpointTensors::Read(const std::string& tensor, const std::vector<int64_t>& expected_shape,
                                                const Box& box) {
  auto it = pieces_.find(tensor);
  if (it == pieces_.end()) return CopyInto(tensor, expected_shape, box, torch::Tensor());  // its error
  MAESTRO_ASSIGN_OR_RETURN(torch::Dtype dtype, TorchDtypeOf(it->second.front()->dtype));
  torch::Tensor out;
  MAESTRO_RETURN_IF_ERROR(TorchCall(fmt::format("reading '{}' from {}", tensor, checkpoint_.dir),
                                    [&] { out = torch::empty(box.lengths, torch::TensorOptions().dtype(dtype)); }));
  MAESTRO_RETURN_IF_ERROR(CopyInto(tensor, expected_shape, box, out));
  return out;
}

Status CheckpointTensors::CopyInto(const std::string& tensor, const std::vector<int64_t>& expected_shape,
                                   const Box& box, torch::Tensor destination) {
  auto it = pieces_.find(tensor);
  if (it == pieces_.end()) {
    return Status::FailedPrecondition(fmt::format(
        "the checkpoint {} has no tensor '{}': the spec changed since it was written (another model, section or "
        "parameter). Resume with the spec that wrote it, or train in a new run directory",
        checkpoint_.dir, tensor));
  }
  const datalayer::SliceRecord& first = *it->second.front();
  if (first.global_shape != expected_shape) {
    return Status::FailedPrecondition(fmt::format(
        "the checkpoint {} holds '{}' as [{}], this plan's model as [{}]: the spec changed since it was written. "
        "Resume with the spec that wrote it, or train in a new run directory",
        checkpoint_.dir, tensor, fmt::join(first.global_shape, ", "), fmt::join(expected_shape, ", ")));
  }
  int64_t covered = 0;
  for (const datalayer::SliceRecord* r : it->second) {
    const auto common = datalayer::Intersect(r->box, box);
    if (!common) continue;
    // Only the blocks the overlap spans are verified (and touched).
    const auto [begin, end] =
        datalayer::ByteSpanOf(r->box, *common, static_cast<int64_t>(hf::TensorDTypeSize(r->dtype)));
    MAESTRO_ASSIGN_OR_RETURN(std::string_view bytes, reader_.Bytes(*r, begin, end));
    MAESTRO_ASSIGN_OR_RETURN(torch::Dtype stored, TorchDtypeOf(r->dtype));
    MAESTRO_RETURN_IF_ERROR(TorchCall(fmt::format("reading '{}' from {}", tensor, checkpoint_.dir), [&] {
      // The mapped bytes, read only (from_blob wants a mutable pointer).
      const torch::Tensor piece =
          torch::from_blob(const_cast<char*>(bytes.data()), r->box.lengths, torch::TensorOptions().dtype(stored));
      Narrow(destination, *common, box.offsets).copy_(Narrow(piece, *common, r->box.offsets));
    }));
    ReleaseMappedPages(bytes.substr(static_cast<size_t>(begin), static_cast<size_t>(end - begin)));
    covered += common->elements();
  }
  if (covered != box.elements()) {
    return Status::Corruption(fmt::format("the checkpoint {} covers {} of the {} elements of '{}' asked for",
                                          checkpoint_.dir, covered, box.elements(), tensor));
  }
  return Status::Ok();
}

Status LoadRankPieces(CheckpointTensors& source, const std::vector<SectionRunner*>& runners,
                      const std::vector<DistributedOptimizer*>& sharded) {
  const auto& counters = source.checkpoint().counters;
  for (size_t k = 0; k < runners.size(); ++k) {
    const std::string& component = runners[k]->section_plan().name;
    const std::string what = fmt::format("section '{}': loading the checkpoint", component);
    const std::vector<Placement> placements = runners[k]->ParameterPlacements();
    torch::optim::AdamW* adam = runners[k]->ReplicatedAdamW();
    DistributedOptimizer* zero = k < sharded.size() ? sharded[k] : nullptr;
    const auto step_it = counters.find(AdamStepCounter(component));
    const int64_t adam_step = step_it == counters.end() ? 0 : step_it->second;
    torch::NoGradGuard guard;
    for (const Placement& p : placements) {
      if (p.local.numel() == 0) continue;  // another stage's or EP rank's
      const LocalToGlobal map = MapOf(p);
      const Box whole = WholeBox(ShapeOf(p.local));
      MAESTRO_RETURN_IF_ERROR(ReadInto(source, ModelTensorName(component, p.name), map, whole, p.local));
      if (adam == nullptr || !p.trainable || adam_step == 0) continue;
      torch::optim::AdamWParamState& state = compat::AdamWStateOf(*adam, p.local);
      state.step(adam_step);
      MAESTRO_RETURN_IF_ERROR(
          ReadInto(source, MomentTensorName(component, kExpAvg, p.name), map, whole, state.exp_avg()));
      MAESTRO_RETURN_IF_ERROR(
          ReadInto(source, MomentTensorName(component, kExpAvgSq, p.name), map, whole, state.exp_avg_sq()));
    }
    if (zero != nullptr && adam_step > 0) {
      const std::vector<const Placement*> trainable = Trainable(placements);
      for (DistributedOptimizer::ShardPiece& piece : zero->ShardPieces()) {
        if (piece.param >= trainable.size()) return Status::Internal(component + ": a ZeRO-1 piece of no parameter");
        const Placement& p = *trainable[piece.param];
        const LocalToGlobal map = MapOf(p);
        const std::vector<int64_t> shape = ShapeOf(p.local);
        for (const auto& [moment, flat] : {std::pair{kExpAvg, piece.exp_avg}, std::pair{kExpAvgSq, piece.exp_avg_sq}}) {
          const std::string name = MomentTensorName(component, moment, p.name);
          auto read_run = [&](const Box& run, const torch::Tensor& data) {
            return ReadInto(source, name, map, run, data);
          };
          MAESTRO_RETURN_IF_ERROR(ForEachRun(shape, piece.begin, piece.end, flat, read_run));
        }
      }
      zero->SetStepCount(adam_step);
    }
    compat::ClearAutocastCache();
  }
  return Status::Ok();
}

Status LoadWholeModel(const datalayer::CheckpointData& checkpoint, const std::string& component,
                      torch::nn::Module& module, const std::string& what) {
  if (!checkpoint.sharded()) {
    auto it = checkpoint.sections.find(component);
    if (it == checkpoint.sections.end() || it->second.model.empty()) {
      std::string names;
      for (const auto& [name, state] : checkpoint.sections) {
        if (!state.model.empty()) names += (names.empty() ? "" : ", ") + name;
      }
      return Status::NotFound(
          fmt::format("{}: the checkpoint has no section '{}' (it has: {})", what, component, names));
    }
    return LoadModuleBytes(module, it->second.model, what);  // format 1: a torch archive of the whole model
  }
  CheckpointTensors source(checkpoint);
  torch::NoGradGuard guard;
  for (auto& item : module.named_parameters()) {
    const std::vector<int64_t> shape = ShapeOf(item.value());
    const Status read = source.CopyInto(ModelTensorName(component, item.key()), shape, WholeBox(shape), item.value());
    if (!read.ok()) return read.WithContext(what);
  }
  compat::ClearAutocastCache();
  return Status::Ok();
}

}  // namespace maestro::runtime
