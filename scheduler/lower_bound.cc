// SPDX-License-Identifier: Apache-2.0
// ComputeLowerBound (declared in scheduler/scheduler.h): the step's lower
// bound, max(each section's full-micro-batch work over its replicas, the
// longest single-sample dependency chain).
#include <algorithm>
#include <vector>

#include "scheduler/prepared.h"
#include "scheduler/scheduler.h"

namespace maestro::scheduler {

using internal::Activ;
using internal::Prepare;
using internal::Prepared;
using internal::SampleChains;

StatusOr<LowerBound> ComputeLowerBound(const Problem& p) {
  Prepared pr;
  Status st = Prepare(p, &pr);
  if (!st.ok()) return st;
  const int n = pr.n;
  LowerBound lb;
  lb.section_seconds.assign(static_cast<size_t>(pr.S), 0.0);
  std::vector<const Sample*> chunk;
  for (int s = 0; s < pr.S; ++s) {
    const SectionSpec& spec = p.sections[static_cast<size_t>(s)];
    double work = 0;
    chunk.clear();
    auto flush = [&] {
      if (chunk.empty()) return;
      work += p.costs->ForwardSeconds(s, chunk);
      if (spec.trains) work += p.costs->BackwardSeconds(s, chunk);
      chunk.clear();
    };
    for (int i = 0; i < n; ++i) {
      if (!Activ(pr, s, i)) continue;
      chunk.push_back(&p.samples[static_cast<size_t>(i)]);
      if (static_cast<int>(chunk.size()) == spec.micro_batch) flush();
    }
    flush();
    double v = work / spec.dp;
    if (spec.trains) v += p.costs->OptimizerSeconds(s);
    lb.section_seconds[static_cast<size_t>(s)] = v;
    if (lb.bottleneck_section < 0 || v > lb.section_seconds[static_cast<size_t>(lb.bottleneck_section)])
      lb.bottleneck_section = s;
  }
  // Longest chain of one sample: forward down the DAG, backward back up.
  for (double c : SampleChains(pr)) lb.critical_path_seconds = std::max(lb.critical_path_seconds, c);
  lb.seconds = lb.critical_path_seconds;
  for (double v : lb.section_seconds) lb.seconds = std::max(lb.seconds, v);
  return lb;
}

}  // namespace maestro::scheduler
