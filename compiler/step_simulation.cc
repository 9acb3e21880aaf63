// SPDX-License-Identifier: Apache-2.0
#include "compiler/step_simulation.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <thread>

#include "compiler/config_text.h"
#include "scheduler/simulator.h"

namespace maestro::compiler {

namespace {

// Forward's share of a micro-batch's stage time: forward 1, backward 2
// (+1 recomputed forward).
double ForwardShare(const SectionWork& s, const plan::ParallelConfig& c) {
  if (!s.trains()) return 1.0;
  return c.recompute ? 0.25 : 1.0 / 3.0;
}

int ModalityBit(const std::string& activation, const std::vector<std::string>& names) {
  if (activation == "always") return -1;
  const auto it = std::find(names.begin(), names.end(), activation);
  return it == names.end() ? -1 : static_cast<int>(it - names.begin());
}

// Stage seconds of one micro-batch of k = 0..max_k samples on one replica.
std::vector<double> StageTable(const CostModel& model, const SectionWork& s, const plan::ParallelConfig& c, int max_k) {
  std::vector<double> t(static_cast<size_t>(max_k) + 1, 0.0);
  for (int k = 1; k <= max_k; ++k) {
    t[static_cast<size_t>(k)] = model.EvaluateWith(s, c, 1.0, static_cast<double>(k)).stage_seconds;
  }
  return t;
}

double StageAt(const CostModel& model, const SectionWork& s, const plan::ParallelConfig& c,
               const std::vector<double>& table, size_t k) {
  if (k == 0) return 0.0;
  if (k < table.size()) return table[k];
  return model.EvaluateWith(s, c, 1.0, static_cast<double>(k)).stage_seconds;
}

// The sectioned plan: section i of the problem is workload section i.
class SectionedCosts : public scheduler::SectionCostModel {
 public:
  SectionedCosts(const CostModel& model, const Workload& work, const Assignment& a) : model_(model), work_(work) {
    for (size_t i = 0; i < work.sections.size(); ++i) {
      const SectionWork& s = work.sections[i];
      const plan::ParallelConfig& c = a.sections[i].cost.config;
      configs_.push_back(c);
      stages_.push_back(StageTable(model, s, c, c.micro_batch));
      const double full = stages_.back()[static_cast<size_t>(c.micro_batch)];
      const double fill = (c.pp - 1) * full;
      const SectionCost& cost = a.sections[i].cost;
      shares_.push_back(cost.forward_share > 0 ? cost.forward_share : ForwardShare(s, c));
      optimizer_.push_back(s.trains() ? cost.dp_sync_seconds + cost.optimizer_seconds + fill : 0.0);
      // A forward-only section running ahead sends rows it computed during
      // the previous step: no pipeline latency on its edges; its own ranks
      // pay its fill instead (none where its pipeline streams across steps,
      // runtime/run_ahead.h), spread over its micro-batches.
      const int ahead = s.trains() ? 0 : a.sections[i].run_ahead;
      const double ahead_fill_stages =
          PipelineFillStages(c.pp, s.pipeline_streams_ahead >= 2 ? ahead : 0, cost.microbatches);
      latency_.push_back(ahead > 0 ? 0.0 : (c.pp - 1) * full * shares_.back());
      ahead_fill_.push_back(ahead > 0 ? ahead_fill_stages * full / std::max(1.0, cost.microbatches) : 0.0);
    }
  }
  double ForwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const override {
    return Stage(section, samples.size()) * shares_[static_cast<size_t>(section)] +
           ahead_fill_[static_cast<size_t>(section)];
  }
  double BackwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const override {
    return Stage(section, samples.size()) * (1.0 - shares_[static_cast<size_t>(section)]);
  }
  double TransferSeconds(int edge, const scheduler::Sample& sample) const override {
    (void)sample;  // every active sample of a section carries the same tensor size
    const EdgeWork& e = work_.edges[static_cast<size_t>(edge)];
    return e.bytes_per_sample / std::max(e.link_bytes_per_s, 1.0) + latency_[static_cast<size_t>(e.from)];
  }
  double OptimizerSeconds(int section) const override { return optimizer_[static_cast<size_t>(section)]; }

 private:
  const SectionWork& Work(int section) const { return work_.sections[static_cast<size_t>(section)]; }
  double Stage(int section, size_t k) const {
    const size_t i = static_cast<size_t>(section);
    return StageAt(model_, work_.sections[i], configs_[i], stages_[i], k);
  }

