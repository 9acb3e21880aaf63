// SPDX-License-Identifier: Apache-2.0
// scheduler: the wavefront scheduler against its baselines (FIFO = data order
// dealt round-robin by micro-batch over the DP replicas, as Megatron's sampler
// does; FIFO-contiguous = one contiguous slice per replica; balance-only =
// the wavefront's balanced placement run in data order) and
// against the step's lower bound, on random global batches of 256-4096
// samples whose image ratio varies from step to step, over synthetic
// multimodal plans of 2-6 sections with fan-out 1-4. All step times are the
// simulator's (the same cost model for every policy), so the ratios compare
// schedules, not machines. schedule_ms_4096 is wall time on this machine.
//
//   maestro-bench scheduler --json [--quick] [-- --artifacts=DIR]
// With --artifacts=DIR it also writes DIR/scheduler-gantt-<policy>.svg
// and DIR/scheduler-trace.json for a small step (the pictures in docs/).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/splitmix.h"
#include "bench/registry.h"
#include "scheduler/scheduler.h"
#include "scheduler/simulator.h"
#include "scheduler/synthetic.h"

namespace {

using namespace maestro::scheduler;  // NOLINT(google-build-using-namespace)

double SimulatedSeconds(const Problem& p, Policy policy, int64_t step, int max_in_flight = 0) {
  ScheduleOptions o;
  o.policy = policy;
  o.max_in_flight = max_in_flight;
  o.seed = 17;
  o.step = step;
  Schedule s = BuildSchedule(p, o).ValueOrDie();
  return Simulate(p, s).ValueOrDie().step_seconds;
}

void WriteArtifacts(const std::string& dir) {
  SyntheticPlanOptions po;
  po.sections = 3;
  po.max_fanout = 2;
  po.seed = 3;
  Problem p = MakeSyntheticPlan(po);
  // Small enough to read: a handful of replicas, 48 samples.
  p.sections[0].dp = 1;  // vit
  p.sections[1].dp = 2;  // projector
  p.sections[2].dp = 2;  // llm
  p.sections[0].micro_batch = 4;
  p.sections[1].micro_batch = 4;
  p.sections[2].micro_batch = 2;
  SyntheticBatchOptions bo;
  bo.samples = 48;
  bo.image_ratio = 0.5;
  bo.seed = 11;
  p.samples = MakeSyntheticBatch(p, bo);
  for (Policy policy : {Policy::kWavefront, Policy::kFifo, Policy::kFifoStrided, Policy::kFifoContiguous}) {
    ScheduleOptions o;
    o.policy = policy;
    Schedule s = BuildSchedule(p, o).ValueOrDie();
    Simulation sim = Simulate(p, s).ValueOrDie();
    const double lb = ComputeLowerBound(p).ValueOrDie().seconds;
    char title[200];
    std::snprintf(
        title, sizeof(title),
        "%s schedule: vit(dp1) -> projector(dp2) -> llm(dp2), 48 samples, half with an image; lower bound %.3g s",
        PolicyName(policy), lb);
    (void)sim.WriteGanttSvg(dir + "/scheduler-gantt-" + PolicyName(policy) + ".svg", title);
    if (policy == Policy::kWavefront) (void)sim.WriteChromeTrace(dir + "/scheduler-trace.json");
  }
}

// The per-step ratios of one workload (a batch-length model) over every plan.
struct MixResult {
  double wf_lb = 0, fifo_lb = 0, strided_lb = 0, cont_lb = 0, bal_lb = 0;
  double speedup = 0, speedup_strided = 0, speedup_cont = 0, speedup_bal = 0;
  double cap4_lb = 0, cap16_lb = 0, worst_wf_lb = 0;
  int count = 0;
  nlohmann::json per_plan = nlohmann::json::array();
  nlohmann::json by_ratio = nlohmann::json::array();
  nlohmann::json by_size = nlohmann::json::array();
};

struct PlanShape {
  int sections, fanout;
};

MixResult RunMix(const std::vector<PlanShape>& shapes, int steps, int max_samples, int run_length, int max_images,
                 bool uniform_lengths, bool with_caps) {
  MixResult m;
  // Buckets of image ratio for the table in docs/scheduler.md.
  const int kBuckets = 5;
  std::vector<double> b_wf(kBuckets), b_fifo(kBuckets), b_bal(kBuckets), b_cont(kBuckets), b_str(kBuckets);
  std::vector<int> b_n(kBuckets);
  // And by batch size: 256-1023, 1024-2047, 2048-4096 samples.
  const int kSizes = 3;
  std::vector<double> z_wf(kSizes), z_fifo(kSizes), z_str(kSizes), z_speedup(kSizes), z_speedup_str(kSizes);
  std::vector<int> z_n(kSizes);
  for (size_t k = 0; k < shapes.size(); ++k) {
    SyntheticPlanOptions po;
    po.sections = shapes[k].sections;
    po.max_fanout = shapes[k].fanout;
    po.seed = 100 + k;
    Problem p = MakeSyntheticPlan(po);
    double plan_wf = 0, plan_fifo = 0, plan_bal = 0, plan_cont = 0, plan_str = 0;
    std::string dps;
    for (const SectionSpec& s : p.sections) dps += (dps.empty() ? "" : " ") + s.name + ":" + std::to_string(s.dp);
    for (int step = 0; step < steps; ++step) {
      const uint64_t r = maestro::SplitMix64(po.seed * 1000 + static_cast<uint64_t>(step));
      SyntheticBatchOptions bo;
      bo.samples = 256 + static_cast<int>(r % static_cast<uint64_t>(max_samples - 256 + 1));
      bo.image_ratio = static_cast<double>((r >> 20) % 1001) / 1000.0;
      bo.seed = r;
      bo.run_length = run_length;
      bo.max_images = max_images;
      bo.uniform_lengths = uniform_lengths;
      p.samples = MakeSyntheticBatch(p, bo);
      const double lb = ComputeLowerBound(p).ValueOrDie().seconds;
      const double wf = SimulatedSeconds(p, Policy::kWavefront, step);
      const double fifo = SimulatedSeconds(p, Policy::kFifo, step);
      const double str = SimulatedSeconds(p, Policy::kFifoStrided, step);
      const double bal = SimulatedSeconds(p, Policy::kBalanceOnly, step);
      const double cont = SimulatedSeconds(p, Policy::kFifoContiguous, step);
      if (with_caps) {
        // The price of a memory cap on micro-batches between forward and backward.
        m.cap4_lb += SimulatedSeconds(p, Policy::kWavefront, step, 4) / lb;
        m.cap16_lb += SimulatedSeconds(p, Policy::kWavefront, step, 16) / lb;
      }
      m.wf_lb += wf / lb;
      m.fifo_lb += fifo / lb;
      m.strided_lb += str / lb;
      m.cont_lb += cont / lb;
      m.bal_lb += bal / lb;
      m.speedup += fifo / wf;
      m.speedup_strided += str / wf;
      m.speedup_cont += cont / wf;
      m.speedup_bal += bal / wf;
      m.worst_wf_lb = std::max(m.worst_wf_lb, wf / lb);
      plan_wf += wf / lb;
      plan_fifo += fifo / lb;
      plan_str += str / lb;
      plan_bal += bal / lb;
      plan_cont += cont / lb;
      const size_t b = static_cast<size_t>(std::min(kBuckets - 1, static_cast<int>(bo.image_ratio * kBuckets)));
      b_wf[b] += wf / lb;
      b_fifo[b] += fifo / lb;
      b_str[b] += str / lb;
      b_bal[b] += bal / lb;
      b_cont[b] += cont / lb;
      ++b_n[b];
      const size_t z = bo.samples < 1024 ? 0 : bo.samples < 2048 ? 1 : 2;
      z_wf[z] += wf / lb;
      z_fifo[z] += fifo / lb;
      z_str[z] += str / lb;
      z_speedup[z] += fifo / wf;
      z_speedup_str[z] += str / wf;
      ++z_n[z];
      ++m.count;
    }
    m.per_plan.push_back({{"sections", po.sections},
                          {"max_fanout", po.max_fanout},
                          {"dp", dps},
                          {"wavefront_over_lb", plan_wf / steps},
                          {"fifo_over_lb", plan_fifo / steps},
                          {"fifo_strided_over_lb", plan_str / steps},
                          {"balance_over_lb", plan_bal / steps},
                          {"fifo_contiguous_over_lb", plan_cont / steps}});
  }
  for (int b = 0; b < kBuckets; ++b) {
    const size_t bi = static_cast<size_t>(b);
    if (b_n[bi] == 0) continue;
    const double n = b_n[bi];
    m.by_ratio.push_back(
        {{"image_ratio", std::to_string(b * 0.2).substr(0, 3) + "-" + std::to_string((b + 1) * 0.2).substr(0, 3)},
         {"steps", b_n[bi]},
         {"wavefront_over_lb", b_wf[bi] / n},
         {"fifo_over_lb", b_fifo[bi] / n},
         {"fifo_strided_over_lb", b_str[bi] / n},
         {"balance_over_lb", b_bal[bi] / n},
         {"fifo_contiguous_over_lb", b_cont[bi] / n}});
  }
  const char* size_names[] = {"256-1023", "1024-2047", "2048-4096"};
  for (size_t z = 0; z < static_cast<size_t>(kSizes); ++z) {
    if (z_n[z] == 0) continue;
    m.by_size.push_back({{"samples", size_names[z]},
                         {"steps", z_n[z]},
                         {"wavefront_over_lb", z_wf[z] / z_n[z]},
                         {"fifo_over_lb", z_fifo[z] / z_n[z]},
                         {"fifo_strided_over_lb", z_str[z] / z_n[z]},
                         {"speedup_vs_fifo", z_speedup[z] / z_n[z]},
                         {"speedup_vs_fifo_strided", z_speedup_str[z] / z_n[z]}});
  }
  return m;
}

}  // namespace

