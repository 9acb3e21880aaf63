// SPDX-License-Identifier: Apache-2.0
// A distributed run's checkpoints: rank 0 owns the run directory
// (datalayer::TrainingRun) and commits; every rank writes and reads its own
// state. Sharded (format 2, runtime/checkpoint_slices.h says which pieces a
// rank writes): at a checkpoint every rank writes the pieces it owns into
// its own file of <run_dir>/checkpoints/ckpt-<step>/ and sends rank 0 their
// records; rank 0 commits (metadata, then the index). On a resume every rank
// reads the metadata and loads its own parts, whatever layout wrote them:
// nothing passes through rank 0.
// Format 1 (one .mckpt, written by rank 0 in an older Maestro) still
// resumes: rank 0 sends every rank its state, keyed as OptimizerKey names,
// which needs the layout that wrote it (DistributedOptimizer::Load says
// which differs). Every checkpoint written now, the initial weights of a
// zero-step run included, is format 2.
// Runtime-internal: SectionRunner and DistributedOptimizer are torch classes
// (the header itself is torch-free). May call: runtime/section_runner,
// runtime/checkpoint_slices, runtime/checkpoint_writer, runtime/parallel/fused_pipeline (which stage of
// a fused section holds which component), runtime/parallel/distributed_optimizer,
// runtime/collectives, datalayer, launcher, plan (plan_graph: a fused
// section's component order), base.
// Thread safety: one thread per process.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "datalayer/checkpoint_store.h"
#include "datalayer/training_run.h"
#include "launcher/communicators.h"
#include "launcher/launch_env.h"
#include "plan/plan.h"