  const CostModel& model_;
  const Workload& work_;
  std::vector<plan::ParallelConfig> configs_;
  std::vector<std::vector<double>> stages_;
  std::vector<double> shares_;  // forward's share of a micro-batch: measured, else the model's
  std::vector<double> optimizer_, latency_;
  std::vector<double> ahead_fill_;  // a running-ahead section's fill per micro-batch
};

}  // namespace

plan::MicroBatchCost MicroBatchCostOf(const CostModel& model, const SectionWork& s, const SectionCost& cost) {
  const plan::ParallelConfig& c = cost.config;
  const double one = model.EvaluateWith(s, c, 1.0, 1.0).stage_seconds;
  const double full = model.EvaluateWith(s, c, 1.0, static_cast<double>(c.micro_batch)).stage_seconds;
  plan::MicroBatchCost out;
  out.seconds_per_sample = c.micro_batch > 1 ? (full - one) / (c.micro_batch - 1) : full;
  if (out.seconds_per_sample <= 0) out.seconds_per_sample = full / c.micro_batch;
  out.fixed_seconds = std::max(0.0, full - out.seconds_per_sample * c.micro_batch);
  out.forward_share = cost.forward_share > 0 ? cost.forward_share : ForwardShare(s, c);
  out.optimizer_seconds = s.trains() ? cost.dp_sync_seconds + cost.optimizer_seconds + (c.pp - 1) * full : 0.0;
  out.measured = cost.measured;
  return out;
}

namespace {

// The monolithic baseline: one problem section whose micro-batch runs every
// workload section on the samples that activate it.
class MonolithicCosts : public scheduler::SectionCostModel {
 public:
  // On several GPU types (m.devices) the replicas run in lockstep: every
  // micro-batch costs what it costs on the slowest type.
  MonolithicCosts(const CostModel& model, const Workload& work, const MonolithicPlan& m, int device,
                  const std::vector<std::string>& modality_names)
      : model_(model) {
    const int mb = m.config.micro_batch;
    std::vector<int> devices;
    for (const MonolithicDevice& d : m.devices) devices.push_back(d.device);
    if (devices.empty()) devices.push_back(device);
    for (size_t i = 0; i < work.sections.size(); ++i) {
      bits_.push_back(ModalityBit(work.sections[i].activation, modality_names));
      configs_.push_back(m.sections[i].config);
      const SectionWork& s = work.sections[i];
      const plan::ParallelConfig& c = configs_.back();
      shares_.push_back(m.sections[i].forward_share > 0 ? m.sections[i].forward_share : ForwardShare(s, c));
    }
    for (int d : devices) {
      double stage0_full = 0;  // stage 0 of a micro-batch with the expected modality mix
      double sync = 0;
      std::vector<SectionWork> on;
      std::vector<std::vector<double>> tables;
      for (size_t i = 0; i < work.sections.size(); ++i) {
        SectionWork s = work.sections[i];
        s.device = d;
        const plan::ParallelConfig& c = configs_[i];
        tables.push_back(StageTable(model, s, c, mb));
        stage0_full += model.EvaluateWith(s, c, 1.0, std::max(1e-9, mb * s.active_fraction)).stage_seconds;
        if (s.trains()) {
          const SectionCost one = model.EvaluateWith(s, c, 1.0, 1.0);
          sync += one.dp_sync_seconds + one.optimizer_seconds;
        }
        on.push_back(std::move(s));
      }
      // 1F1B fill and drain: PP - 1 stage-0 times (stage 0 also runs the
      // encoders that cannot be split, so it paces the pipeline).
      optimizer_ = std::max(optimizer_, sync + (m.config.pp - 1) * stage0_full);
      sections_.push_back(std::move(on));
      stages_.push_back(std::move(tables));
    }
  }
  double ForwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const override {
    (void)section;
    return Sum(samples, true);
  }
  double BackwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const override {
    (void)section;
    return Sum(samples, false);
  }
  double TransferSeconds(int edge, const scheduler::Sample& sample) const override {
    (void)edge;
    (void)sample;
    return 0.0;  // one section: no edges
  }
  double OptimizerSeconds(int section) const override {
    (void)section;
    return optimizer_;
  }

 private:
  double Sum(const std::vector<const scheduler::Sample*>& samples, bool forward) const {
    double slowest = 0;
    for (size_t d = 0; d < sections_.size(); ++d) {
      double t = 0;
      for (size_t i = 0; i < configs_.size(); ++i) {
        size_t k = 0;
        for (const scheduler::Sample* x : samples) k += (bits_[i] < 0 || x->Has(bits_[i])) ? 1 : 0;
        const double stage = StageAt(model_, sections_[d][i], configs_[i], stages_[d][i], k);
        t += stage * (forward ? shares_[i] : 1.0 - shares_[i]);
      }
      slowest = std::max(slowest, t);
    }
    return slowest;
  }

