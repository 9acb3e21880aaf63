// SPDX-License-Identifier: Apache-2.0
// Problem preparation (see scheduler/prepared.h) and the single-sample
// dependency chains the wavefront order and the lower bound share.
#include "scheduler/prepared.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "base/graph.h"

namespace maestro::scheduler::internal {

Status Prepare(const Problem& p, Prepared* out) {
  Status st = ValidateProblem(p);
  if (!st.ok()) return st;
  Prepared& pr = *out;
  pr.p = &p;
  pr.n = static_cast<int>(p.samples.size());
  pr.S = static_cast<int>(p.sections.size());
  pr.in_edges.assign(static_cast<size_t>(pr.S), {});
  pr.out_edges.assign(static_cast<size_t>(pr.S), {});
  pr.grad_edge.assign(p.edges.size(), 0);
  for (size_t e = 0; e < p.edges.size(); ++e) {
    const EdgeSpec& edge = p.edges[e];
    pr.out_edges[static_cast<size_t>(edge.from)].push_back(static_cast<int>(e));
    pr.in_edges[static_cast<size_t>(edge.to)].push_back(static_cast<int>(e));
    pr.grad_edge[e] = p.CarriesGradient(edge);
  }
  pr.loss_section.assign(static_cast<size_t>(pr.S), 0);
  for (int s = 0; s < pr.S; ++s) {
    bool has_grad_out = false;
    for (int e : pr.out_edges[static_cast<size_t>(s)]) has_grad_out |= pr.grad_edge[static_cast<size_t>(e)] != 0;
    pr.loss_section[static_cast<size_t>(s)] = p.sections[static_cast<size_t>(s)].trains && !has_grad_out;
  }
  // Topological order, smallest index first among the ready ones (deterministic).
  pr.topo = TopologicalOrder(pr.S, p.SectionGraph());
  pr.L = 1;
  for (const SectionSpec& s : p.sections) {
    pr.L = std::lcm(pr.L, static_cast<int64_t>(s.dp));
    if (s.dp > pr.dp_max) {
      pr.dp_max = s.dp;
      pr.fifo_block = s.micro_batch;
    }
    if (pr.L > (1 << 16)) {
      return Status::InvalidArgument(
          "scheduler problem: the lcm of the DP degrees exceeds 65536; "
          "use DP degrees that divide one another");
    }
  }
  pr.rank_base.assign(static_cast<size_t>(pr.S) + 1, 0);
  for (int s = 0; s < pr.S; ++s) {
    pr.rank_base[static_cast<size_t>(s) + 1] =
        pr.rank_base[static_cast<size_t>(s)] + p.sections[static_cast<size_t>(s)].dp;
  }
  pr.num_ranks = pr.rank_base[static_cast<size_t>(pr.S)];
  pr.section_mask.assign(static_cast<size_t>(pr.n), 0);
  pr.fwd1.assign(static_cast<size_t>(pr.S) * static_cast<size_t>(pr.n), 0.0);
  pr.bwd1.assign(pr.fwd1.size(), 0.0);
  pr.xfer.assign(p.edges.size() * static_cast<size_t>(pr.n), 0.0);
  for (size_t e = 0; e < p.edges.size(); ++e) {
    for (int i = 0; i < pr.n; ++i) {
      const Sample& smp = p.samples[static_cast<size_t>(i)];
      if (p.Activates(p.edges[e].from, smp) && p.Activates(p.edges[e].to, smp)) {
        pr.xfer[Idx(static_cast<int>(e), i, pr.n)] = p.costs->TransferSeconds(static_cast<int>(e), smp);
      }
    }
  }
  std::vector<const Sample*> one(1);
  for (int i = 0; i < pr.n; ++i) {
    const Sample& smp = p.samples[static_cast<size_t>(i)];
    one[0] = &smp;
    for (int s = 0; s < pr.S; ++s) {
      if (!p.Activates(s, smp)) continue;
      pr.section_mask[static_cast<size_t>(i)] |= 1u << s;
      pr.fwd1[Idx(s, i, pr.n)] = p.costs->ForwardSeconds(s, one);
      if (p.sections[static_cast<size_t>(s)].trains) pr.bwd1[Idx(s, i, pr.n)] = p.costs->BackwardSeconds(s, one);
      const double f = pr.fwd1[Idx(s, i, pr.n)], b = pr.bwd1[Idx(s, i, pr.n)];
      if (!(f >= 0 && b >= 0 && std::isfinite(f) && std::isfinite(b))) {
        return Status::InvalidArgument("cost model: section '" + p.sections[static_cast<size_t>(s)].name +
                                       "' costs sample " + std::to_string(smp.id) + " " + std::to_string(f) +
                                       " s forward, " + std::to_string(b) +
                                       " s backward; costs must be finite and >= 0 (check the profile)");
      }
    }
  }
  for (double t : pr.xfer) {
    if (!(t >= 0 && std::isfinite(t))) {
      return Status::InvalidArgument("cost model: a transfer costs " + std::to_string(t) +
                                     " s; costs must be finite and >= 0 (check the link profile)");
    }
  }
  return Status::Ok();
}

std::vector<double> SampleChains(const Prepared& pr) {
  const Problem& p = *pr.p;
  const int n = pr.n;
  std::vector<double> out(static_cast<size_t>(n), 0.0);
  std::vector<double> ef(static_cast<size_t>(pr.S)), eb(static_cast<size_t>(pr.S));
  for (int i = 0; i < n; ++i) {
    double chain = 0;
    for (int s : pr.topo) {
      if (!Activ(pr, s, i)) continue;
      double start = 0;
      for (int e : pr.in_edges[static_cast<size_t>(s)]) {
        const int u = p.edges[static_cast<size_t>(e)].from;
        if (Activ(pr, u, i)) start = std::max(start, ef[static_cast<size_t>(u)] + pr.xfer[Idx(e, i, n)]);
      }
      ef[static_cast<size_t>(s)] = start + pr.fwd1[Idx(s, i, n)];
      chain = std::max(chain, ef[static_cast<size_t>(s)]);
    }
    for (auto it = pr.topo.rbegin(); it != pr.topo.rend(); ++it) {
      const int s = *it;
      if (!Activ(pr, s, i) || !p.sections[static_cast<size_t>(s)].trains) continue;
      double start = ef[static_cast<size_t>(s)];
      for (int e : pr.out_edges[static_cast<size_t>(s)]) {
        const int d = p.edges[static_cast<size_t>(e)].to;
        if (pr.grad_edge[static_cast<size_t>(e)] && Activ(pr, d, i)) {
          start = std::max(start, eb[static_cast<size_t>(d)] + pr.xfer[Idx(e, i, n)]);
        }
      }
      eb[static_cast<size_t>(s)] = start + pr.bwd1[Idx(s, i, n)];
      chain = std::max(chain, eb[static_cast<size_t>(s)] + p.costs->OptimizerSeconds(s));
    }
    out[static_cast<size_t>(i)] = chain;
  }
  return out;
}

}  // namespace maestro::scheduler::internal
