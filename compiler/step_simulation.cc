// SPDX-License-Identifier: Apache-2.0
#include "compiler/step_simulation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

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

// Stage seconds at `work` samples' worth (a mix's samples weigh their kind's
// work): the table's line between whole counts; below one sample the line
// through one and two samples (its per-micro-batch constant kept), past the
// table the line through its last two.
double StageAtWork(const std::vector<double>& table, double work) {
  if (!(work > 0)) return 0.0;
  const size_t last = table.size() - 1;  // table[k], k = 0..last; last >= 1
  auto line = [&](size_t a, double k) {
    const double slope = a + 1 <= last ? table[a + 1] - table[a] : table[a] - table[a - 1];
    return table[a] + (k - static_cast<double>(a)) * slope;
  };
  if (last == 1) return work * table[1];
  if (work < 1.0) return std::max(0.0, line(1, work));
  if (work >= static_cast<double>(last)) return line(last - 1, work);
  const auto a = static_cast<size_t>(work);
  return line(a, work);
}

// A section's work for the samples it runs: their count, or with a mix the
// sum of their drawn kinds' work (only samples that carry its modality).
class SampleWork {
 public:
  SampleWork(const SectionWork& s, int bit, uint64_t seed)
      : cdf_(s.mix_cdf), work_(s.mix_work), bit_(bit), seed_(seed) {}
  bool mixed() const { return !work_.empty() && bit_ >= 0; }
  double Of(const scheduler::Sample& x) const {
    if (bit_ >= 0 && !x.Has(bit_)) return 0.0;
    if (!mixed()) return 1.0;
    return work_[static_cast<size_t>(DrawMixEntry(cdf_, seed_, x.id, bit_))];
  }
  double Of(const std::vector<const scheduler::Sample*>& samples) const {
    double w = 0;
    for (const scheduler::Sample* x : samples) w += Of(*x);
    return w;
  }

 private:
  std::vector<double> cdf_, work_;
  int bit_ = -1;
  uint64_t seed_ = 0;
};

// The sectioned plan: section i of the problem is workload section i.
class SectionedCosts : public scheduler::SectionCostModel {
 public:
  SectionedCosts(const CostModel& model, const Workload& work, const Assignment& a,
                 const std::vector<std::string>& modality_names, uint64_t seed)
      : model_(model), work_(work) {
    for (size_t i = 0; i < work.sections.size(); ++i) {
      const SectionWork& s = work.sections[i];
      const plan::ParallelConfig& c = a.sections[i].cost.config;
      configs_.push_back(c);
      sample_work_.emplace_back(s, ModalityBit(s.activation, modality_names), seed);
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
    return Stage(section, samples) * shares_[static_cast<size_t>(section)] + ahead_fill_[static_cast<size_t>(section)];
  }
  double BackwardSeconds(int section, const std::vector<const scheduler::Sample*>& samples) const override {
    return Stage(section, samples) * (1.0 - shares_[static_cast<size_t>(section)]);
  }
  double TransferSeconds(int edge, const scheduler::Sample& sample) const override {
    (void)sample;  // every active sample of a section carries the same tensor size
    const EdgeWork& e = work_.edges[static_cast<size_t>(edge)];
    return e.bytes_per_sample / std::max(e.link_bytes_per_s, 1.0) + latency_[static_cast<size_t>(e.from)];
  }
  double OptimizerSeconds(int section) const override { return optimizer_[static_cast<size_t>(section)]; }

 private:
  const SectionWork& Work(int section) const { return work_.sections[static_cast<size_t>(section)]; }
  double Stage(int section, const std::vector<const scheduler::Sample*>& samples) const {
    const size_t i = static_cast<size_t>(section);
    if (sample_work_[i].mixed()) return StageAtWork(stages_[i], sample_work_[i].Of(samples));
    return StageAt(model_, work_.sections[i], configs_[i], stages_[i], samples.size());
  }

  const CostModel& model_;
  const Workload& work_;
  std::vector<plan::ParallelConfig> configs_;
  std::vector<std::vector<double>> stages_;
  std::vector<double> shares_;  // forward's share of a micro-batch: measured, else the model's
  std::vector<double> optimizer_, latency_;
  std::vector<double> ahead_fill_;  // a running-ahead section's fill per micro-batch
  std::vector<SampleWork> sample_work_;
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
                  const std::vector<std::string>& modality_names, uint64_t seed)
      : model_(model) {
    const int mb = m.config.micro_batch;
    const double per_replica = std::ceil(static_cast<double>(model.global_batch()) / std::max(1, m.config.dp) - 1e-9);
    const double microbatches = std::max(1.0, std::ceil(per_replica / mb - 1e-9));
    std::vector<int> devices;
    for (const MonolithicDevice& d : m.devices) devices.push_back(d.device);
    if (devices.empty()) devices.push_back(device);
    for (size_t i = 0; i < work.sections.size(); ++i) {
      bits_.push_back(ModalityBit(work.sections[i].activation, modality_names));
      sample_work_.emplace_back(work.sections[i], bits_.back(), seed);
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
          // At the replica's micro-batch count, as EvaluateMonolithic and the
          // sectioned simulation price it: the optimizer step includes the
          // gradient accumulation of every micro-batch after the first.
          const SectionCost one = model.EvaluateWith(s, c, microbatches, 1.0);
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
        double stage = 0;
        if (sample_work_[i].mixed()) {
          stage = StageAtWork(stages_[d][i], sample_work_[i].Of(samples));
        } else {
          size_t k = 0;
          for (const scheduler::Sample* x : samples) k += (bits_[i] < 0 || x->Has(bits_[i])) ? 1 : 0;
          stage = StageAt(model_, sections_[d][i], configs_[i], stages_[d][i], k);
        }
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
  std::vector<SampleWork> sample_work_;
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
      for (const ModalityDraws& d : settings.draws) {
        if (d.modality != m.name) continue;
        s.modality_tokens[static_cast<size_t>(bit)] =
            d.llm_tokens[static_cast<size_t>(DrawMixEntry(d.cdf, settings.seed, s.id, bit))];
      }
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
  return RunBatches(p, std::make_shared<SectionedCosts>(model, work, a, scheduler::ModalityNamesOf(p), settings.seed),
                    settings, policy);
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
  return RunBatches(p, std::make_shared<MonolithicCosts>(model, work, m, device, names, settings.seed), settings,
                    scheduler::Policy::kFifo);
}

SimulatedStep SimulatorStepPredictor::Run(const CostModel& model, const Workload& work, const Assignment& a) const {
  return SimulateSectioned(model, work, a, settings_);
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
