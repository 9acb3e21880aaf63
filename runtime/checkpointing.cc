// SPDX-License-Identifier: Apache-2.0
#include "runtime/checkpointing.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/checks.h"
#include "base/files.h"
#include "datalayer/crash_env.h"
#include "datalayer/sample_index.h"
#include "datalayer/training_run.h"
#include "plan/plan_graph.h"
#include "runtime/checkpoint_slices.h"
#include "runtime/checkpoint_writer.h"
#include "runtime/collectives.h"
#include "runtime/message_tags.h"
#include "runtime/model_runner.h"  // SaveModuleBytes
#include "runtime/models/encoders.h"
#include "runtime/parallel/distributed_optimizer.h"
#include "runtime/parallel/fused_pipeline.h"
#include "runtime/section_runner.h"

namespace maestro::runtime {

namespace {

// A component's model, then `optimizer` bytes into its optimizer: the ZeRO-1
// shard when there is one (after the model: it re-binds the loaded
// parameters to its flat buffer), else the runner's AdamW.
Status LoadRankState(SectionRunner& runner, DistributedOptimizer* sharded_optimizer, const std::string& model,
                     const std::string& optimizer) {
  MAESTRO_RETURN_IF_ERROR(runner.LoadModel(model));
  if (sharded_optimizer != nullptr) return sharded_optimizer->Load(optimizer);
  return runner.LoadOptimizer(optimizer);
}

// The training components of `section` whose state a checkpoint holds, in
// the order its runner's CheckpointedRunners() lists them: a fused
// section's training components (topological order, as its runner builds
// them), else the section itself when it trains. A pipelined fused
// section's stage `stage` holds only some (FusedComponentOnStage).
std::vector<const plan::SectionPlan*> CheckpointedComponents(const plan::SectionPlan& section, int stage) {
  std::vector<const plan::SectionPlan*> out;
  if (!section.fused()) {
    if (section.mode == plan::SectionMode::kTrain) out.push_back(&section);
    return out;
  }
  for (int k : plan::FusedComponentOrder(section)) {
    const auto& c = section.components[static_cast<size_t>(k)];
    if (c.mode == plan::SectionMode::kTrain && FusedComponentOnStage(c, stage)) out.push_back(&c);
  }
  return out;
}

DistributedOptimizer* ShardOf(const ShardedOptimizers& sharded, size_t k) {
  return k < sharded.size() ? sharded[k] : nullptr;
}

// Rank 0: every rank of a training section gets each training component's
// full model and its own optimizer shard (rank 0 loads its own).
Status SendResumedState(const plan::Plan& plan, launcher::Backend& world, const datalayer::CheckpointData& resumed,
                        SectionRunner& runner, const ShardedOptimizers& sharded) {
  const std::vector<SectionRunner*> mine = runner.CheckpointedRunners();
  for (int r = 0; r < plan.world_size(); ++r) {
    MAESTRO_ASSIGN_OR_RETURN(auto coords, plan::CoordsOfRank(plan, r));
    const auto& section = plan.sections[static_cast<size_t>(coords.section)];
    const bool zero1 = OptimizerShardedOverDp(section);
    // EP: a replicated AdamW's state is per EP rank (its experts' moments).
    const int d = zero1 ? OptimizerShardIndex(section, coords) : coords.dp % std::max(1, section.config.ep);
    size_t next = 0;  // rank 0: which of its own runners loads this state
    for (const plan::SectionPlan* s : CheckpointedComponents(section, coords.pp)) {
      auto model = resumed.sections.find(s->name);
      auto optimizer = resumed.sections.find(OptimizerKey(s->name, coords.tp, d, coords.pp));
      if (model == resumed.sections.end() || optimizer == resumed.sections.end()) {
        return Status::Corruption(
            fmt::format("the checkpoint of step {} has no state for section '{}' tp {} dp {} pp {} (key '{}'{}){}",
                        resumed.step, s->name, coords.tp, coords.dp, coords.pp,
                        OptimizerKey(s->name, coords.tp, d, coords.pp), zero1 ? ", a ZeRO-1 shard" : "",
                        zero1 || coords.pp > 0
                            ? ": was it written with another zero_stage, DP or PP? resume with the plan that wrote it"
                            : ""));
      }
      if (r == 0) {
        if (next >= mine.size()) return Status::Internal("rank 0 has fewer training runners than its plan says");
        MAESTRO_RETURN_IF_ERROR(
            LoadRankState(*mine[next], ShardOf(sharded, next), model->second.model, optimizer->second.optimizer));
        ++next;
      } else {
        MAESTRO_RETURN_IF_ERROR(SendBytes(world, model->second.model, r, kTagResumeModel));
        MAESTRO_RETURN_IF_ERROR(SendBytes(world, optimizer->second.optimizer, r, kTagResumeOptimizer));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

bool OptimizerShardedOverDp(const plan::SectionPlan& s) {
  return s.mode == plan::SectionMode::kTrain && s.config.zero_stage >= 1 && s.config.dp * s.config.cp > 1;
}

int OptimizerShardIndex(const plan::SectionPlan& s, const plan::RankCoords& coords) {
  return coords.dp * s.config.cp + coords.cp;  // the rank's index in its kDPxCP group
}

std::string OptimizerKey(const std::string& name, int t, int d, int p) {
  std::string key = name;
  if (p > 0) key += fmt::format("#pp{}", p);
  if (t > 0) key += fmt::format("#tp{}", t);
  if (d > 0) key += fmt::format("#dp{}", d);
  return key;
}

StatusOr<bool> ShareResumeDecision(const launcher::RankPlace& place, launcher::Backend& world,
                                   const Status& rank0_status, bool rank0_resumed) {
  const bool rank0 = place.world_rank == 0;
  std::vector<int64_t> header{0};
  if (rank0) header[0] = !rank0_status.ok() ? -1 : rank0_resumed ? 1 : 0;
  MAESTRO_RETURN_IF_ERROR(BroadcastInts(world, header));
  if (header[0] < 0) {
    return rank0_status.ok() ? Status::Aborted("rank 0 could not open the run directory") : rank0_status;
  }
  return header[0] == 1;
}

Status ShareResumedState(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Backend& world,
                         const std::optional<datalayer::CheckpointData>& resumed, SectionRunner& runner,
                         const ShardedOptimizers& sharded, const std::string& run_dir) {
  // Rank 0 names the sharded checkpoint's directory (empty: a format-1 file,
  // sent by rank 0 as before); every rank then reads its own parts.
  std::string name;
  if (place.world_rank == 0) {
    if (!resumed) return Status::Internal("ShareResumedState: rank 0 resumed from no state");
    if (resumed->sharded()) name = std::filesystem::path(resumed->dir).filename().string();
    for (int r = 1; r < plan.world_size(); ++r) MAESTRO_RETURN_IF_ERROR(SendBytes(world, name, r, kTagResumeModel));
  } else {
    MAESTRO_ASSIGN_OR_RETURN(name, RecvBytes(world, 0, kTagResumeModel));
  }
  if (!name.empty()) {
    std::optional<datalayer::CheckpointData> read;
    if (place.world_rank != 0) {
      MAESTRO_ASSIGN_OR_RETURN(auto store,
                               datalayer::CheckpointStore::Open(datalayer::TrainingRun::CheckpointsDir(run_dir), 1000));
      MAESTRO_ASSIGN_OR_RETURN(read, store->Read(name));
    }
    CheckpointTensors source(place.world_rank == 0 ? *resumed : *read);
    return LoadRankPieces(source, runner.CheckpointedRunners(), sharded);
  }
  if (place.world_rank == 0) return SendResumedState(plan, world, *resumed, runner, sharded);
  const std::vector<SectionRunner*> mine = runner.CheckpointedRunners();
  for (size_t k = 0; k < mine.size(); ++k) {
    MAESTRO_ASSIGN_OR_RETURN(auto model, RecvBytes(world, 0, kTagResumeModel));
    MAESTRO_ASSIGN_OR_RETURN(auto optimizer, RecvBytes(world, 0, kTagResumeOptimizer));
    MAESTRO_RETURN_IF_ERROR(LoadRankState(*mine[k], ShardOf(sharded, k), model, optimizer));
  }
  return Status::Ok();
}

namespace {

// Collective over `world`: rank 0 learns every rank's records and counters
// (a rank sends once its file is durable) and gets the checkpoint of step
// `step` to commit; the other ranks get nullopt.
StatusOr<std::optional<datalayer::CheckpointData>> GatherRecords(const plan::Plan& plan,
                                                                 const launcher::RankPlace& place,
                                                                 launcher::Backend& world, int64_t step,
                                                                 std::vector<datalayer::SliceRecord> records,
                                                                 std::map<std::string, int64_t> counters) {
  if (place.world_rank != 0) {
    const nlohmann::json message{{"slices", nlohmann::json::parse(datalayer::SliceRecordsToJson(records))},
                                 {"counters", counters}};
    MAESTRO_RETURN_IF_ERROR(SendBytes(world, message.dump(), 0, kTagCheckpointModel));
    return std::optional<datalayer::CheckpointData>();
  }
  datalayer::CheckpointData state;
  state.step = step;
  state.slices = std::move(records);
  state.counters = std::move(counters);
  for (int r = 1; r < plan.world_size(); ++r) {
    MAESTRO_ASSIGN_OR_RETURN(std::string bytes, RecvBytes(world, r, kTagCheckpointModel));
    const nlohmann::json message = nlohmann::json::parse(bytes, nullptr, false);
    if (message.is_discarded() || !message.contains("slices") || !message.contains("counters")) {
      return Status::Internal(fmt::format("rank {} sent rank 0 no checkpoint records", r));
    }
    MAESTRO_ASSIGN_OR_RETURN(auto theirs, datalayer::SliceRecordsFromJson(message["slices"].dump()));
    for (auto& record : theirs) state.slices.push_back(std::move(record));
    for (const auto& [name, value] : message["counters"].items()) {
      const auto count = value.get<int64_t>();
      const auto [it, inserted] = state.counters.emplace(name, count);
      if (!inserted && it->second != count) {
        return Status::Internal(
            fmt::format("ranks disagree on the checkpoint counter '{}' ({} and {})", name, it->second, count));
      }
    }
  }
  return std::optional<datalayer::CheckpointData>(std::move(state));
}

// GatherRecords, then rank 0 commits step `step` (metadata, then the index:
// TrainingRun::Checkpoint).
Status CommitRecords(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Backend& world,
                     datalayer::TrainingRun* run, int64_t step, std::vector<datalayer::SliceRecord> records,
                     std::map<std::string, int64_t> counters) {
  MAESTRO_ASSIGN_OR_RETURN(auto state,
                           GatherRecords(plan, place, world, step, std::move(records), std::move(counters)));
  return state ? run->Checkpoint(std::move(*state)) : Status::Ok();
}

StatusOr<RankPieces> CollectOwnPieces(const plan::Plan& plan, const launcher::RankPlace& place, SectionRunner& runner,
                                      const ShardedOptimizers& sharded, PieceMemory memory) {
  return CollectRankPieces(plan.sections[static_cast<size_t>(place.coords.section)], place.coords,
                           runner.CheckpointedRunners(), sharded, memory);
}

// This rank's pieces written now, as views of its state, into its file in
// `dir`: the records of the pieces and the rank's counters. What a
// synchronous checkpoint and the initial weights do (an asynchronous one
// snapshots first: StartCheckpoint).
struct WrittenPieces {
  std::vector<datalayer::SliceRecord> records;
  std::map<std::string, int64_t> counters;
};
StatusOr<WrittenPieces> WriteOwnPieces(const plan::Plan& plan, const launcher::RankPlace& place, SectionRunner& runner,
                                       const ShardedOptimizers& sharded, const std::string& dir) {
  MAESTRO_ASSIGN_OR_RETURN(RankPieces mine,
                           CollectOwnPieces(plan, place, runner, sharded, PieceMemory::kViewWherePossible));
  WrittenPieces out;
  MAESTRO_ASSIGN_OR_RETURN(
      out.records, datalayer::WriteRankShard(dir, place.world_rank, mine.slices, datalayer::RankEnv(place.world_rank)));
  out.counters = std::move(mine.counters);
  return out;
}

}  // namespace

Status WriteCheckpoint(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Backend& world,
                       SectionRunner& runner, const ShardedOptimizers& sharded, datalayer::TrainingRun* run,
                       const std::string& run_dir, int64_t step) {
  // 1. Every rank: its own pieces, durable in its own file.
  MAESTRO_ASSIGN_OR_RETURN(
      WrittenPieces mine,
      WriteOwnPieces(plan, place, runner, sharded, datalayer::TrainingRun::ShardedCheckpointDir(run_dir, step)));
  // 2. Rank 0 learns every rank's records, then commits.
  MAESTRO_RETURN_IF_ERROR(
      CommitRecords(plan, place, world, run, step, std::move(mine.records), std::move(mine.counters)));
  // Nobody runs ahead of a checkpoint that is not durable yet.
  return Wait(world.Barrier());
}

StatusOr<std::unique_ptr<BackgroundRankWrite>> StartCheckpoint(const plan::Plan& plan, const launcher::RankPlace& place,
                                                               SectionRunner& runner, const ShardedOptimizers& sharded,
                                                               const std::string& run_dir, int64_t step) {
  MAESTRO_ASSIGN_OR_RETURN(RankPieces snapshot, CollectOwnPieces(plan, place, runner, sharded, PieceMemory::kOwnCopy));
  return std::make_unique<BackgroundRankWrite>(std::move(snapshot),
                                               datalayer::TrainingRun::ShardedCheckpointDir(run_dir, step),
                                               place.world_rank, step, datalayer::RankEnv(place.world_rank));
}

StatusOr<std::unique_ptr<BackgroundCommit>> FinishCheckpoint(const plan::Plan& plan, const launcher::RankPlace& place,
                                                             launcher::Backend& world, BackgroundRankWrite& write,
                                                             datalayer::TrainingRun* run) {
  auto records = write.Wait();
  if (!records.ok()) {
    return Status(records.status().code(), fmt::format("writing this rank's file of the checkpoint of step {}: {}",
                                                       write.step(), records.status().message()));
  }
  MAESTRO_ASSIGN_OR_RETURN(auto state,
                           GatherRecords(plan, place, world, write.step(), std::move(*records), write.counters()));
  if (!state) return std::unique_ptr<BackgroundCommit>();
  MAESTRO_ASSIGN_OR_RETURN(auto taken, run->TakeCheckpoint(std::move(*state)));
  return std::make_unique<BackgroundCommit>(run, std::move(taken));
}

std::string InitialWeightsDir(const std::string& run_dir) {
  return run_dir + "/initial";
}

std::string InitialWeightsShardDir(const std::string& run_dir) {
  return InitialWeightsDir(run_dir) + "/" + datalayer::ShardedCheckpointDirName(0);
}

Status CommitInitialWeights(const std::string& run_dir, datalayer::CheckpointData state) {
  MAESTRO_ASSIGN_OR_RETURN(auto store, datalayer::CheckpointStore::Open(InitialWeightsDir(run_dir), 1));
  state.step = 0;
  state.epoch = 0;
  state.next_step = 0;
  MAESTRO_RETURN_IF_ERROR(store->Write(state).status());
  return store->RemoveAllBut({0});
}

StatusOr<datalayer::CheckpointData> ReadCheckpointAt(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string dir, file;
  if (fs::is_regular_file(fs::path(path) / "index.sqlite", ec)) {
    MAESTRO_ASSIGN_OR_RETURN(auto index, datalayer::SampleIndex::Open((fs::path(path) / "index.sqlite").string()));
    MAESTRO_ASSIGN_OR_RETURN(auto commit, index->LastCommit());
    if (commit.checkpoint_step < 0) {
      return Status::NotFound(fmt::format("init '{}': the run has no committed checkpoint yet", path));
    }
    dir = datalayer::TrainingRun::CheckpointsDir(path);
    file = commit.checkpoint_file;
  } else if (fs::is_directory(path, ec) &&
             fs::is_regular_file(fs::path(path) / datalayer::kShardedCheckpointMetadata, ec)) {
    dir = fs::path(path).lexically_normal().parent_path().string();  // a checkpoint directory itself
    file = fs::path(path).lexically_normal().filename().string();
    if (file.empty()) {  // "ckpt-.../": the trailing slash
      file = fs::path(dir).filename().string();
      dir = fs::path(dir).parent_path().string();
    }
  } else if (fs::is_directory(path, ec)) {
    return Status::NotFound(
        fmt::format("init '{}': no index.sqlite in this run directory (train that run first, "
                    "e.g. `maestro run` its spec)",
                    path));
  } else if (fs::is_regular_file(path, ec)) {
    dir = fs::path(path).parent_path().string();
    file = fs::path(path).filename().string();
  } else {
    return Status::NotFound(fmt::format(
        "init '{}': no such checkpoint (file or directory) or run directory (fix [[section]] init in the spec)", path));
  }
  MAESTRO_ASSIGN_OR_RETURN(auto store, datalayer::CheckpointStore::Open(dir.empty() ? "." : dir, 1000));
  return store->Read(file);
}

StatusOr<std::string> ReadSectionModelBytes(const std::string& path, const std::string& section_name,
                                            const plan::ModelDesc& model) {
  MAESTRO_ASSIGN_OR_RETURN(auto data, ReadCheckpointAt(path));
  if (!data.sharded()) {
    auto it = data.sections.find(section_name);
    if (it == data.sections.end()) {
      std::string names;
      for (const auto& [name, state] : data.sections) names += (names.empty() ? "" : ", ") + name;
      return Status::NotFound(fmt::format(
          "init '{}': the checkpoint has no section '{}' (it has: {}); set init_section", path, section_name, names));
    }
    return it->second.model;
  }
  // Format 2: the whole model assembled from its pieces, as the archive
  // format 1 held.
  ModelBuildOptions build;
  build.seed = 0;
  MAESTRO_ASSIGN_OR_RETURN(auto module, BuildModel(model, build));
  MAESTRO_RETURN_IF_ERROR(
      LoadWholeModel(data, section_name, *module, fmt::format("init '{}': section '{}'", path, section_name)));
  return SaveModuleBytes(*module);
}

Status ClearInitialWeights(const std::string& run_dir) {
  std::error_code ec;
  std::filesystem::remove_all(InitialWeightsDir(run_dir), ec);
  if (ec) return Status::IOError(fmt::format("{}: cannot remove: {}", InitialWeightsDir(run_dir), ec.message()));
  return Status::Ok();
}

StatusOr<datalayer::CheckpointData> ReadInitialWeightsFile(const std::string& run_dir) {
  const std::string dir = InitialWeightsDir(run_dir);
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return Status::NotFound(fmt::format("{}: no initial weights (`maestro run ... --steps 0` writes them)", dir));
  }
  MAESTRO_ASSIGN_OR_RETURN(auto store, datalayer::CheckpointStore::Open(dir, 1));
  MAESTRO_ASSIGN_OR_RETURN(auto steps, store->ListSteps());
  if (steps.empty()) return Status::NotFound(fmt::format("{}: no initial-weights checkpoint in it", dir));
  // Sharded (format 2), or the one .mckpt an older Maestro wrote.
  const std::string name = std::filesystem::is_directory(store->ShardedDir(steps.back()), ec)
                               ? datalayer::ShardedCheckpointDirName(steps.back())
                               : datalayer::CheckpointStore::FileName(steps.back());
  return store->Read(name);
}

Status WriteInitialWeights(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Backend& world,
                           SectionRunner& runner, const ShardedOptimizers& sharded, const std::string& run_dir) {
  const Status cleared = place.world_rank == 0 ? ClearInitialWeights(run_dir) : Status::Ok();
  MAESTRO_RETURN_IF_ERROR(Wait(world.Barrier()));
  MAESTRO_RETURN_IF_ERROR(cleared);
  // As a checkpoint: every rank writes its own pieces, rank 0 the metadata.
  MAESTRO_ASSIGN_OR_RETURN(WrittenPieces mine,
                           WriteOwnPieces(plan, place, runner, sharded, InitialWeightsShardDir(run_dir)));
  MAESTRO_ASSIGN_OR_RETURN(auto state,
                           GatherRecords(plan, place, world, 0, std::move(mine.records), std::move(mine.counters)));
  Status written;
  if (state) written = CommitInitialWeights(run_dir, std::move(*state));
  // Every rank waits for rank 0's commit, whatever came of it.
  MAESTRO_RETURN_IF_ERROR(Wait(world.Barrier()));
  return written;
}

}  // namespace maestro::runtime
