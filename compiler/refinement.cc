// SPDX-License-Identifier: Apache-2.0
#include "compiler/refinement.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "compiler/config_text.h"

namespace maestro::compiler {

namespace {

// The refinement's caps (RefineBySimulation): simulations, and simulated
// work (sampled batches x samples x sections over every simulation: one
// simulation of 4096 samples on 6 sections costs ~20 ms, one of 512 samples
// on 2 sections ~1 ms). Deterministic: counts, not clocks.
constexpr int kMaxRefinementSimulations = 400;
constexpr double kMaxRefinementWork = 8e5;
// The search simulates sampled batches up to this many samples (at most the
// caller's batches, at least one): a small global batch's one sampled batch
// is too noisy to rank plans by.
constexpr int64_t kRefinementSearchSamples = 2048;
// Rounds of moves, widening and trades (RefineBySimulation); the budget
// above usually ends the search first.
constexpr int kMaxRefinementRounds = 8;

std::string Describe(const plan::ParallelConfig& c) {
  std::string out = fmt::format("TP {} PP {}", c.tp, c.pp);
  if (c.cp > 1) out += fmt::format(" CP {}", c.cp);
  out += fmt::format(" DP {} micro-batch {}", c.dp, c.micro_batch);
  out += RecomputeText(c);
  return out;
}

// Do the DP degrees `dps` (one per section) suit every edge
// (EdgeDpsAllowed) and keep at most kMostDpSlots placement slots? With
// section `i` of `a` at DP `dp` (EdgesHoldWith), or as `trial` has them
// (EdgesHold).
bool DpsHold(const Workload& work, const std::vector<int>& dps, const PlannerOptions& options) {
  for (const EdgeWork& e : work.edges) {
    if (!EdgeDpsAllowed(dps[static_cast<size_t>(e.from)], dps[static_cast<size_t>(e.to)], e.fanout, e.fanin, options)) {
      return false;
    }
  }
  return DpSlots(dps) <= kMostDpSlots;
}

bool EdgesHoldWith(const Workload& work, const Assignment& a, size_t i, int dp, const PlannerOptions& options) {
  std::vector<int> dps;
  for (size_t k = 0; k < a.sections.size(); ++k) dps.push_back(k == i ? dp : a.sections[k].cost.config.dp);
  return DpsHold(work, dps, options);
}

// `a` with section `i` under `c` (evaluated as `cost`), summarized.
Assignment WithSection(const CostModel& model, const Workload& work, const Assignment& a, size_t i,
                       const plan::ParallelConfig& c, const SectionCost& cost, const PlannerOptions& options) {
  Assignment trial = a;
  trial.sections[i].cost = cost;
  trial.sections[i].planner_only = PlannerOnlyFeatures(work.sections[i].model, c, options.support);
  Summarize(model, work, trial);
  return trial;
}

// The one move that turns `from` into `to`; false when it takes none or
// more than one. A move changes at most one of TP, PP, CP and recomputation,
// and re-chooses DP and the micro-batch with it (inside the same nodes a
// wider replica means fewer replicas, and its memory allows another
// micro-batch); it is named by what it changes first in that order, then the
// micro-batch, then DP.
bool MoveBetween(const plan::ParallelConfig& from, const plan::ParallelConfig& to, RefinementMove* move) {
  if (to.ep != from.ep) return false;
  int changed = 0;
  RefinementMove m = RefinementMove::kDp;
  const auto differs = [&](bool d, RefinementMove kind) {
    if (!d) return;
    ++changed;
    m = kind;
  };
  differs(to.recompute_granularity() != from.recompute_granularity(), RefinementMove::kRecompute);
  differs(to.cp != from.cp, RefinementMove::kCp);
  differs(to.pp != from.pp, RefinementMove::kPp);
  differs(to.tp != from.tp, RefinementMove::kTp);
  if (changed > 1) return false;
  if (changed == 0) {
    if (to.micro_batch != from.micro_batch) {
      m = RefinementMove::kMicroBatch;
    } else if (to.dp == from.dp) {
      return false;
    }
  }
  *move = m;
  return true;
}

struct NeighbourConfig {
  RefinementMove move;
  plan::ParallelConfig config;
  SectionCost cost;
};

// Section `i`'s single moves in `a` that are feasible: a candidate
// configuration (pins, runtime support), one move away, that fits in memory
// on the same nodes, keeps every edge's DP rule (EdgesHoldWith), and whose micro-batch
// is not more than twice what a replica gets (it would run as a smaller one).
std::vector<NeighbourConfig> NeighbourConfigs(const CostModel& model, const Workload& work, const Assignment& a,
                                              size_t i, const PlannerOptions& options) {
  const SectionWork& s = work.sections[i];
  const SectionCost& now = a.sections[i].cost;
  std::vector<NeighbourConfig> out;
  for (const plan::ParallelConfig& c : CandidateConfigs(model, s, options)) {
    RefinementMove move;
    if (!MoveBetween(now.config, c, &move)) continue;
    const double per_replica = std::ceil(static_cast<double>(model.global_batch()) * s.active_fraction / c.dp - 1e-9);
    if (c.micro_batch > 1 && c.micro_batch / 2 >= per_replica) continue;
    if (!EdgesHoldWith(work, a, i, c.dp, options)) continue;
    const SectionCost cost = model.Evaluate(s, c);
    if (!cost.fits || cost.nodes != now.nodes) continue;
    out.push_back({move, c, cost});
  }
  return out;
}

// Every simulation the refinement runs is charged here.
class SearchBudget {
 public:
  SearchBudget(const CostModel& model, const Workload& work, const SimulationSettings& search)
      : per_simulation_(static_cast<double>(search.batches) * static_cast<double>(model.global_batch()) *
                        static_cast<double>(work.sections.size())) {}
  bool Take() {
    if (simulations_ >= kMaxRefinementSimulations || work_ + per_simulation_ > kMaxRefinementWork) return false;
    ++simulations_;
    work_ += per_simulation_;
    return true;
  }
  int simulations() const { return simulations_; }
  // How many more Take() calls would succeed.
  int Remaining() const {
    int n = 0;
    double work = work_;
    for (int s = simulations_; s < kMaxRefinementSimulations && work + per_simulation_ <= kMaxRefinementWork; ++s) {
      work += per_simulation_;
      ++n;
    }
    return n;
  }