namespace maestro::runtime {

class SectionRunner;
class DistributedOptimizer;
class BackgroundRankWrite;
class BackgroundCommit;

// This rank's ZeRO-1 shards, one per entry of its runner's
// CheckpointedRunners() (a fused section has one per training component);
// empty, or null entries, where the runner's replicated AdamW steps.
using ShardedOptimizers = std::vector<DistributedOptimizer*>;

// True when section `s` shards its AdamW states over DP x CP (ZeRO-1,
// docs/gradient_sync.md): it trains, its plan says zero_stage >= 1 and it
// has more than one DP x CP rank. With DP = CP = 1 zero_stage = 1 changes
// nothing: the replicated AdamW runs.
bool OptimizerShardedOverDp(const plan::SectionPlan& s);
// The ZeRO-1 shard a rank of section `s` holds: its index in its DP x CP
// group (plan::GroupKind::kDPxCP), dp * cp_size + cp.
int OptimizerShardIndex(const plan::SectionPlan& s, const plan::RankCoords& coords);

// Checkpoint key of the optimizer state of TP rank t (and, under ZeRO-1, DP
// rank d; with PP, stage p) of section `name`.
std::string OptimizerKey(const std::string& name, int t, int d = 0, int p = 0);

// Collective over `world`. Rank 0 passes how opening the run went
// (`rank0_status`) and whether it resumed from a checkpoint; every rank
// learns whether the run resumes (true) or starts fresh (false), before any
// SectionRunner is built (a resumed training section skips its initial
// weights). An error of rank 0 is every rank's error.
StatusOr<bool> ShareResumeDecision(const launcher::RankPlace& place, launcher::Backend& world,
                                   const Status& rank0_status, bool rank0_resumed);

// Collective over `world`, after ShareResumeDecision said true: every rank of
// a training section loads its part of the model and of its optimizer state
// into `runner` (the optimizer state into `sharded` instead for a ZeRO-1
// section). Rank 0 passes the state it resumed from; other ranks nullopt. A
// sharded checkpoint loads into any layout (each rank reads it from
// <run_dir>/checkpoints itself); a format-1 one needs the layout that wrote it.
Status ShareResumedState(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Backend& world,
                         const std::optional<datalayer::CheckpointData>& resumed, SectionRunner& runner,
                         const ShardedOptimizers& sharded, const std::string& run_dir);

// Collective over `world`: the sharded checkpoint of every training
// section after step `step`: each rank writes its pieces into
// TrainingRun::ShardedCheckpointDir(run_dir, step), rank 0 commits it
// (`run`: non-null on rank 0 only); returns once it is committed (a barrier).
// `sharded`: this rank's AdamW shards in a ZeRO-1 section, else empty.
Status WriteCheckpoint(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Backend& world,
                       SectionRunner& runner, const ShardedOptimizers& sharded, datalayer::TrainingRun* run,
                       const std::string& run_dir, int64_t step);

// The same checkpoint written in the background (plan.checkpoint_async),
// in two halves. StartCheckpoint (this rank alone, at the step boundary of
// `step`): snapshots the rank's pieces into host memory and starts the
// thread writing its file. FinishCheckpoint (collective over `world`, at a
// later step boundary that every rank reaches together): waits for the
// thread, sends rank 0 the records (the caller committed its spool first,
// as before WriteCheckpoint); rank 0 takes the steps up to `write.step()`
// from the run (TrainingRun::TakeCheckpoint) and returns their commit
// running on a thread (BackgroundCommit: metadata, index, pruning), the
// other ranks nullptr. No barrier: the commit removes only checkpoints
// before its own, never the next one the ranks may be writing. Rank 0 waits
// for that commit before the next checkpoint, a stop or the run's end.
StatusOr<std::unique_ptr<BackgroundRankWrite>> StartCheckpoint(const plan::Plan& plan, const launcher::RankPlace& place,
                                                               SectionRunner& runner, const ShardedOptimizers& sharded,
                                                               const std::string& run_dir, int64_t step);
StatusOr<std::unique_ptr<BackgroundCommit>> FinishCheckpoint(const plan::Plan& plan, const launcher::RankPlace& place,
                                                             launcher::Backend& world, BackgroundRankWrite& write,
                                                             datalayer::TrainingRun* run);

// The initial weights of a run that trains for zero steps (`maestro run
// --steps 0`): collective like WriteCheckpoint; every rank writes the
// pieces it owns of every training section's state before step 0 into
// InitialWeightsShardDir, rank 0 commits them (CommitInitialWeights),
// outside the run's commit protocol (nothing was consumed).
Status WriteInitialWeights(const plan::Plan& plan, const launcher::RankPlace& place, launcher::Backend& world,
                           SectionRunner& runner, const ShardedOptimizers& sharded, const std::string& run_dir);

// The folder of a run's initial-weights checkpoint: "<run_dir>/initial"; a
// sharded checkpoint of step 0 (next_step 0) in it, InitialWeightsShardDir
// (an older Maestro wrote one .mckpt there instead).
std::string InitialWeightsDir(const std::string& run_dir);
std::string InitialWeightsShardDir(const std::string& run_dir);
// Rank 0, before any rank writes initial weights: removes what an earlier
// zero-step run left there (another world size leaves other rank files).
Status ClearInitialWeights(const std::string& run_dir);
// Rank 0, once the rank files in InitialWeightsShardDir are durable:
// `state` (their records) becomes the run's initial weights, atomically
// (metadata), replacing any.
Status CommitInitialWeights(const std::string& run_dir, datalayer::CheckpointData state);
// Reads them back (verified; either format); NotFound naming the folder
// when there is none.
StatusOr<datalayer::CheckpointData> ReadInitialWeightsFile(const std::string& run_dir);

// The checkpoint at `path`: a run directory (its last committed
// checkpoint), a sharded checkpoint's directory (ckpt-<step>/) or a .mckpt
// file. What a section's `init_from` reads (runtime/checkpoint_slices.h
// LoadWholeModel loads a model out of it, either format).
StatusOr<datalayer::CheckpointData> ReadCheckpointAt(const std::string& path);
// The model of `section_name` in the checkpoint at `path` as a torch archive
// of the whole model (a format-2 checkpoint's pieces assembled into a model
// built from `model`): what the end-of-run evaluations read.
StatusOr<std::string> ReadSectionModelBytes(const std::string& path, const std::string& section_name,
                                            const plan::ModelDesc& model);

}  // namespace maestro::runtime
