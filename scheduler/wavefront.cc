// SPDX-License-Identifier: Apache-2.0
// The wavefront list scheduler (see scheduler/wavefront.h). One
// WavefrontScheduler per call: the wave order first, then the rank states
// and the first events, then events in (time, sequence) order, each touched
// rank dispatched in rank order once per instant.
#include "scheduler/wavefront.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "base/checks.h"
#include "base/splitmix.h"

namespace maestro::scheduler::internal {
namespace {

enum class EventKind : uint8_t { kRankFree, kArrive, kGradReady };
struct Event {
  double time = 0;
  uint64_t seq = 0;
  EventKind kind = EventKind::kRankFree;
  int rank = 0;
  int payload = 0;                        // sample (kArrive) or micro-batch (kGradReady)
  bool operator<(const Event& o) const {  // min-heap on (time, seq)
    return time != o.time ? time > o.time : seq > o.seq;
  }
};

struct RankState {
  int section = 0;
  // Samples whose inputs have arrived; the smallest key goes first.
  // A min-heap (std::greater) of keys tier * n + wave rank; unique per sample.
  std::vector<int> available;
  int to_arrive = 0;  // samples of this rank not yet available
  int unformed = 0;   // samples not yet in a micro-batch
  bool busy = false;
  int loss_backward = -1;  // loss section: the mb whose B comes next
  std::priority_queue<int, std::vector<int>, std::greater<int>> backward_ready;
  int backwards_left = 0;
  bool optimizer_done = false;
  int cap_relief = 0;                        // in-flight micro-batches allowed over the cap (deadlock relief)
  std::vector<int> pending_grad;             // per micro-batch
  std::vector<double> grad_ready_at;         // per micro-batch
  std::vector<std::vector<int>> mb_samples;  // sample indices
};

class WavefrontScheduler {
 public:
  WavefrontScheduler(const Prepared& pr, const Placement& place, int max_in_flight)
      : pr_(pr), p_(*pr.p), place_(place), n_(pr.n), max_in_flight_(max_in_flight) {}

  StatusOr<Schedule> Run(uint64_t tie_seed);

 private:
  // Fills wave_rank_ and wave_order_.
  void BuildWaveOrder(uint64_t tie_seed);
  // Rank states, the per-(section, sample) arrays, the samples available
  // from the start and the first events; then the empty rank programs.
  void SeedRanks();
  void SeedPrograms();
  // Processes every event; with an in-flight cap, relieves stalls.
  void RunEvents();
  Status CheckEveryRankFinished() const;

  // Samples that came from upstream go first (their upstream is waiting for
  // the gradient, or more of them are in flight); samples that need no
  // upstream fill in while upstream work is in flight.
  int PriorityOf(int i, bool from_upstream) const {
    return (from_upstream ? 0 : n_) + wave_rank_[static_cast<size_t>(i)];
  }
  int SampleOfKey(int key) const { return wave_order_[static_cast<size_t>(key % std::max(n_, 1))]; }
  static void PushAvailable(RankState& rs, int key) {
    rs.available.push_back(key);
    std::push_heap(rs.available.begin(), rs.available.end(), std::greater<int>());
  }
  int RankOf(int s, int i) const { return pr_.rank_base[static_cast<size_t>(s)] + place_[Idx(s, i, n_)]; }
  void PushEvent(double time, EventKind kind, int rank, int payload) {
    events_.push({time, seq_++, kind, rank, payload});
  }

  // Rank rk starts op (kind, mb) at time t.
  void StartOp(int rk, double t, OpKind kind, int mb);
  // After the forward of micro-batch mb of rank rk ends at tf: its samples
  // head downstream; its backward waits for their gradients (or, on a loss
  // section, comes next).
  void SendActivations(int rk, int mb, double tf);
  // After the backward of micro-batch mb of rank rk ends at tf: its
  // samples' gradients head upstream.
  void SendGradients(int rk, int mb, double tf);
  // Rank rk forms its next micro-batch from its available samples and starts its forward.
  void FormForward(int rk, double t);
  // Rank rk, if idle, starts its next op.
  void Dispatch(int rk, double t);
  // With an in-flight cap, two capped branches that meet in one sample can
  // wait on each other. When nothing is left to happen but work remains, the
  // lowest capped rank with samples waiting may go one micro-batch over.
  bool RelieveStall();

  const Prepared& pr_;
  const Problem& p_;
  const Placement& place_;
  const int n_;
  const int max_in_flight_;