 private:
  double per_simulation_;
  int simulations_ = 0;
  double work_ = 0;
};

// Biggest fill first: sections others wait for, by the latency of their
// first micro-batch (PP stages of one micro-batch), then the rest.
std::vector<size_t> RefinementOrder(const Workload& work, const Assignment& a) {
  const size_t n = work.sections.size();
  std::vector<size_t> order(n);
  std::vector<double> latency(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    order[i] = i;
    const SectionCost& c = a.sections[i].cost;
    bool feeds = false;
    for (const EdgeWork& e : work.edges) feeds = feeds || e.from == static_cast<int>(i);
    latency[i] = (feeds ? 1e9 : 0.0) + c.stage_seconds * c.config.pp;
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return latency[x] > latency[y]; });
  return order;
}

// Does `trial`'s simulated step `step` hold its links' volume? Transfers are
// latencies in the simulator; every edge's busy time must stay under the step.
bool LinksKeepUp(const Assignment& trial, double step) {
  for (double t : trial.edge_seconds) {
    if (t > step) return false;
  }
  return true;
}

// The best single move of section `i` in `best`: the neighbour whose
// simulated step is the shortest and beats `step` by more than the
// tolerance (`winner`, `winner_step`); false when none does. `complete`
// turns false when the budget ran out before every neighbour was tried.
// Calls body(k) for k in [0, count) on `wanted` threads (0: the machine's
// cores, at most kMaxRefinementThreads); body writes only its own k's results.
constexpr unsigned kMaxRefinementThreads = 16;
void ForEachInParallel(size_t count, int wanted, const std::function<void(size_t)>& body) {
  const unsigned cores = wanted > 0
                             ? static_cast<unsigned>(wanted)
                             : std::max(1u, std::min(kMaxRefinementThreads, std::thread::hardware_concurrency()));
  const size_t threads = std::min<size_t>(cores, count);
  if (threads <= 1) {
    for (size_t k = 0; k < count; ++k) body(k);
    return;
  }
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t k = next++; k < count; k = next++) body(k);
  };
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (auto& h : helpers) h.join();
}