MAESTRO_BENCHMARK(scheduler, "wavefront vs FIFO / balance-only vs lower bound on random multimodal batches") {
  const std::vector<PlanShape> shapes = {{2, 1}, {2, 2}, {3, 2}, {3, 4}, {4, 2},
                                         {4, 3}, {5, 2}, {5, 4}, {6, 2}, {6, 3}};
  const int steps = options.quick ? 3 : 8;
  const int max_samples = options.quick ? 512 : 4096;
  int run_length = 1;
  for (const std::string& a : options.args) {
    if (a.rfind("--run-length=", 0) == 0) run_length = std::max(1, std::atoi(a.c_str() + 13));
  }
  // The headline workload: variable text lengths (long-tailed), variable image
  // token counts (native resolution), one image per image sample.
  const MixResult m = RunMix(shapes, steps, max_samples, run_length, 1, false, true);
  // The same samples and modalities with every length at its mean.
  const MixResult u = RunMix(shapes, steps, max_samples, run_length, 1, true, false);
  // Several images per image sample (1-4, geometric).
  const MixResult mi = RunMix(shapes, steps, max_samples, run_length, 4, false, false);
  // Scheduler time: 4096 samples, 6 sections.
  SyntheticPlanOptions po;
  po.sections = 6;
  po.max_fanout = 2;
  po.seed = 7;
  Problem p = MakeSyntheticPlan(po);
  SyntheticBatchOptions bo;
  bo.samples = 4096;
  bo.image_ratio = 0.5;
  bo.seed = 99;
  p.samples = MakeSyntheticBatch(p, bo);
  // Wall time of BuildSchedule. The minimum over repeats is the figure (the
  // least disturbed run on a shared machine); the median is reported beside it.
  auto timed = [&](Policy policy, int repeats, double* median) {
    ScheduleOptions so;
    so.policy = policy;
    std::vector<double> t;
    (void)BuildSchedule(p, so).ValueOrDie();  // warm-up
    for (int i = 0; i < repeats; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      (void)BuildSchedule(p, so).ValueOrDie();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    *median = t[t.size() / 2];
    return t.front();
  };
  double schedule_median = 0, fifo_median = 0;
  const double schedule_s = timed(Policy::kWavefront, options.quick ? 5 : 21, &schedule_median);
  const double fifo_s = timed(Policy::kFifo, options.quick ? 5 : 21, &fifo_median);
  const Schedule sch = BuildSchedule(p, ScheduleOptions{}).ValueOrDie();
  const double simulate_s =
      maestro::bench::MedianSeconds([&] { (void)Simulate(p, sch).ValueOrDie(); }, options.quick ? 3 : 5);

  for (const std::string& a : options.args) {
    if (a.rfind("--artifacts=", 0) == 0) WriteArtifacts(a.substr(12));
  }
  nlohmann::json out;
  const double n = m.count, nu = u.count, ni = mi.count;
  out["makespan_over_lower_bound"] = m.wf_lb / n;
  out["speedup_vs_fifo"] = m.speedup / n;
  out["schedule_ms_4096"] = schedule_s * 1e3;
  out["speedup_vs_fifo_strided"] = m.speedup_strided / n;
  out["speedup_vs_balance_only"] = m.speedup_bal / n;
  out["speedup_vs_fifo_contiguous"] = m.speedup_cont / n;
  out["makespan_over_lower_bound_max_in_flight_4"] = m.cap4_lb / n;
  out["makespan_over_lower_bound_max_in_flight_16"] = m.cap16_lb / n;
  out["fifo_contiguous_over_lower_bound"] = m.cont_lb / n;
  out["fifo_over_lower_bound"] = m.fifo_lb / n;
  out["fifo_strided_over_lower_bound"] = m.strided_lb / n;
  out["balance_only_over_lower_bound"] = m.bal_lb / n;
  out["worst_makespan_over_lower_bound"] = m.worst_wf_lb;
  // Uniform lengths (every text, image, audio at the mean token count).
  out["makespan_over_lower_bound_uniform_lengths"] = u.wf_lb / nu;
  out["speedup_vs_fifo_uniform_lengths"] = u.speedup / nu;
  out["speedup_vs_fifo_strided_uniform_lengths"] = u.speedup_strided / nu;
  out["speedup_vs_fifo_contiguous_uniform_lengths"] = u.speedup_cont / nu;
  out["fifo_over_lower_bound_uniform_lengths"] = u.fifo_lb / nu;
  out["fifo_strided_over_lower_bound_uniform_lengths"] = u.strided_lb / nu;
  // 1-4 images per image sample.
  out["makespan_over_lower_bound_multi_image"] = mi.wf_lb / ni;
  out["speedup_vs_fifo_multi_image"] = mi.speedup / ni;
  out["speedup_vs_fifo_strided_multi_image"] = mi.speedup_strided / ni;
  out["speedup_vs_fifo_contiguous_multi_image"] = mi.speedup_cont / ni;
  out["fifo_over_lower_bound_multi_image"] = mi.fifo_lb / ni;
  out["fifo_strided_over_lower_bound_multi_image"] = mi.strided_lb / ni;
  out["schedule_ms_4096_median"] = schedule_median * 1e3;
  out["fifo_schedule_ms_4096"] = fifo_s * 1e3;
  out["simulate_ms_4096"] = simulate_s * 1e3;
  out["steps"] = m.count;
  out["plans"] = m.per_plan;
  out["by_image_ratio"] = m.by_ratio;
  out["by_batch_size"] = m.by_size;
  out["plans_uniform_lengths"] = u.per_plan;
  out["by_batch_size_uniform_lengths"] = u.by_size;
  out["plans_multi_image"] = mi.per_plan;
  return out;
}
