// SPDX-License-Identifier: Apache-2.0
// IndexSchedule (every promise of a schedule checked against its problem,
// and where every sample runs) and ImpliedTransfers (the messages that
// placement implies); declared in scheduler/scheduler.h.
#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "scheduler/prepared.h"
#include "scheduler/scheduler.h"

namespace maestro::scheduler {
namespace {

using internal::Idx;

// Ops: one F per micro-batch; one B after it when training; O last.
Status CheckOps(const SectionSpec& spec, const RankProgram& prog, const std::string& where) {
  std::vector<int> f(prog.micro_batches.size(), 0), bw(prog.micro_batches.size(), 0);
  int opt = 0;
  for (size_t o = 0; o < prog.ops.size(); ++o) {
    const Op& op = prog.ops[o];
    if (op.kind == OpKind::kOptimizer) {
      if (!spec.trains || o + 1 != prog.ops.size()) {
        return Status::InvalidArgument(where + ": an optimizer op must be the last op of a training section");
      }
      ++opt;
      continue;
    }
    if (op.micro_batch < 0 || static_cast<size_t>(op.micro_batch) >= prog.micro_batches.size()) {
      return Status::InvalidArgument(where + ": op names micro-batch " + std::to_string(op.micro_batch) + " of " +
                                     std::to_string(prog.micro_batches.size()));
    }
    const size_t b = static_cast<size_t>(op.micro_batch);
    if (op.kind == OpKind::kForward) {
      if (f[b]++ != 0)
        return Status::InvalidArgument(where + ": micro-batch " + std::to_string(b) + " has two forwards");
    } else {
      if (!spec.trains) return Status::InvalidArgument(where + ": a forward-only section has a backward op");
      if (f[b] == 0)
        return Status::InvalidArgument(where + ": backward of micro-batch " + std::to_string(b) +
                                       " before its forward");
      if (bw[b]++ != 0)
        return Status::InvalidArgument(where + ": micro-batch " + std::to_string(b) + " has two backwards");
    }
  }
  for (size_t b = 0; b < prog.micro_batches.size(); ++b) {
    if (f[b] != 1 || (spec.trains && bw[b] != 1)) {
      return Status::InvalidArgument(where + ": micro-batch " + std::to_string(b) +
                                     " is missing its forward or backward op");
    }
  }
  if (spec.trains && opt != 1) return Status::InvalidArgument(where + ": a training section needs one optimizer op");
  return Status::Ok();
}

// Every (section, sample) pair the problem activates has a place in `idx`.
Status CheckEveryActivatedSampleIsPlaced(const Problem& p, const ScheduleIndex& idx) {
  const int n = idx.num_samples;
  for (int s = 0; s < static_cast<int>(p.sections.size()); ++s) {
    for (int i = 0; i < n; ++i) {
      if (p.Activates(s, p.samples[static_cast<size_t>(i)]) && idx.rank[Idx(s, i, n)] < 0) {
        return Status::InvalidArgument("schedule: sample " + std::to_string(p.samples[static_cast<size_t>(i)].id) +
                                       " is never processed by section '" + p.sections[static_cast<size_t>(s)].name +
                                       "'");
      }
    }
  }
  return Status::Ok();
}

// Links: replica u of `from` and replica d of `to` are linked when their
// shares of [0, 1) overlap (plan::ReplicasLinked: the fan-out or fan-in map
// where one DP degree divides the other).
Status CheckFanOutMaps(const Problem& p, const ScheduleIndex& idx) {
  const int n = idx.num_samples;
  const int S = static_cast<int>(p.sections.size());
  std::vector<int> base(static_cast<size_t>(S) + 1, 0);
  for (int s = 0; s < S; ++s)
    base[static_cast<size_t>(s) + 1] = base[static_cast<size_t>(s)] + p.sections[static_cast<size_t>(s)].dp;
  for (const EdgeSpec& e : p.edges) {
    const int a = p.sections[static_cast<size_t>(e.from)].dp;
    const int b = p.sections[static_cast<size_t>(e.to)].dp;
    for (int i = 0; i < n; ++i) {
      const int ru = idx.rank[Idx(e.from, i, n)];
      const int rd = idx.rank[Idx(e.to, i, n)];
      if (ru < 0 || rd < 0) continue;
      const int u = ru - base[static_cast<size_t>(e.from)];
      const int d = rd - base[static_cast<size_t>(e.to)];
      const bool ok = plan::ReplicasLinked(u, a, d, b);
      if (!ok) {
        return Status::InvalidArgument("schedule: sample " + std::to_string(p.samples[static_cast<size_t>(i)].id) +
                                       " runs on replica " + std::to_string(u) + " of '" +
                                       p.sections[static_cast<size_t>(e.from)].name + "' and replica " +
                                       std::to_string(d) + " of '" + p.sections[static_cast<size_t>(e.to)].name +
                                       "', which are not linked (their shares of the batch do not overlap)");
      }
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ScheduleIndex> IndexSchedule(const Problem& p, const Schedule& sch) {
  Status st = ValidateProblem(p);
  if (!st.ok()) return st;
  const int n = static_cast<int>(p.samples.size());
  const int S = static_cast<int>(p.sections.size());
  const internal::SamplesById by_id(p);
  ScheduleIndex idx;
  idx.num_samples = n;
  idx.rank.assign(static_cast<size_t>(S) * static_cast<size_t>(n), -1);
  idx.micro_batch.assign(idx.rank.size(), -1);
  size_t expected = 0;
  for (int s = 0; s < S; ++s) expected += static_cast<size_t>(p.sections[static_cast<size_t>(s)].dp);
  if (sch.ranks.size() != expected) {
    return Status::InvalidArgument("schedule has " + std::to_string(sch.ranks.size()) +
                                   " rank programs; the problem has " + std::to_string(expected) + " section replicas");
  }
  size_t k = 0;
  for (int s = 0; s < S; ++s) {
    const SectionSpec& spec = p.sections[static_cast<size_t>(s)];
    for (int r = 0; r < spec.dp; ++r, ++k) {
      const RankProgram& prog = sch.ranks[k];
      const std::string where = "schedule: section '" + spec.name + "' replica " + std::to_string(r);
      if (prog.section != s || prog.replica != r) {
        return Status::InvalidArgument(where + ": rank programs are not sorted by (section, replica)");
      }
      for (size_t b = 0; b < prog.micro_batches.size(); ++b) {
        const auto& ids = prog.micro_batches[b].sample_ids;
        if (ids.empty() || ids.size() > static_cast<size_t>(spec.micro_batch)) {
          return Status::InvalidArgument(where + ": micro-batch " + std::to_string(b) + " has " +
                                         std::to_string(ids.size()) + " samples (micro_batch is " +
                                         std::to_string(spec.micro_batch) + ")");
        }
        for (uint64_t id : ids) {
          const int i = by_id.Find(id);
          if (i < 0) {
            return Status::InvalidArgument(where + ": sample " + std::to_string(id) + " is not in the global batch");
          }
          if (!p.Activates(s, p.samples[static_cast<size_t>(i)])) {
            return Status::InvalidArgument(where + ": sample " + std::to_string(id) +
                                           " does not activate this section");
          }
          const size_t at = Idx(s, i, n);
          if (idx.rank[at] >= 0) {
            return Status::InvalidArgument(where + ": sample " + std::to_string(id) +
                                           " is scheduled twice in this section");
          }
          idx.rank[at] = static_cast<int32_t>(k);
          idx.micro_batch[at] = static_cast<int32_t>(b);
        }
      }
      MAESTRO_RETURN_IF_ERROR(CheckOps(spec, prog, where));
    }
  }
  MAESTRO_RETURN_IF_ERROR(CheckEveryActivatedSampleIsPlaced(p, idx));
  MAESTRO_RETURN_IF_ERROR(CheckFanOutMaps(p, idx));
  return idx;
}

StatusOr<std::vector<Transfer>> ImpliedTransfers(const Problem& p, const Schedule& sch) {
  auto index = IndexSchedule(p, sch);
  if (!index.ok()) return index.status();
  const ScheduleIndex& idx = *index;
  const int n = idx.num_samples;
  struct Key {
    int edge, ur, umb, dr, dmb;
    uint64_t id;
    bool operator<(const Key& o) const {
      return std::tie(edge, ur, umb, dr, dmb, id) < std::tie(o.edge, o.ur, o.umb, o.dr, o.dmb, o.id);
    }
  };
  std::vector<Key> keys;
  for (size_t e = 0; e < p.edges.size(); ++e) {
    const EdgeSpec& edge = p.edges[e];
    for (int i = 0; i < n; ++i) {
      const int ru = idx.RankOf(edge.from, i);
      const int rd = idx.RankOf(edge.to, i);
      if (ru < 0 || rd < 0) continue;
      keys.push_back({static_cast<int>(e), sch.ranks[static_cast<size_t>(ru)].replica, idx.MicroBatchOf(edge.from, i),
                      sch.ranks[static_cast<size_t>(rd)].replica, idx.MicroBatchOf(edge.to, i),
                      p.samples[static_cast<size_t>(i)].id});
    }
  }
  std::sort(keys.begin(), keys.end());
  std::vector<Transfer> out;
  for (const Key& k : keys) {
    if (out.empty() || out.back().edge != k.edge || out.back().up_replica != k.ur ||
        out.back().up_micro_batch != k.umb || out.back().down_replica != k.dr || out.back().down_micro_batch != k.dmb) {
      Transfer t;
      t.edge = k.edge;
      t.up_replica = k.ur;
      t.up_micro_batch = k.umb;
      t.down_replica = k.dr;
      t.down_micro_batch = k.dmb;
      const EdgeSpec& edge = p.edges[static_cast<size_t>(k.edge)];
      t.gradient = p.CarriesGradient(edge);
      out.push_back(std::move(t));
    }
    out.back().sample_ids.push_back(k.id);
  }
  return out;
}

}  // namespace maestro::scheduler