// One section's best single move. The neighbours that could beat the
// current step are simulated in parallel first (as many as the budget has
// left); then one pass in order takes the budget and the winner exactly as
// simulating one after another would (a neighbour no faster than the winner
// so far is skipped without a simulation), so the result does not depend
// on the thread count.
bool FindBestMove(const CostModel& model, const Workload& work, const PlannerOptions& options,
                  const SimulationSettings& search, size_t i, const Assignment& best, double step, SearchBudget& budget,
                  Assignment& winner, double& winner_step, bool& complete) {
  winner_step = step * (1.0 - kRefinementTolerance);
  complete = true;
  bool found = false;
  const std::vector<NeighbourConfig> neighbours = NeighbourConfigs(model, work, best, i, options);
  std::vector<size_t> speculated;  // neighbours simulated ahead, in order
  const size_t room = static_cast<size_t>(budget.Remaining());
  for (size_t k = 0; k < neighbours.size() && speculated.size() < room; ++k) {
    if (neighbours[k].cost.step_seconds < winner_step) speculated.push_back(k);
  }
  std::vector<Assignment> trials(speculated.size());
  std::vector<SimulatedStep> sims(speculated.size());
  ForEachInParallel(speculated.size(), search.threads, [&](size_t s) {
    const NeighbourConfig& n = neighbours[speculated[s]];
    trials[s] = WithSection(model, work, best, i, n.config, n.cost, options);
    sims[s] = SimulateSectioned(model, work, trials[s], search);
  });
  size_t s = 0;
  for (size_t k = 0; k < neighbours.size(); ++k) {
    const NeighbourConfig& n = neighbours[k];
    // A section busy longer than the step to beat cannot shorten it.
    if (n.cost.step_seconds >= winner_step) continue;
    if (!budget.Take()) {
      complete = false;
      break;
    }
    while (s < speculated.size() && speculated[s] < k) ++s;
    Assignment trial;
    SimulatedStep sim;
    if (s < speculated.size() && speculated[s] == k) {
      trial = std::move(trials[s]);
      sim = std::move(sims[s]);
    } else {  // beyond what was simulated ahead
      trial = WithSection(model, work, best, i, n.config, n.cost, options);
      sim = SimulateSectioned(model, work, trial, search);
    }
    if (!sim.ok || sim.step_seconds >= winner_step || !LinksKeepUp(trial, sim.step_seconds)) continue;
    winner = std::move(trial);
    winner_step = sim.step_seconds;
    found = true;
  }
  return found;
}

// Coordinate descent over the sections (RefineBySimulation): a section takes
// its best move until it has none, then the next; a section whose
// neighbourhood was searched stays done until another section moves. Ends
// when every section is done (true: a local optimum of the move set) or the
// budget runs out (false).
bool ImproveLocally(const CostModel& model, const Workload& work, const PlannerOptions& options,
                    const SimulationSettings& search, SearchBudget& budget, Assignment& best, double& step,
                    std::string* log, int* moves) {
  const size_t n = work.sections.size();
  std::vector<bool> done(n, false);
  for (;;) {
    bool moved = false;
    for (size_t i : RefinementOrder(work, best)) {
      while (!done[i]) {
        Assignment winner;
        double winner_step = 0;
        bool complete = true;
        if (!FindBestMove(model, work, options, search, i, best, step, budget, winner, winner_step, complete)) {
          if (!complete) return false;
          done[i] = true;
          break;
        }
        if (log) {
          *log += fmt::format("  section '{}': {} -> {}: simulated step {:.4g} s -> {:.4g} s\n", work.sections[i].name,
                              Describe(best.sections[i].cost.config), Describe(winner.sections[i].cost.config), step,
                              winner_step);
        }
        best = std::move(winner);
        step = winner_step;
        ++*moves;
        moved = true;
        std::fill(done.begin(), done.end(), false);
      }
    }
    if (!moved) return true;
  }
}

// Idle GPUs of a held node: a section on part of its node(s) takes the
// largest DP that fits there when that does not lengthen the step (more
// slack for the samples that arrive late). Returns how many did.
int WidenIntoIdleGpus(const CostModel& model, const Workload& work, const PlannerOptions& options,
                      const SimulationSettings& search, SearchBudget& budget, Assignment& best, double& step,
                      std::string* log) {
  int widened = 0;
  for (size_t i = 0; i < work.sections.size(); ++i) {
    const SectionWork& s = work.sections[i];
    const DeviceType& dev = model.devices()[static_cast<size_t>(s.device)];
    const SectionCost now = best.sections[i].cost;
    if (dev.shared_node || now.gpus >= now.nodes * dev.gpus_per_node) continue;
    std::vector<NeighbourConfig> wider;
    for (NeighbourConfig& n : NeighbourConfigs(model, work, best, i, options)) {
      if (n.move == RefinementMove::kDp && n.config.dp > now.config.dp) wider.push_back(std::move(n));
    }
    std::stable_sort(wider.begin(), wider.end(),
                     [](const NeighbourConfig& x, const NeighbourConfig& y) { return x.config.dp > y.config.dp; });
    for (const NeighbourConfig& n : wider) {
      if (!budget.Take()) return widened;
      Assignment trial = WithSection(model, work, best, i, n.config, n.cost, options);
      const SimulatedStep sim = SimulateSectioned(model, work, trial, search);
      if (!sim.ok || sim.step_seconds > step * 1.001 || !LinksKeepUp(trial, sim.step_seconds)) continue;
      if (log) {
        *log += fmt::format(
            "  section '{}': {} -> {} (the rest of its node(s) was idle): simulated step {:.4g} s -> "
            "{:.4g} s\n",
            s.name, Describe(now.config), Describe(n.config), step, sim.step_seconds);
      }
      best = std::move(trial);
      step = sim.step_seconds;
      ++widened;
      break;
    }
  }
  return widened;
}