  const CostModel& model_;
  std::vector<std::vector<SectionWork>> sections_;  // per GPU type, per section
  std::vector<plan::ParallelConfig> configs_;
  std::vector<int> bits_;
  std::vector<double> shares_;
  std::vector<std::vector<std::vector<double>>> stages_;  // per GPU type, per section
  double optimizer_ = 0;
};

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The scheduler runs in O(N * L * S) for N samples, S sections and L = the
// lcm of the DP degrees; beyond these bounds the compiler keeps the analytic
// prediction rather than spend minutes (a fuzzed or huge spec).
constexpr int64_t kMaxSimulatedSamples = int64_t{1} << 16;
constexpr double kMaxSimulationWork = 2e8;

std::string TooBigToSimulate(const plan::Plan& p) {
  if (p.data.global_batch > kMaxSimulatedSamples) {
    return fmt::format("a global batch of {} samples is more than the {} the simulator takes", p.data.global_batch,
                       kMaxSimulatedSamples);
  }
  double lcm = 1;
  for (const auto& s : p.sections) {
    const double dp = std::max(1, s.config.dp);
    lcm = lcm / static_cast<double>(std::gcd(static_cast<int64_t>(lcm), static_cast<int64_t>(dp))) * dp;
    if (lcm > kMaxSimulationWork) break;
  }
  const double work = static_cast<double>(p.data.global_batch) * lcm * static_cast<double>(p.sections.size());
  if (work > kMaxSimulationWork) {
    return fmt::format("the DP degrees' least common multiple ({:.0f}) makes scheduling too costly to simulate", lcm);
  }
  return "";
}

SimulatedStep RunBatches(const plan::Plan& skeleton, const std::shared_ptr<const scheduler::SectionCostModel>& costs,
                         const SimulationSettings& settings, scheduler::Policy policy) {
  SimulatedStep out;
  out.policy = scheduler::PolicyName(policy);
  out.error = TooBigToSimulate(skeleton);
  if (!out.error.empty()) return out;
  const std::vector<std::string> names = scheduler::ModalityNamesOf(skeleton);
  out.min_step_seconds = std::numeric_limits<double>::infinity();
  const int batches = std::max(1, settings.batches);
  for (int b = 0; b < batches; ++b) {
    auto problem =
        scheduler::FromPlan(skeleton, costs, SampleGlobalBatch(skeleton.data.global_batch, settings, b, names));
    if (!problem.ok()) {
      out.error = problem.status().message();
      return out;
    }
    scheduler::ScheduleOptions so;
    so.policy = policy;
    so.seed = settings.seed;
    so.step = b;
    so.max_in_flight = skeleton.schedule_max_in_flight;
    auto schedule = scheduler::BuildSchedule(*problem, so);
    if (!schedule.ok()) {
      out.error = schedule.status().message();
      return out;
    }
    auto sim = scheduler::Simulate(*problem, *schedule);
    if (!sim.ok()) {
      out.error = sim.status().message();
      return out;
    }
    out.step_seconds += sim->step_seconds / batches;
    out.min_step_seconds = std::min(out.min_step_seconds, sim->step_seconds);
    out.max_step_seconds = std::max(out.max_step_seconds, sim->step_seconds);
    out.utilization += sim->utilization / batches;
    out.sections.resize(sim->sections.size());
    std::vector<double> gaps(sim->sections.size(), 0.0);
    for (const auto& r : sim->ranks) gaps[static_cast<size_t>(r.section)] += r.bubbles;
    for (size_t s = 0; s < sim->sections.size(); ++s) {
      const scheduler::SectionStats& st = sim->sections[s];
      SectionSimulation& o = out.sections[s];
      o.name = st.name;
      o.replicas = st.replicas;
      const double reps = std::max(1, st.replicas);
      o.utilization += st.utilization / batches;
      o.bubble_seconds += st.bubble_seconds / reps / batches;
      o.bubbles += gaps[s] / reps / batches;
    }
  }
  out.batches = batches;
  out.ok = true;
  return out;
}

}  // namespace

std::vector<scheduler::Sample> SampleGlobalBatch(int64_t global_batch, const SimulationSettings& settings, int batch,
                                                 const std::vector<std::string>& modality_names) {
  std::vector<scheduler::Sample> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(global_batch, 0)));
  uint64_t state = settings.seed * 0x100000001B3ull + static_cast<uint64_t>(batch) + 1;
  for (int64_t i = 0; i < global_batch; ++i) {
    scheduler::Sample s;
    s.id = static_cast<uint64_t>(batch) * static_cast<uint64_t>(global_batch) + static_cast<uint64_t>(i);
    s.text_tokens = settings.seq_len;
    for (const auto& m : settings.modalities) {
      const double u = static_cast<double>(SplitMix(state) >> 11) * 0x1.0p-53;
      const int bit = ModalityBit(m.name, modality_names);
      if (bit < 0 || bit >= scheduler::kMaxModalities || u >= m.fraction) continue;
      s.modalities |= 1u << bit;
      s.modality_tokens[static_cast<size_t>(bit)] = m.tokens;
    }
    out.push_back(s);
  }
  return out;
}

