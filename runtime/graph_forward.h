// SPDX-License-Identifier: Apache-2.0
// Every section of a plan in one process over a set of samples: what the
// monolithic reference (runtime/reference.h) trains with and the
// evaluations (runtime/evaluation.h) measure with.
// May call: runtime/section_runner, runtime/micro_batch, plan (plan_graph:
// the order and the activation rule), datasets, base, libtorch.
// Torch-internal. Thread safety: one thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "datasets/sample_source.h"
#include "runtime/section_runner.h"

namespace maestro::runtime {

// One section's output rows by sample id (each (row...) with its graph).
using RowsBySample = std::unordered_map<int64_t, torch::Tensor>;

// Per input edge of a section (`in_edges`: plan edge indices), the rows that
// its upstream section made for `sample_ids` (rows[upstream section index]),
// in that order, stacked (n_e, row...); an edge whose upstream made none of
// them is left out. How rows pass between sections run in one process (here
// and inside a fused section).
std::map<int, torch::Tensor> UpstreamRows(const plan::Plan& plan, const std::vector<int>& in_edges,
                                          const std::vector<RowsBySample>& rows,
                                          const std::vector<int64_t>& sample_ids);

// Runs every section of `plan` (no fused sections: ExpandFusedSections
// first; runners[s] is section s's) over the samples `ids` of `split`, in
// topological order, micro-batch by micro-batch (chunk = the section's
// micro_batch, or `chunk` when > 0), each section on the samples that
// activate it, connecting the sections' tensors directly so autograd spans
// the graph. Returns the sum of the sinks' losses and counts
// (SectionRunner::Output::AddLossAndCounts; rows undefined).
StatusOr<SectionRunner::Output> GraphForward(const plan::Plan& plan,
                                             std::vector<std::unique_ptr<SectionRunner>>& runners,
                                             const datasets::SampleSource& samples, const std::vector<int64_t>& ids,
                                             datasets::Split split, int64_t chunk);

}  // namespace maestro::runtime
