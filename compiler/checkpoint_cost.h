// SPDX-License-Identifier: Apache-2.0
// What a checkpoint of a plan costs (issue #39 item 4): the state it holds
// and how long its write takes, for the report, and the check that a
// pre-timeout signal leaves time to write it.
//
// The state is what runtime/checkpoint_slices.h writes: per training
// component, fp32 weights (4 bytes a parameter) and AdamW's two fp32
// moments (8 bytes). Each rank writes only the pieces it owns: the weights
// from one replica (DP 0, CP 0) split over its TP x PP ranks; the moments
// from the same ranks, or, under ZeRO-1, from every DP x CP rank. Ranks
// write in parallel, so the write takes as long as the node that writes the
// most: a replica's ranks share nodes (TP innermost), so a node holds at
// most GPUs-per-node of a section's writers; in local mode (one machine)
// every section's writers share it. The file system's write speed per node
// is [cluster] checkpoint_write_gbps (kDefaultCheckpointWriteGBps says why
// its default is what it is).
//
// Owns: CheckpointCost, PredictCheckpoint, SignalLeadWarning.
// May call: plan, compiler/model.h (parameter counts), compiler/spec_types.h.
// Thread safety: functions of values.
#pragma once

#include <string>

#include "compiler/spec_types.h"
#include "plan/plan.h"

namespace maestro::compiler {

struct CheckpointCost {
  double state_bytes = 0;         // every training component's weights and moments
  double busiest_node_bytes = 0;  // what the node that writes the most writes
  double write_bytes_per_s = 0;   // per node ([cluster] checkpoint_write_gbps)
  double write_seconds = 0;       // busiest_node_bytes / write_bytes_per_s
};

// The checkpoint of `plan` compiled from `spec` (its cluster's GPUs per
// node, its local mode, its checkpoint_write_gbps). Zero bytes when nothing
// trains.
CheckpointCost PredictCheckpoint(const Spec& spec, const plan::Plan& plan);

// A warning line when the spec asks Slurm for a pre-timeout signal ([job]
// signal_seconds > 0) that leaves less than a step plus the predicted write
// (the signal is taken at the next step's end, then the checkpoint is
// written at once): the job would be killed mid-save and lose the work
// since the previous checkpoint. "" when the lead time suffices or no
// signal is asked for. `step_seconds`: the plan's predicted step.
std::string SignalLeadWarning(const Spec& spec, const CheckpointCost& cost, double step_seconds);

}  // namespace maestro::compiler