// Section `i` of `a` at DP `dp`, everything else as it is: a candidate
// configuration (pins, runtime support) that fits; false when there is none.
bool AtDp(const CostModel& model, const Workload& work, const Assignment& a, size_t i, int dp,
          const PlannerOptions& options, NeighbourConfig* out) {
  if (dp < 1) return false;
  const plan::ParallelConfig& now = a.sections[i].cost.config;
  for (const plan::ParallelConfig& c : CandidateConfigs(model, work.sections[i], options)) {
    if (c.dp != dp || c.tp != now.tp || c.pp != now.pp || c.cp != now.cp || c.ep != now.ep ||
        c.micro_batch != now.micro_batch || c.recompute != now.recompute ||
        c.recompute_selective != now.recompute_selective) {
      continue;
    }
    SectionCost cost = model.Evaluate(work.sections[i], c);
    if (!cost.fits || cost.nodes <= 0) return false;
    *out = {RefinementMove::kDp, c, std::move(cost)};
    return true;
  }
  return false;
}

bool EdgesHold(const Workload& work, const Assignment& trial, const PlannerOptions& options) {
  std::vector<int> dps;
  for (const auto& s : trial.sections) dps.push_back(s.cost.config.dp);
  return DpsHold(work, dps, options);
}

// Budget units of `device` that no section of `a` holds.
int UnitsFree(const CostModel& model, const Workload& work, const Assignment& a, int device) {
  int held = 0;
  for (size_t k = 0; k < work.sections.size(); ++k) {
    if (work.sections[k].device == device) held += a.sections[k].cost.nodes;
  }
  return model.devices()[static_cast<size_t>(device)].budget_units() - held;
}

// Replicas moved between sections (the single moves keep each section's
// nodes): one replica more for a section, paid by budget units no section
// holds or by the fewest replicas of another section on the same GPU type
// that free enough of them. The trade with the shortest simulated step is
// taken while one beats the step (kd_72b_to_7b_4k: the teacher 21 -> 22
// replicas and the student 21 -> 20, on the 2 GPUs the plan left idle and 2
// of the student's). Returns how many were taken.
int TradeReplicas(const CostModel& model, const Workload& work, const PlannerOptions& options,
                  const SimulationSettings& search, SearchBudget& budget, Assignment& best, double& step,
                  std::string* log) {
  int trades = 0;
  for (;;) {
    Assignment winner;
    double winner_step = step * (1.0 - kRefinementTolerance);
    std::string what;
    for (size_t j = 0; j < work.sections.size(); ++j) {
      NeighbourConfig up{};
      if (!AtDp(model, work, best, j, best.sections[j].cost.config.dp + 1, options, &up)) continue;
      const int device = work.sections[j].device;
      const int extra = up.cost.nodes - best.sections[j].cost.nodes;
      const int free = UnitsFree(model, work, best, device);
      std::vector<std::pair<int, NeighbourConfig>> payers;  // (-1: idle units, the section giving replicas)
      if (extra <= free) payers.push_back({-1, {}});
      for (size_t i = 0; i < work.sections.size() && extra > free; ++i) {
        if (i == j || work.sections[i].device != device) continue;
        const int dp_i = best.sections[i].cost.config.dp;
        for (int k = 1; k < dp_i; ++k) {
          NeighbourConfig down{};
          if (!AtDp(model, work, best, i, dp_i - k, options, &down)) continue;
          if (best.sections[i].cost.nodes - down.cost.nodes >= extra - free) {
            payers.push_back({static_cast<int>(i), std::move(down)});
            break;
          }
        }
      }
      for (const auto& [i, down] : payers) {
        Assignment trial = WithSection(model, work, best, j, up.config, up.cost, options);
        if (i >= 0) trial = WithSection(model, work, trial, static_cast<size_t>(i), down.config, down.cost, options);
        if (!EdgesHold(work, trial, options)) continue;
        if (!budget.Take()) return trades;
        const SimulatedStep sim = SimulateSectioned(model, work, trial, search);
        if (!sim.ok || sim.step_seconds >= winner_step || !LinksKeepUp(trial, sim.step_seconds)) continue;
        what = i < 0 ? fmt::format("section '{}': DP {} -> {} (on idle units)", work.sections[j].name,
                                   best.sections[j].cost.config.dp, up.config.dp)
                     : fmt::format("section '{}': DP {} -> {}, section '{}': DP {} -> {}", work.sections[j].name,
                                   best.sections[j].cost.config.dp, up.config.dp,
                                   work.sections[static_cast<size_t>(i)].name,
                                   best.sections[static_cast<size_t>(i)].cost.config.dp, down.config.dp);
        winner = std::move(trial);
        winner_step = sim.step_seconds;
      }
    }
    if (what.empty()) return trades;
    if (log) *log += fmt::format("  {}: simulated step {:.4g} s -> {:.4g} s\n", what, step, winner_step);
    best = std::move(winner);
    step = winner_step;
    ++trades;
  }
}

}  // namespace

