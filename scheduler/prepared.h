// SPDX-License-Identifier: Apache-2.0
// Internal to scheduler/ (the policies, the index, the lower bound): what
// every policy derives from a problem once, before placing or ordering a
// single sample. Not part of the public API (scheduler/scheduler.h is).
//
// Owns: Prepared (the section graph's adjacency and topological order,
// which edges carry gradients, the loss sections, the lcm L of the DP
// degrees, each sample's activated sections, single-sample costs, the first
// scheduler rank of each section), Prepare(), the (section, sample) flat
// index, the slot -> replica map, each sample's dependency chain, and the
// sample index by id (IndexSchedule and Simulate read ids back).
// May call: base, scheduler/problem.h.
// Called by: the rest of scheduler/ (the simulator included) only.
//
// Thread safety: Prepared is a value (it points at its Problem, which must
// outlive it); the functions are pure.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/status.h"
#include "scheduler/problem.h"

namespace maestro::scheduler::internal {

// Arrays over (section, sample) are flattened as section * n + sample (the
// layout of ScheduleIndex too); arrays over (edge, sample) likewise.
inline size_t Idx(int section, int sample, int n) {
  return static_cast<size_t>(section) * static_cast<size_t>(n) + static_cast<size_t>(sample);
}

// Everything the policies derive from a problem once.
struct Prepared {
  const Problem* p = nullptr;
  int n = 0;  // samples
  int S = 0;  // sections
  int64_t L = 1;
  int64_t dp_max = 0;
  int64_t fifo_block = 1;  // micro_batch of the section with the most replicas
  std::vector<int> topo;   // sections in topological order
  std::vector<std::vector<int>> in_edges, out_edges;
  std::vector<char> grad_edge;         // per edge: a gradient comes back
  std::vector<char> loss_section;      // trains, no gradient out-edge
  std::vector<uint32_t> section_mask;  // per sample: sections it activates
  std::vector<double> fwd1, bwd1;      // (section, sample): single-sample seconds
  std::vector<double> xfer;            // (edge, sample): transfer seconds
  std::vector<int> rank_base;          // first rank index of each section
  int num_ranks = 0;
};

// Validates `p` (ValidateProblem, the lcm of the DP degrees at most 65536,
// finite non-negative costs) and fills `out`; `out` points at `p`.
Status Prepare(const Problem& p, Prepared* out);

// True when sample i is processed by section s.
inline bool Activ(const Prepared& pr, int s, int i) {
  return (pr.section_mask[static_cast<size_t>(i)] >> s) & 1u;
}

// Every consistent placement of a sample is a slot in [0, L): its replica in
// section s is slot * dp_s / L (nested floor divisions keep every fan-out
// and fan-in map).
inline int ReplicaOfSlot(const Prepared& pr, int s, int64_t slot) {
  return static_cast<int>(slot * pr.p->sections[static_cast<size_t>(s)].dp / pr.L);
}

// Sample indices (positions in Problem::samples) by Sample::id, for the ids
// a schedule's micro-batches list.
class SamplesById {
 public:
  explicit SamplesById(const Problem& p) : by_id_(p.samples.size()) {
    for (size_t i = 0; i < p.samples.size(); ++i) by_id_[i] = {p.samples[i].id, static_cast<int>(i)};
    std::sort(by_id_.begin(), by_id_.end());
  }
  // The index of the sample with `id`, or -1 when the batch has none.
  int Find(uint64_t id) const {
    auto it = std::lower_bound(by_id_.begin(), by_id_.end(), std::make_pair(id, -1));
    return it == by_id_.end() || it->first != id ? -1 : it->second;
  }

 private:
  std::vector<std::pair<uint64_t, int>> by_id_;  // sorted
};

// Per sample: the longest dependency chain of the sample alone (forward
// down the DAG, backward back up, optimizer after), with single-sample costs.
std::vector<double> SampleChains(const Prepared& pr);

}  // namespace maestro::scheduler::internal
