// SPDX-License-Identifier: Apache-2.0
#include "runtime/reference.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/checks.h"
#include "datalayer/crash_env.h"
#include "plan/runtime_support.h"
#include "runtime/checkpoint_slices.h"
#include "runtime/checkpointing.h"
#include "runtime/device_staging.h"
#include "runtime/graph_forward.h"
#include "runtime/plan_data.h"
#include "runtime/section_runner.h"

namespace maestro::runtime {

StatusOr<std::vector<StepLoss>> RunReference(const plan::Plan& given, const ReferenceOptions& options) {
  MAESTRO_RETURN_IF_ERROR(plan::CheckPlanRuns(given));  // what the distributed runtime refuses, this does too
  // Fused sections run here as their components (the reference is one process).
  const plan::Plan plan = plan::ExpandFusedSections(given);
  MAESTRO_ASSIGN_OR_RETURN(auto samples, OpenPlanDataset(plan));
  MAESTRO_ASSIGN_OR_RETURN(auto run, OpenPlanRun(plan, *samples, options.run_dir));
  MAESTRO_ASSIGN_OR_RETURN(auto resumed, run->Resume());
  std::vector<std::unique_ptr<SectionRunner>> runners;
  UseDevice(options.compute);
  RunnerOptions runner_options;
  runner_options.resuming = resumed.has_value();
  runner_options.device = TorchDevice(options.compute);
  runner_options.precision = options.compute.precision;
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    MAESTRO_ASSIGN_OR_RETURN(auto runner, SectionRunner::Create(plan, static_cast<int>(s), runner_options));
    if (resumed && resumed->sharded()) {
      // A sharded checkpoint loads into this one process whatever layout wrote it.
      if (runner->trains()) {
        CheckpointTensors source(*resumed);
        MAESTRO_RETURN_IF_ERROR(LoadRankPieces(source, runner->CheckpointedRunners(), {}));
      }
    } else if (resumed) {
      const std::string& name = plan.sections[s].name;
      if (resumed->sections.count(name + "#dp1") > 0) {
        return Status::FailedPrecondition(fmt::format(
            "section '{}': the run's checkpoint of step {} holds ZeRO-1 optimizer shards (one per DP rank); the "
            "one-process reference cannot resume it: resume the run with maestro-worker under the plan that wrote it",
            name, resumed->step));
      }
      auto it = resumed->sections.find(name);
      if (it != resumed->sections.end()) {
        MAESTRO_RETURN_IF_ERROR(runner->LoadModel(it->second.model));
        MAESTRO_RETURN_IF_ERROR(runner->LoadOptimizer(it->second.optimizer));
      }
    }
    runners.push_back(std::move(runner));
  }
  std::unique_ptr<std::ofstream> metrics;
  if (!options.metrics_path.empty()) {
    metrics = std::make_unique<std::ofstream>(options.metrics_path, std::ios::app);
    if (!*metrics) return Status::Internal(fmt::format("cannot write {}", options.metrics_path));
  }
  const int64_t steps = options.steps >= 0 ? options.steps : plan.data.steps;
  std::vector<StepLoss> losses;
  while (run->next_step() < steps) {
    const auto step_start = std::chrono::steady_clock::now();
    MAESTRO_ASSIGN_OR_RETURN(auto batch, run->NextBatch());
    MAESTRO_ASSIGN_OR_RETURN(auto result,
                             GraphForward(plan, runners, *samples, batch.sample_ids, datasets::Split::kTrain, 0));
    if (result.loss.defined()) result.loss.backward();
    for (auto& runner : runners) {
      if (runner->trains()) runner->OptimizerStep(batch.step);
    }
    StepLoss loss{batch.step,
                  result.loss_samples > 0 ? result.loss_sum / static_cast<double>(result.loss_samples) : 0.0,
                  result.loss_samples};
    losses.push_back(loss);
    if (metrics) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
      nlohmann::json line{{"step", loss.step},
                          {"loss", loss.loss},
                          {"samples", batch.sample_ids.size()},
                          {"step_seconds", seconds},
                          {"samples_per_s", seconds > 0 ? static_cast<double>(batch.sample_ids.size()) / seconds : 0.0},
                          {"mode", "reference"}};
      if (plan.data.on_bad_sample == "skip") line["skipped_samples"] = samples->SkippedSamples();
      *metrics << line.dump() << "\n" << std::flush;
    }
    MAESTRO_RETURN_IF_ERROR(run->StepDone({batch.step, batch.sample_ids, ""}));
  }
  const bool initial_only = steps == 0 && !resumed;  // --steps 0: the initial weights, for `maestro export`
  if (run->pending_steps() > 0 || initial_only) {
    // A sharded checkpoint, as the distributed runs write it: this one
    // process is rank 0 and owns every piece (one rank file); the initial
    // weights of a zero-step run go to their own folder.
    datalayer::CheckpointData sharded;
    sharded.step = initial_only ? 0 : run->next_step() - 1;
    std::vector<datalayer::SliceToWrite> slices;
    std::vector<RankPieces> kept;  // the pieces' bytes live here until written
    for (auto& runner : runners) {
      if (!runner->trains()) continue;
      // One rank of the section: the plan's DP x TP group would share its
      // pieces out (runtime/replica_owners.h); this process owns them all.
      plan::SectionPlan one_replica = runner->section_plan();
      one_replica.config.dp = 1;
      one_replica.config.tp = 1;
      MAESTRO_ASSIGN_OR_RETURN(RankPieces pieces,
                               CollectRankPieces(one_replica, plan::RankCoords{}, runner->CheckpointedRunners(), {}));
      slices.insert(slices.end(), pieces.slices.begin(), pieces.slices.end());
      sharded.counters.insert(pieces.counters.begin(), pieces.counters.end());
      kept.push_back(std::move(pieces));
    }
    const std::string dir = initial_only ? InitialWeightsShardDir(options.run_dir)
                                         : datalayer::TrainingRun::ShardedCheckpointDir(options.run_dir, sharded.step);
    if (initial_only) MAESTRO_RETURN_IF_ERROR(ClearInitialWeights(options.run_dir));
    MAESTRO_ASSIGN_OR_RETURN(sharded.slices, datalayer::WriteRankShard(dir, 0, slices, datalayer::RankEnv(0)));
    MAESTRO_RETURN_IF_ERROR(initial_only ? CommitInitialWeights(options.run_dir, std::move(sharded))
                                         : run->Checkpoint(std::move(sharded)));
  }
  return losses;
}

}  // namespace maestro::runtime