const char* RefinementMoveName(RefinementMove move) {
  switch (move) {
    case RefinementMove::kMicroBatch: return "micro-batch";
    case RefinementMove::kDp: return "DP";
    case RefinementMove::kTp: return "TP";
    case RefinementMove::kPp: return "PP";
    case RefinementMove::kCp: return "CP";
    case RefinementMove::kRecompute: return "recomputation";
  }
  return "?";
}

std::vector<RefinementNeighbour> NeighbourAssignments(const CostModel& model, const Workload& work, const Assignment& a,
                                                      size_t section, const PlannerOptions& options) {
  std::vector<RefinementNeighbour> out;
  for (const NeighbourConfig& n : NeighbourConfigs(model, work, a, section, options)) {
    out.push_back({n.move, WithSection(model, work, a, section, n.config, n.cost, options)});
  }
  return out;
}

SimulationSettings RefinementSearchSettings(const SimulationSettings& settings, int64_t global_batch) {
  SimulationSettings search = settings;
  const int64_t wanted =
      (kRefinementSearchSamples + std::max<int64_t>(global_batch, 1) - 1) / std::max<int64_t>(global_batch, 1);
  search.batches = static_cast<int>(std::clamp<int64_t>(wanted, 1, std::max(1, settings.batches)));
  return search;
}

Assignment RefineBySimulation(const CostModel& model, const Workload& work, const Assignment& a,
                              const PlannerOptions& options, const SimulationSettings& settings, std::string* log,
                              RefinementStats* stats) {
  Assignment best = a;
  const SimulationSettings search = RefinementSearchSettings(settings, model.global_batch());
  RefinementStats local;
  RefinementStats& st = stats ? *stats : local;
  st = RefinementStats();
  const SimulatedStep current = SimulateSectioned(model, work, best, search);
  if (!current.ok) return best;
  st.ran = true;
  double step = current.step_seconds;
  SearchBudget budget(model, work, search);
  // Rounds of single moves, widening into idle GPUs and replica trades,
  // until a round trades nothing: a move can make a trade pay that did not
  // before (a faster bottleneck makes its feeder the bottleneck), and a
  // trade can make moves pay. Each round's trades shorten the step by more
  // than kRefinementTolerance; the budget bounds the rounds.
  for (int round = 0; round < kMaxRefinementRounds; ++round) {
    st.converged = ImproveLocally(model, work, options, search, budget, best, step, log, &st.moves);
    if (!st.converged) break;
    const int widened = WidenIntoIdleGpus(model, work, options, search, budget, best, step, log);
    if (widened > 0) {
      st.moves += widened;
      st.converged = ImproveLocally(model, work, options, search, budget, best, step, log, &st.moves);
      if (!st.converged) break;
    }
    const int traded = TradeReplicas(model, work, options, search, budget, best, step, log);
    if (traded == 0) break;
    st.moves += traded;
  }
  st.simulations = budget.simulations();
  return best;
}

}  // namespace maestro::compiler