  std::vector<int> wave_rank_;   // sample -> wave rank
  std::vector<int> wave_order_;  // wave rank -> sample
  std::vector<RankState> ranks_;
  // (section, sample): upstream sections still to deliver, whether any
  // upstream exists, when the last input arrives, the micro-batch it is in.
  std::vector<int> pending_in_;
  std::vector<char> has_upstream_;
  std::vector<double> ready_at_;
  std::vector<int32_t> mb_of_;
  std::priority_queue<Event> events_;
  uint64_t seq_ = 0;
  Schedule sch_;
  std::vector<const Sample*> buf_;  // the samples of the op being priced
  double makespan_ = 0;
  double makespan_so_far_ = 0;  // the time of the events being processed
  std::vector<int> touched_;
  std::vector<char> is_touched_;
};

StatusOr<Schedule> WavefrontScheduler::Run(uint64_t tie_seed) {
  BuildWaveOrder(tie_seed);
  SeedRanks();
  SeedPrograms();
  RunEvents();
  MAESTRO_RETURN_IF_ERROR(CheckEveryRankFinished());
  sch_.predicted_step_seconds = makespan_;
  return std::move(sch_);
}

// The wave order: one global priority shared by every section, so that
// producers meeting at a join emit the same samples first. Samples whose
// dependency chain outside their heaviest section is longest (upstream
// encoders before, their backward after) lead; among equals, longest first.
void WavefrontScheduler::BuildWaveOrder(uint64_t tie_seed) {
  const int n = n_;
  const std::vector<double> chain = SampleChains(pr_);
  std::vector<uint64_t> tie(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    tie[static_cast<size_t>(i)] = SplitMix64(tie_seed ^ p_.samples[static_cast<size_t>(i)].id);
  wave_rank_.resize(static_cast<size_t>(n));
  std::vector<double> lead(static_cast<size_t>(n)), total(static_cast<size_t>(n));
  std::vector<double> heavy_cost(static_cast<size_t>(n));
  std::vector<int> heavy_rank(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    double heaviest = 0, sum = 0;
    for (int s = 0; s < pr_.S; ++s) {
      const double c = pr_.fwd1[Idx(s, i, n)] + pr_.bwd1[Idx(s, i, n)];
      if (c > heaviest) {
        heaviest = c;
        heavy_rank[static_cast<size_t>(i)] = pr_.rank_base[static_cast<size_t>(s)] + place_[Idx(s, i, n)];
      }
      sum += c;
    }
    heavy_cost[static_cast<size_t>(i)] = heaviest;
    lead[static_cast<size_t>(i)] = chain[static_cast<size_t>(i)] - heaviest;
    total[static_cast<size_t>(i)] = sum;
  }
  struct WaveKey {
    double lead, total;
    uint64_t tie;
    int index;
  };
  std::vector<WaveKey> keys(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    keys[static_cast<size_t>(i)] = {lead[static_cast<size_t>(i)], total[static_cast<size_t>(i)],
                                    tie[static_cast<size_t>(i)], i};
  }
  std::sort(keys.begin(), keys.end(), [](const WaveKey& a, const WaveKey& b) {
    if (a.lead != b.lead) return a.lead > b.lead;
    if (a.total != b.total) return a.total > b.total;
    if (a.tie != b.tie) return a.tie < b.tie;
    return a.index < b.index;
  });
  // Interleave the replicas: a sample's key is the work its heaviest
  // section's replica has ahead of it in this order, so every replica gets
  // its first samples first (rather than one replica's whole list first).
  std::vector<double> ahead(static_cast<size_t>(pr_.num_ranks), 0.0);
  std::vector<std::pair<double, int>> timed(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) {
    const int i = keys[static_cast<size_t>(k)].index;
    double& a = ahead[static_cast<size_t>(heavy_rank[static_cast<size_t>(i)])];
    timed[static_cast<size_t>(k)] = {a, k};
    a += heavy_cost[static_cast<size_t>(i)];
  }
  std::sort(timed.begin(), timed.end());
  std::vector<int> order(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k)
    order[static_cast<size_t>(k)] = keys[static_cast<size_t>(timed[static_cast<size_t>(k)].second)].index;
  for (int k = 0; k < n; ++k) wave_rank_[static_cast<size_t>(order[static_cast<size_t>(k)])] = k;
  wave_order_ = std::move(order);
}

void WavefrontScheduler::SeedRanks() {
  const int n = n_;
  ranks_.resize(static_cast<size_t>(pr_.num_ranks));
  for (int s = 0; s < pr_.S; ++s) {
    for (int r = 0; r < p_.sections[static_cast<size_t>(s)].dp; ++r)
      ranks_[static_cast<size_t>(pr_.rank_base[static_cast<size_t>(s)] + r)].section = s;
  }
  pending_in_.assign(static_cast<size_t>(pr_.S) * static_cast<size_t>(n), 0);
  has_upstream_.assign(pending_in_.size(), 0);
  ready_at_.assign(pending_in_.size(), 0.0);
  mb_of_.assign(pending_in_.size(), -1);
  std::vector<Event> event_storage;
  event_storage.reserve(static_cast<size_t>(n) * 2 + static_cast<size_t>(pr_.num_ranks) * 4);
  events_ = std::priority_queue<Event>(std::less<Event>(), std::move(event_storage));

  for (int i = 0; i < n; ++i) {
    for (int s = 0; s < pr_.S; ++s) {
      if (Activ(pr_, s, i)) ++ranks_[static_cast<size_t>(RankOf(s, i))].unformed;
    }
  }
  for (int rk = 0; rk < pr_.num_ranks; ++rk) {
    RankState& rs = ranks_[static_cast<size_t>(rk)];
    rs.available.reserve(static_cast<size_t>(rs.unformed));
    const size_t mbs = static_cast<size_t>(rs.unformed) + 1;  // an upper bound on micro-batches
    rs.mb_samples.reserve(mbs);
    rs.pending_grad.reserve(mbs);
    rs.grad_ready_at.reserve(mbs);
  }
  for (int i = 0; i < n; ++i) {
    for (int s = 0; s < pr_.S; ++s) {
      if (!Activ(pr_, s, i)) continue;
      RankState& rs = ranks_[static_cast<size_t>(RankOf(s, i))];
      ++rs.to_arrive;
      int k = 0;
      for (int e : pr_.in_edges[static_cast<size_t>(s)])
        k += Activ(pr_, p_.edges[static_cast<size_t>(e)].from, i) ? 1 : 0;
      pending_in_[Idx(s, i, n)] = k;
      has_upstream_[Idx(s, i, n)] = k > 0;
      if (k == 0) {  // available from the start: no event needed
        RankState& src = ranks_[static_cast<size_t>(RankOf(s, i))];
        --src.to_arrive;
        PushAvailable(src, PriorityOf(i, false));
        if (!src.busy) PushEvent(0.0, EventKind::kRankFree, RankOf(s, i), 0);
        src.busy = true;  // marks "kick already queued"; the event clears it
      }
    }
  }
}

void WavefrontScheduler::SeedPrograms() {
  sch_.ranks.resize(static_cast<size_t>(pr_.num_ranks));
  for (int s = 0; s < pr_.S; ++s) {
    for (int r = 0; r < p_.sections[static_cast<size_t>(s)].dp; ++r) {
      RankProgram& prog = sch_.ranks[static_cast<size_t>(pr_.rank_base[static_cast<size_t>(s)] + r)];
      prog.section = s;
      prog.replica = r;
      const int cnt = ranks_[static_cast<size_t>(pr_.rank_base[static_cast<size_t>(s)] + r)].unformed;
      prog.micro_batches.reserve(static_cast<size_t>(cnt / p_.sections[static_cast<size_t>(s)].micro_batch + 2));
      prog.ops.reserve(static_cast<size_t>(cnt) + 2);
    }
  }
  for (int rk = 0; rk < pr_.num_ranks; ++rk) {
    if (ranks_[static_cast<size_t>(rk)].unformed == 0 &&
        p_.sections[static_cast<size_t>(ranks_[static_cast<size_t>(rk)].section)].trains) {
      PushEvent(0.0, EventKind::kRankFree, rk, 0);  // optimizer only
    }
  }
}

void WavefrontScheduler::StartOp(int rk, double t, OpKind kind, int mb) {
  RankState& rs = ranks_[static_cast<size_t>(rk)];
  const int s = rs.section;
  RankProgram& prog = sch_.ranks[static_cast<size_t>(rk)];
  double dur = 0;
  if (kind == OpKind::kOptimizer) {
    dur = p_.costs->OptimizerSeconds(s);
    rs.optimizer_done = true;
    prog.ops.push_back({OpKind::kOptimizer, -1});
  } else {
    buf_.clear();
    for (int i : rs.mb_samples[static_cast<size_t>(mb)]) buf_.push_back(&p_.samples[static_cast<size_t>(i)]);
    dur = kind == OpKind::kForward ? p_.costs->ForwardSeconds(s, buf_) : p_.costs->BackwardSeconds(s, buf_);
    prog.ops.push_back({kind, mb});
  }
  const double tf = t + dur;
  makespan_ = std::max(makespan_, tf);
  rs.busy = true;
  PushEvent(tf, EventKind::kRankFree, rk, 0);
  if (kind == OpKind::kForward) {
    SendActivations(rk, mb, tf);
  } else if (kind == OpKind::kBackward) {
    SendGradients(rk, mb, tf);
  }
}

void WavefrontScheduler::SendActivations(int rk, int mb, double tf) {
  const int n = n_;
  RankState& rs = ranks_[static_cast<size_t>(rk)];
  const int s = rs.section;
  int grads = 0;
  for (int i : rs.mb_samples[static_cast<size_t>(mb)]) {
    for (int e : pr_.out_edges[static_cast<size_t>(s)]) {
      const int d = p_.edges[static_cast<size_t>(e)].to;
      if (!Activ(pr_, d, i)) continue;
      if (pr_.grad_edge[static_cast<size_t>(e)]) ++grads;
      const size_t di = Idx(d, i, n);
      ready_at_[di] = std::max(ready_at_[di], tf + pr_.xfer[Idx(e, i, n)]);
      if (--pending_in_[di] == 0) PushEvent(ready_at_[di], EventKind::kArrive, RankOf(d, i), i);
    }
  }
  if (p_.sections[static_cast<size_t>(s)].trains) {
    if (pr_.loss_section[static_cast<size_t>(s)]) {
      rs.loss_backward = mb;
    } else {
      rs.pending_grad[static_cast<size_t>(mb)] = grads;
      if (grads == 0) PushEvent(tf, EventKind::kGradReady, rk, mb);
    }
  }
}

void WavefrontScheduler::SendGradients(int rk, int mb, double tf) {
  const int n = n_;
  RankState& rs = ranks_[static_cast<size_t>(rk)];
  const int s = rs.section;
  --rs.backwards_left;
  for (int i : rs.mb_samples[static_cast<size_t>(mb)]) {
    for (int e : pr_.in_edges[static_cast<size_t>(s)]) {
      if (!pr_.grad_edge[static_cast<size_t>(e)]) continue;
      const int u = p_.edges[static_cast<size_t>(e)].from;
      if (!Activ(pr_, u, i)) continue;
      const int urk = RankOf(u, i);
      RankState& us = ranks_[static_cast<size_t>(urk)];
      const int umb = mb_of_[Idx(u, i, n)];
      double& at = us.grad_ready_at[static_cast<size_t>(umb)];
      at = std::max(at, tf + pr_.xfer[Idx(e, i, n)]);
      if (--us.pending_grad[static_cast<size_t>(umb)] == 0) PushEvent(at, EventKind::kGradReady, urk, umb);
    }
  }
}

void WavefrontScheduler::FormForward(int rk, double t) {
  RankState& rs = ranks_[static_cast<size_t>(rk)];
  const int s = rs.section;
  const int mb = static_cast<int>(rs.mb_samples.size());
  // A producer's first micro-batch is a quarter size: its consumers start
  // sooner (pipeline fill), at the price of one more small micro-batch.
  int cap = p_.sections[static_cast<size_t>(s)].micro_batch;
  if (mb == 0 && !pr_.out_edges[static_cast<size_t>(s)].empty()) cap = std::max(1, (cap + 3) / 4);
  std::vector<int> members;
  MicroBatch out;
  out.sample_ids.reserve(static_cast<size_t>(cap));
  members.reserve(static_cast<size_t>(cap));
  while (!rs.available.empty() && static_cast<int>(members.size()) < cap) {
    std::pop_heap(rs.available.begin(), rs.available.end(), std::greater<int>());
    const int i = SampleOfKey(rs.available.back());
    rs.available.pop_back();
    members.push_back(i);
    mb_of_[Idx(s, i, n_)] = mb;
    out.sample_ids.push_back(p_.samples[static_cast<size_t>(i)].id);
  }
  rs.unformed -= static_cast<int>(members.size());
  rs.mb_samples.push_back(std::move(members));
  rs.pending_grad.push_back(0);
  rs.grad_ready_at.push_back(0.0);
  if (p_.sections[static_cast<size_t>(s)].trains) ++rs.backwards_left;
  sch_.ranks[static_cast<size_t>(rk)].micro_batches.push_back(std::move(out));
  StartOp(rk, t, OpKind::kForward, mb);
}

void WavefrontScheduler::Dispatch(int rk, double t) {
  RankState& rs = ranks_[static_cast<size_t>(rk)];
  if (rs.busy) return;
  const SectionSpec& spec = p_.sections[static_cast<size_t>(rs.section)];
  if (rs.loss_backward >= 0) {
    const int mb = rs.loss_backward;
    rs.loss_backward = -1;
    StartOp(rk, t, OpKind::kBackward, mb);
    return;
  }
  // A memory cap: a training section that waits for gradients holds at
  // most max_in_flight micro-batches between their forward and backward.
  const bool may_forward = max_in_flight_ <= 0 || !spec.trains || rs.backwards_left < max_in_flight_ + rs.cap_relief;
  const int avail = may_forward ? static_cast<int>(rs.available.size()) : 0;
  if (avail >= spec.micro_batch || (avail > 0 && rs.to_arrive == 0)) {
    FormForward(rk, t);
  } else if (!rs.backward_ready.empty()) {
    const int mb = rs.backward_ready.top();
    rs.backward_ready.pop();
    StartOp(rk, t, OpKind::kBackward, mb);
  } else if (avail > 0) {
    FormForward(rk, t);  // work-conserving: a partial micro-batch
  } else if (spec.trains && rs.unformed == 0 && rs.backwards_left == 0 && !rs.optimizer_done) {
    StartOp(rk, t, OpKind::kOptimizer, -1);
  }
}

bool WavefrontScheduler::RelieveStall() {
  for (int rk = 0; rk < pr_.num_ranks; ++rk) {
    RankState& rs = ranks_[static_cast<size_t>(rk)];
    if (!rs.busy && !rs.available.empty()) {
      ++rs.cap_relief;
      PushEvent(makespan_so_far_, EventKind::kRankFree, rk, 0);
      rs.busy = true;
      return true;
    }
  }
  return false;
}

void WavefrontScheduler::RunEvents() {
  is_touched_.assign(static_cast<size_t>(pr_.num_ranks), 0);
  while (!events_.empty() || (max_in_flight_ > 0 && RelieveStall())) {
    const double t = events_.top().time;
    makespan_so_far_ = t;
    touched_.clear();
    while (!events_.empty() && events_.top().time == t) {
      const Event ev = events_.top();
      events_.pop();
      RankState& rs = ranks_[static_cast<size_t>(ev.rank)];
      switch (ev.kind) {
        case EventKind::kRankFree: rs.busy = false; break;
        case EventKind::kArrive:
          --rs.to_arrive;
          PushAvailable(rs, PriorityOf(ev.payload, has_upstream_[Idx(rs.section, ev.payload, n_)] != 0));
          break;
        case EventKind::kGradReady: rs.backward_ready.push(ev.payload); break;
      }
      if (!is_touched_[static_cast<size_t>(ev.rank)]) {
        is_touched_[static_cast<size_t>(ev.rank)] = 1;
        touched_.push_back(ev.rank);
      }
    }
    std::sort(touched_.begin(), touched_.end());
    for (int rk : touched_) {
      is_touched_[static_cast<size_t>(rk)] = 0;
      Dispatch(rk, t);
    }
  }
}

Status WavefrontScheduler::CheckEveryRankFinished() const {
  for (int rk = 0; rk < pr_.num_ranks; ++rk) {
    const RankState& rs = ranks_[static_cast<size_t>(rk)];
    if (rs.unformed > 0 || rs.backwards_left > 0 || rs.loss_backward >= 0 ||
        (p_.sections[static_cast<size_t>(rs.section)].trains && !rs.optimizer_done)) {
      return Status::Internal("wavefront scheduler: rank " + std::to_string(rk) + " of section '" +
                              p_.sections[static_cast<size_t>(rs.section)].name +
                              "' did not finish its work (a bug; please report with the problem)");
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<Schedule> WavefrontSchedule(const Prepared& pr, const Placement& place, uint64_t tie_seed, int max_in_flight) {
  return WavefrontScheduler(pr, place, max_in_flight).Run(tie_seed);
}

}  // namespace maestro::scheduler::internal
