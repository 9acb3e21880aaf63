// SPDX-License-Identifier: Apache-2.0
// One rank's training state in a sharded checkpoint, without a training
// run: the measurements behind `maestro-bench checkpoint` (issue #39's
// write_vs_raw, rank0_peak_over_own_state, reshard_load_vs_same_layout). No
// torch types here: bench/ includes it without torch's headers (as
// runtime/hf_load_speed.h).
//
// The state of a decoder (the plan's ModelDesc, built on the meta device for
// its parameter names and shapes) trained by AdamW in fp32 on the CPU, as
// rank `rank` of a layout (TP x DP, ZeRO-1 on or off) holds it: its TP slice
// of every parameter (TensorParallelSplitOf, the runtime's rule; a parameter
// TP does not split whole), and AdamW's two moments of those slices (ZeRO-1:
// only its flat range of their concatenation, cut in DP near-equal ranges).
// The pieces it writes follow runtime/checkpoint_slices.h's one-owner rule
// (DP rank 0 writes the parameters, TP rank 0 what TP does not split; under
// ZeRO-1 every rank its own moments, as boxes of BoxesOfFlatRange), named as
// the runtime names them (ModelTensorName, MomentTensorName). A load reads
// each part the rank holds through the runtime's own reader
// (CheckpointTensors::Read: the overlapping parts of the mapped pieces,
// CRC-checked) and copies it into the state, as LoadRankPieces does.
// Not the runtime's SectionRunner (no communicators, no model): what differs
// from a training rank is that nothing else is in memory.
//
// May call: runtime/checkpoint_slices (names, CheckpointTensors),
// runtime/models (BuildModel on kMeta, TensorParallelSplitOf), datalayer,
// plan, base, libtorch. Thread safety: one rank per thread; ranks share
// nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "datalayer/checkpoint_store.h"
#include "datalayer/sharded_checkpoint.h"
#include "plan/plan.h"

namespace maestro::runtime {

struct CheckpointLayout {
  int tp = 1;
  int dp = 1;
  bool zero1 = false;  // the AdamW moments sharded over DP (flat ranges)
  int world() const { return tp * dp; }
  std::string Name() const;  // "tp2.dp2.zero1"
};

class CheckpointSpeedRank {
 public:
  // World rank `rank` of `layout` (TP rank rank % tp, DP rank rank / tp) of
  // component `component`'s model `desc`: its state allocated and filled
  // with values drawn from `seed` (every page resident). An error when TP
  // does not divide a split dimension or the rank is outside the layout.
  static StatusOr<std::unique_ptr<CheckpointSpeedRank>> Create(const plan::ModelDesc& desc,
                                                               const std::string& component,
                                                               const CheckpointLayout& layout, int rank, uint64_t seed);
  ~CheckpointSpeedRank();
  CheckpointSpeedRank(const CheckpointSpeedRank&) = delete;
  CheckpointSpeedRank& operator=(const CheckpointSpeedRank&) = delete;

  // Bytes of the state this rank holds (its parameters and moments).
  int64_t state_bytes() const;
  // Bytes of every rank's state together, once each (the whole model's
  // parameters and moments): what a gather to one rank would hold.
  int64_t global_state_bytes() const;

  // The pieces this rank writes, as WriteRankShard takes them. own_copy
  // false: views of the state (a synchronous save); true: copies the state's
  // later changes do not touch (an asynchronous save's snapshot), held until
  // ReleaseSnapshot or the next call.
  std::vector<datalayer::SliceToWrite> Pieces(bool own_copy);
  void ReleaseSnapshot();
  // The AdamW step counter this rank reports ("<component>/adamw.step").
  std::string step_counter() const;

  // Every part this rank holds, read from `checkpoint` (format 2, any
  // layout) into the state; the errors are CheckpointTensors::Read's.
  // `bytes_spanned` (when given) grows by the bytes of the pieces the reads
  // span (datalayer::ByteSpanOf: from a part's first to its last byte in
  // each piece it meets): what the load touches of the files, as opposed
  // to what it keeps (a part of a row-major piece split along its columns
  // spans nearly the whole piece).
  Status Load(const datalayer::CheckpointData& checkpoint, int64_t* bytes_spanned = nullptr);
  // The sum (float64) of the values of the pieces this rank writes: over
  // all ranks of a layout, the whole state's sum, whatever the layout (so a
  // load into another layout can be checked against the writers').
  double Checksum();

 private:
  struct State;
  explicit CheckpointSpeedRank(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace maestro::runtime
