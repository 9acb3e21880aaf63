// SPDX-License-Identifier: Apache-2.0
// A rank's part of a sharded checkpoint (datalayer/sharded_checkpoint.h;
// docs/datalayer.md "Sharded checkpoints"): which pieces of which global
// tensors this rank writes, and how it loads its own part of them back,
// whatever layout wrote them.
//
// Global tensors (the one naming rule), per training component c (a section,
// or a fused section's component) and parameter p of its whole model:
//   "c/p"                   the parameter
//   "c/adamw.exp_avg/p"     AdamW's first moment, same shape
//   "c/adamw.exp_avg_sq/p"  AdamW's second moment
// and the counter "c/adamw.step" (AdamW steps taken). None depends on the
// layout: TP slices (a fused qkv's q, k and v blocks each), PP stages, EP
// experts and ZeRO-1 shards (flat ranges of a parameter, cut into boxes by
// BoxesOfFlatRange) are all boxes of them.
// Who writes a piece: the rank holding it, once per replica set: CP rank 0,
// DP rank 0 (a routed expert: DP rank < EP, its EP group), TP rank 0 for a
// parameter TP does not split; a tied embedding's copy on a later pipeline
// stage never (the first stage's is the parameter). Under ZeRO-1 every rank
// writes the moments of its own shard (no two shards overlap).
// A load reads, for each part this rank holds (its TP slice, its stage's
// parameters, its experts, its ZeRO-1 shard), the overlapping parts of the
// pieces: only those bytes (memory-mapped), never the whole tensor.
//
// Runtime-internal (torch). May call: runtime/section_runner,
// runtime/parallel/distributed_optimizer, runtime/hf_weights (dtypes),
// datalayer, plan, base, libtorch. Thread safety: one thread.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "datalayer/checkpoint_store.h"
#include "datalayer/sharded_checkpoint.h"
#include "plan/plan.h"

namespace maestro::runtime {

class SectionRunner;
class DistributedOptimizer;

std::string ModelTensorName(const std::string& component, const std::string& parameter);
std::string MomentTensorName(const std::string& component, const std::string& moment, const std::string& parameter);
std::string AdamStepCounter(const std::string& component);

// The pieces a rank writes: `slices`' bytes point into `storage` (CPU,
// contiguous; a view of the state itself where it already is one).
struct RankPieces {
  std::vector<datalayer::SliceToWrite> slices;
  std::vector<torch::Tensor> storage;
  std::map<std::string, int64_t> counters;
};

// Where the pieces' bytes live. kViewWherePossible: a CPU state already
// contiguous is referenced, not copied (a checkpoint written before the
// state changes again). kOwnCopy: every piece is a copy the state's later
// updates do not touch (an asynchronous save's snapshot). Either way a
// device tensor is copied into pinned host memory (the copies run on the
// current stream, synchronized once at the end).
enum class PieceMemory { kViewWherePossible, kOwnCopy };

// This rank's pieces of `runners` (its CheckpointedRunners) with their ZeRO-1
// optimizers (`sharded[k]` for runners[k]; absent or null: the runner's
// replicated AdamW). `section`: the rank's section; `coords`: the rank's.
StatusOr<RankPieces> CollectRankPieces(const plan::SectionPlan& section, const plan::RankCoords& coords,
                                       const std::vector<SectionRunner*>& runners,
                                       const std::vector<DistributedOptimizer*>& sharded,
                                       PieceMemory memory = PieceMemory::kViewWherePossible);

// The global tensors of a format-2 checkpoint, read box by box.
class CheckpointTensors {
 public:
  explicit CheckpointTensors(const datalayer::CheckpointData& checkpoint);
  bool Has(const std::string& tensor) const { return pieces_.count(tensor) > 0; }
  // Box `box` of `tensor` (its stored dtype, on the CPU). `expected_shape`:
  // the global shape this run's model gives it; FailedPrecondition naming
  // both when it differs, or when the checkpoint has no such tensor (the
  // spec changed since the checkpoint was written).
  StatusOr<torch::Tensor> Read(const std::string& tensor, const std::vector<int64_t>& expected_shape,
                               const datalayer::Box& box);
  // The same box copied straight into `destination` (box.lengths shaped, any
  // dtype and device; a view is fine): each piece's overlap from its mapped
  // bytes, with no whole-box temporary (what a resume's load does: a rank
  // holds its own state and the pages it is reading, nothing more).
  Status CopyInto(const std::string& tensor, const std::vector<int64_t>& expected_shape, const datalayer::Box& box,
                  torch::Tensor destination);
  const datalayer::CheckpointData& checkpoint() const { return checkpoint_; }

 private:
  const datalayer::CheckpointData& checkpoint_;
  std::map<std::string, std::vector<const datalayer::SliceRecord*>> pieces_;
  datalayer::ShardReader reader_;
};

// Loads `runners`' parameters, and their optimizers' moments and step counts
// when the checkpoint has any (a step count above 0), from `source`: each
// part this rank holds, in any layout.
Status LoadRankPieces(CheckpointTensors& source, const std::vector<SectionRunner*>& runners,
                      const std::vector<DistributedOptimizer*>& sharded);

// Every parameter of `module` (a whole model, unsharded, of component
// `component`) from `checkpoint`, either format: what `init_from`, the
// evaluations and a format-1 export read (a format-2 export streams its
// tensors one at a time instead: runtime/hf_export.cc). `what` names it in errors.
Status LoadWholeModel(const datalayer::CheckpointData& checkpoint, const std::string& component,
                      torch::nn::Module& module, const std::string& what);

}  // namespace maestro::runtime
