// SPDX-License-Identifier: Apache-2.0
#include "runtime/checkpointing.h"

#include <fmt/format.h>

#include <filesystem>
#include <vector>

#include "base/checks.h"
#include "base/files.h"
#include "runtime/collectives.h"
#include "runtime/message_tags.h"
#include "runtime/reference.h"
#include "runtime/section_runner.h"

namespace maestro::runtime {

namespace {

// The training components of `section` whose state a checkpoint holds, in
// the order its runner's CheckpointedRunners() lists them: a fused
// section's training components (topological order, as its runner builds
// them), else the section itself when it trains.
std::vector<const plan::SectionPlan*> CheckpointedComponents(const plan::SectionPlan& section) {
  std::vector<const plan::SectionPlan*> out;
  if (!section.fused()) {
    if (section.mode == plan::SectionMode::kTrain) out.push_back(&section);
    return out;
  }
  plan::Plan alone;
  alone.sections = section.components;
  alone.edges = section.component_edges;
  for (int k : TopologicalSections(alone)) {
    const auto& c = section.components[static_cast<size_t>(k)];
    if (c.mode == plan::SectionMode::kTrain) out.push_back(&c);
  }
  return out;
}

// Rank 0: every rank of a training section gets the full model and its own
// optimizer shard (rank 0 loads its own).
Status SendResumedState(const plan::Plan& plan, launcher::Backend& world, const datalayer::CheckpointData& resumed,
                        SectionRunner& runner) {
  std::vector<SectionRunner*> mine = runner.CheckpointedRunners();
  for (int r = 0; r < plan.world_size(); ++r) {
    MAESTRO_ASSIGN_OR_RETURN(auto coords, plan::CoordsOfRank(plan, r));
    const auto& section = plan.sections[static_cast<size_t>(coords.section)];
    size_t next = 0;  // rank 0: which of its own runners loads this state
    for (const plan::SectionPlan* s : CheckpointedComponents(section)) {
      auto model = resumed.sections.find(s->name);
      auto optimizer = resumed.sections.find(OptimizerKey(s->name, coords.tp));
      if (model == resumed.sections.end() || optimizer == resumed.sections.end()) {
        return Status::Corruption(fmt::format("the checkpoint of step {} has no state for section '{}' tp {}",
                                              resumed.step, s->name, coords.tp));
      }
      if (r == 0) {
        if (next >= mine.size()) return Status::Internal("rank 0 has fewer training runners than its plan says");
        MAESTRO_RETURN_IF_ERROR(mine[next]->LoadModel(model->second.model));
        MAESTRO_RETURN_IF_ERROR(mine[next]->LoadOptimizer(optimizer->second.optimizer));
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

std::string OptimizerKey(const std::string& name, int t) {
  return t == 0 ? name : fmt::format("{}#tp{}", name, t);
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
                         const std::optional<datalayer::CheckpointData>& resumed, SectionRunner& runner) {
  if (place.world_rank == 0) {
    if (!resumed) return Status::Internal("ShareResumedState: rank 0 resumed from no state");
    return SendResumedState(plan, world, *resumed, runner);
  }
  for (SectionRunner* mine : runner.CheckpointedRunners()) {
    MAESTRO_ASSIGN_OR_RETURN(auto model, RecvBytes(world, 0, kTagResumeModel));
    MAESTRO_ASSIGN_OR_RETURN(auto optimizer, RecvBytes(world, 0, kTagResumeOptimizer));
    MAESTRO_RETURN_IF_ERROR(mine->LoadModel(model));
    MAESTRO_RETURN_IF_ERROR(mine->LoadOptimizer(optimizer));
  }
  return Status::Ok();
}

namespace {

// Collective: the state of every training section after step `step`,
// gathered on rank 0 (other ranks get an empty state).
StatusOr<datalayer::CheckpointData> GatherState(const plan::Plan& plan, const launcher::RankPlace& place,
                                                launcher::Backend& world, SectionRunner& runner, int64_t step) {
  const bool rank0 = place.world_rank == 0;
  datalayer::CheckpointData state;
  state.step = step;
  // The DP-0 replica of each training section sends its state to rank 0:
  // the full model (gathered over TP: collective) and one optimizer shard per
  // TP rank.
  // A fused section sends one state per training component.
  if (place.coords.dp == 0) {
    // Every state first (SaveModel is collective over TP), then the sends:
    // a send to rank 0 between two gathers would wait for rank 0, which
    // waits in the next gather for this rank.
    struct Saved {
      std::string name, model, optimizer;
    };
    std::vector<Saved> saved;
    for (SectionRunner* mine : runner.CheckpointedRunners()) {
      Saved one{mine->section_plan().name, "", ""};
      MAESTRO_ASSIGN_OR_RETURN(one.model, mine->SaveModel());
      MAESTRO_ASSIGN_OR_RETURN(one.optimizer, mine->SaveOptimizer());
      if (place.coords.tp != 0) one.model.clear();
      saved.push_back(std::move(one));
    }
    for (Saved& one : saved) {
      const std::string& name = one.name;
      std::string& model = one.model;
      std::string& optimizer = one.optimizer;
      if (rank0) {
        state.sections[name].model = std::move(model);
        state.sections[OptimizerKey(name, 0)].optimizer = std::move(optimizer);
      } else {
        MAESTRO_RETURN_IF_ERROR(SendBytes(world, model, 0, kTagCheckpointModel));
        MAESTRO_RETURN_IF_ERROR(SendBytes(world, optimizer, 0, kTagCheckpointOptimizer));
      }
    }
  }
  if (rank0) {
    for (size_t s = 0; s < plan.sections.size(); ++s) {
      const auto& sp = plan.sections[s];
      for (int t = 0; t < sp.config.tp; ++t) {
        const int from = plan::GlobalRankOf(plan, static_cast<int>(s), t, 0, 0, 0);
        if (from == 0) continue;
        for (const plan::SectionPlan* c : CheckpointedComponents(sp)) {
          MAESTRO_ASSIGN_OR_RETURN(auto model, RecvBytes(world, from, kTagCheckpointModel));
          MAESTRO_ASSIGN_OR_RETURN(auto optimizer, RecvBytes(world, from, kTagCheckpointOptimizer));
          if (t == 0) state.sections[c->name].model = std::move(model);
          state.sections[OptimizerKey(c->name, t)].optimizer = std::move(optimizer);
        }
      }
    }
  }
  return state;
}

}  // namespace

Status WriteCheckpoint(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Backend& world,
                       SectionRunner& runner, datalayer::TrainingRun* run, int64_t step) {
  MAESTRO_ASSIGN_OR_RETURN(auto state, GatherState(plan, place, world, runner, step));
  if (place.world_rank == 0) MAESTRO_RETURN_IF_ERROR(run->Checkpoint(std::move(state)));
  // Nobody runs ahead of a checkpoint that is not durable yet.
  return Wait(world.Barrier());
}

std::string InitialWeightsDir(const std::string& run_dir) {
  return run_dir + "/initial";
}

Status WriteInitialWeightsFile(const std::string& run_dir, datalayer::CheckpointData state) {
  const std::string dir = InitialWeightsDir(run_dir);
  MAESTRO_RETURN_IF_ERROR(CreateDirectories(dir));
  MAESTRO_ASSIGN_OR_RETURN(auto store, datalayer::CheckpointStore::Open(dir, 1));
  state.step = 0;
  state.epoch = 0;
  state.next_step = 0;
  MAESTRO_RETURN_IF_ERROR(store->Write(state).status());
  return store->RemoveAllBut({0});
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
  return store->Read(datalayer::CheckpointStore::FileName(steps.back()));
}

Status WriteInitialWeights(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Backend& world,
                           SectionRunner& runner, const std::string& run_dir) {
  MAESTRO_ASSIGN_OR_RETURN(auto state, GatherState(plan, place, world, runner, 0));
  Status written;
  if (place.world_rank == 0) written = WriteInitialWeightsFile(run_dir, std::move(state));
  // Every rank waits for rank 0's file, whatever came of it.
  MAESTRO_RETURN_IF_ERROR(Wait(world.Barrier()));
  return written;
}

}  // namespace maestro::runtime
