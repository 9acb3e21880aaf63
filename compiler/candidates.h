// SPDX-License-Identifier: Apache-2.0
// The configurations the planner may choose for a section, and the rules that
// gate them (the one home of each):
//   - TP must split the model as the runtime splits it (heads, KV heads,
//     MLP widths: plan/tensor_parallel_split.h): TpSplitsHeads;
//   - PP splits the layers evenly, CP splits the tokens into 2 * CP chunks;
//   - the GPU count is a divisor of a node or whole nodes (a het component
//     is part of one node or whole nodes), any count where sections share
//     nodes (DeviceType::packs_nodes);
//   - no more DP replicas than samples to give them (MaxUsefulDp);
//   - pins hold;
//   - the parallel features of a configuration that the runtime lacks
//     (ConfigOnlyFeatures; PlannerOnlyFeatures, compiler/runtime_support.h,
//     adds the model's own features such as MoE) exclude it unless
//     PlannerOptions::allow_planner_only.
// Memory is not checked here: the cost model says what fits.
// May call: base, plan, compiler/cost_model.h, compiler/runtime_support.h.
// Thread safety: pure functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include "compiler/cost_model.h"
#include "compiler/runtime_support.h"
#include "plan/plan.h"

namespace maestro::compiler {

struct PlannerOptions {
  bool allow_planner_only = false;  // search configurations the runtime cannot run yet
  RuntimeSupport support = kRuntimeSupport;
  std::vector<int> micro_batches = {1, 2, 4, 8, 16, 32};
  int max_pp = 64;
  int max_cp = 8;
  // Every edge's DP degrees divide one another (the fan-out and fan-in maps).
  // Off: any two degrees, linked by overlapping shares (plan::EdgeDpRuleHolds);
  // the compile plans both ways and keeps the faster simulated step.
  bool nested_dp_edges = false;
};

// The most placement slots a plan may have: the lcm of its DP degrees
// (scheduler/prepared.h). Placing a sample scans the slots of the sections
// it activates, so the planner keeps them few (43 -> 21 replicas: 903).
inline constexpr int64_t kMostDpSlots = 4096;

// Do DP degrees `from_dp` -> `to_dp` suit an edge pinned to `fanout` /
// `fanin` (0: not pinned) under `options`: the edge's rule
// (plan::EdgeDpRuleHolds), one dividing the other under nested_dp_edges, and
// an lcm of at most kMostDpSlots.
bool EdgeDpsAllowed(int from_dp, int to_dp, int fanout, int fanin, const PlannerOptions& options);

// The lcm of `dps` (placement slots), or kMostDpSlots + 1 once past it.
int64_t DpSlots(const std::vector<int>& dps);

// Every structurally valid configuration of a section (degrees divide the
// model, the GPU count is a divisor or multiple of a node, pins hold,
// runtime-supported unless options.allow_planner_only). Memory not checked.
std::vector<plan::ParallelConfig> CandidateConfigs(const CostModel& model, const SectionWork& section,
                                                   const PlannerOptions& options);

// A configuration with these degrees, micro-batch and recomputation; ZeRO-1
// (zero_stage = 1) when `support` shards the optimizer states, else
// zero_stage = 0, so plan.json says what the runtime does (with DP = 1 the
// runtime runs zero_stage = 1 as 0: nothing to shard).
plan::ParallelConfig ConfigOf(int tp, int pp, int cp, int dp, int micro_batch, bool recompute,
                              const RuntimeSupport& support = kRuntimeSupport);

// Encoders and projectors: every kind but the decoder.
bool IsEncoder(const plan::ModelDesc& model);

// Does TP degree `tp` split the model as the runtime splits it: its attention
// heads (a decoder's KV heads too: the runtime does not replicate KV heads;
// its ffn_hidden, and a MoE's expert widths, moe_ffn_hidden and
// shared_expert_ffn_hidden), an encoder's MLP inner units (ffn_hidden, a ViT
// merger's hidden), a projector's out_dim? The runtime's rule, from its one
// home: plan/tensor_parallel_split.h.
bool TpSplitsHeads(const plan::ModelDesc& model, int tp);

// The largest number of DP replicas that can all get work.
int MaxUsefulDp(const CostModel& model, const SectionWork& section);

// Parallel features of a config that the runtime lacks (model features such
// as MoE excluded: those make a section planner-only whatever its config).
std::string ConfigOnlyFeatures(const plan::ModelDesc& model, const plan::ParallelConfig& config,
                               const RuntimeSupport& support);

}  // namespace maestro::compiler