namespace {
// The cores a local-mode machine's processes share (0: one device each).
int SharedCoresOf(const CostModel& model) {
  for (const DeviceType& d : model.devices()) {
    if (d.shared_node && d.shared_cores > 0) return d.shared_cores;
  }
  return 0;
}
}  // namespace

SimulatedStep SimulateSectioned(const CostModel& model, const Workload& work, const Assignment& a,
                                const SimulationSettings& settings, scheduler::Policy policy) {
  plan::Plan p;
  p.job_name = "sectioned";
  p.shared_cores = SharedCoresOf(model);
  p.schedule_max_in_flight = work.max_in_flight;
  p.data.global_batch = model.global_batch();
  p.data.modalities = settings.modalities;
  for (size_t i = 0; i < work.sections.size(); ++i) {
    plan::SectionPlan s;
    s.name = work.sections[i].name;
    s.mode = work.sections[i].mode;
    s.activation = work.sections[i].activation;
    s.config = a.sections[i].cost.config;
    s.run_ahead = s.mode == plan::SectionMode::kForward ? a.sections[i].run_ahead : 0;
    p.sections.push_back(std::move(s));
  }
  for (const auto& e : work.edges) {
    plan::EdgePlan ep;
    ep.from = work.sections[static_cast<size_t>(e.from)].name;
    ep.to = work.sections[static_cast<size_t>(e.to)].name;
    p.edges.push_back(ep);
  }
  return RunBatches(p, std::make_shared<SectionedCosts>(model, work, a), settings, policy);
}

SimulatedStep SimulateMonolithic(const CostModel& model, const Workload& work, const MonolithicPlan& m, int device,
                                 const SimulationSettings& settings) {
  if (!m.found) {
    SimulatedStep out;
    out.error = "no monolithic baseline";
    return out;
  }
  plan::Plan p;
  p.job_name = "monolithic";
  p.shared_cores = SharedCoresOf(model);
  p.data.global_batch = model.global_batch();
  p.data.modalities = settings.modalities;
  plan::SectionPlan s;
  s.name = "monolithic";
  s.mode = plan::SectionMode::kForward;
  for (const auto& w : work.sections) {
    if (w.trains()) s.mode = plan::SectionMode::kTrain;
  }
  s.config = m.config;
  p.sections.push_back(std::move(s));
  const std::vector<std::string> names = scheduler::ModalityNamesOf(p);
  return RunBatches(p, std::make_shared<MonolithicCosts>(model, work, m, device, names), settings,
                    scheduler::Policy::kFifo);
}

SimulatedStep SimulatorStepPredictor::Run(const CostModel& model, const Workload& work, const Assignment& a) const {
  return SimulateSectioned(model, work, a, settings_);
}

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
  st.converged = ImproveLocally(model, work, options, search, budget, best, step, log, &st.moves);
  const int widened = st.converged ? WidenIntoIdleGpus(model, work, options, search, budget, best, step, log) : 0;
  if (widened > 0) {
    st.moves += widened;
    st.converged = ImproveLocally(model, work, options, search, budget, best, step, log, &st.moves);
  }
  const int traded = st.converged ? TradeReplicas(model, work, options, search, budget, best, step, log) : 0;
  if (traded > 0) {
    st.moves += traded;
    st.converged = ImproveLocally(model, work, options, search, budget, best, step, log, &st.moves);
  }
  st.simulations = budget.simulations();
  return best;
}

StepPrediction PredictionOf(const SimulatedStep& sim, const CostModel& model, const Workload& work,
                            const Assignment& a) {
  if (!sim.ok) {
    StepPrediction p = AnalyticStepPredictor().Predict(model, work, a);
    p.predictor += " (not simulated: " + sim.error + ")";
    return p;
  }
  StepPrediction p;
  p.predictor = fmt::format("simulator: {} schedule, mean of {} sampled global batches", sim.policy, sim.batches);
  p.step_seconds = sim.step_seconds;
  p.steady_state_seconds = a.bottleneck_seconds;
  p.samples_per_second = sim.step_seconds > 0 ? static_cast<double>(model.global_batch()) / sim.step_seconds : 0;
  return p;
}

StepPrediction SimulatorStepPredictor::Predict(const CostModel& model, const Workload& work,
                                               const Assignment& a) const {
  return PredictionOf(Run(model, work, a), model, work, a);
}

}  // namespace maestro::compiler
