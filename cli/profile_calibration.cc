// SPDX-License-Identifier: Apache-2.0
#include "cli/profile_calibration.h"

#include <algorithm>
#include <map>

#include "base/line_fit.h"
#include "scheduler/simulator.h"

namespace maestro::cli {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct TraceOp {
  char kind = 0;  // 'F', 'B', 'O'; 0: another event (computing, not calibrated)
  int section = -1;
  int64_t step = -1;
  int samples = 0;
  double start = 0, end = 0;  // microseconds
  double alone = 0;           // seconds alone on a core
};

// In-run alone times (seconds) of one section by micro-batch size.
struct SectionOps {
  std::map<int, std::vector<double>> forward, backward;
  std::vector<double> optimizer;
};

// The sweep points `pts` (sorted by micro-batch) at `samples`: the curve the
// compiler prices them by (plan::ProfileCurveAt).
double SweepAt(const std::vector<const plan::ProfilePoint*>& pts, double samples, bool forward) {
  std::vector<std::pair<double, double>> curve;
  for (const plan::ProfilePoint* p : pts) {
    curve.push_back({static_cast<double>(p->micro_batch), forward ? p->forward_seconds : p->seconds});
  }
  return plan::ProfileCurveAt(curve, samples);
}

// The points of `section` at `gpus`, sorted by micro-batch (pointers into `points`).
std::vector<const plan::ProfilePoint*> PointsOf(const std::vector<plan::ProfilePoint>& points,
                                                const std::string& section, int gpus) {
  std::vector<const plan::ProfilePoint*> out;
  for (const auto& p : points) {
    if (p.section == section && p.gpus == gpus) out.push_back(&p);
  }
  std::sort(out.begin(), out.end(),
            [](const plan::ProfilePoint* a, const plan::ProfilePoint* b) { return a->micro_batch < b->micro_batch; });
  return out;
}

// Step 1: every complete ("X") event of the trace with its time alone on a
// core (scheduler::AloneSeconds over all of them, every rank's clock being
// this machine's), F/B/O ops tagged with their section, step and samples.
std::vector<TraceOp> TraceOpsOf(const nlohmann::json& events, int shared_cores) {
  std::vector<TraceOp> all;
  for (const auto& e : events) {
    if (!e.is_object() || e.value("ph", "") != "X") continue;
    TraceOp op;
    op.start = e.value("ts", 0.0);
    op.end = op.start + std::max(0.0, e.value("dur", 0.0));
    const std::string name = e.value("name", "");
    if (e.contains("args") && e.at("args").is_object() && !name.empty()) {
      const nlohmann::json& args = e.at("args");
      op.step = args.value("step", int64_t{-1});
      // A forward-only section's op that a spool served in part is timed by
      // the rows it computed (runtime/trace.h): a run-ahead or spooled
      // teacher's F ops mostly read rows back, its A ops compute the next
      // batches'. An op that computed none calibrates nothing.
      op.samples = args.value("computed", args.value("samples", 0));
      op.section = e.value("pid", -1);
      if (name[0] == 'F' || name[0] == 'B') op.kind = name[0];
      if (name[0] == 'A') op.kind = 'F';  // A<m>; the "ahead" op after them is lowercase
      if (name == "O") op.kind = 'O';
    }
    all.push_back(op);
  }
  {
    std::vector<std::pair<double, double>> intervals;
    for (const auto& op : all) intervals.push_back({op.start * 1e-6, op.end * 1e-6});
    const std::vector<double> alone = scheduler::AloneSeconds(intervals, shared_cores);
    for (size_t i = 0; i < all.size(); ++i) all[i].alone = alone[i];
  }
  return all;
}

// The calibrated ops of each of `sections` sections by kind and micro-batch
// size, from step skip_steps on.
std::vector<SectionOps> OpsBySection(const std::vector<TraceOp>& all, size_t sections, int64_t skip_steps) {
  std::vector<SectionOps> ops(sections);
  for (const auto& op : all) {
    if (op.kind == 0 || op.step < skip_steps || op.section < 0 || op.section >= static_cast<int>(ops.size())) continue;
    auto& s = ops[static_cast<size_t>(op.section)];
    if (op.kind == 'F') s.forward[op.samples].push_back(op.alone);
    if (op.kind == 'B') s.backward[op.samples].push_back(op.alone);
    if (op.kind == 'O') s.optimizer.push_back(op.alone);
  }
  return ops;
}

// Steps 2 and 3 for one section: its points in `points` (at its planned GPU
// count) recalibrated to its in-run `ops`, and what changed.
SectionCalibration CalibrateSection(const plan::SectionPlan& sp, const SectionOps& ops,
                                    std::vector<plan::ProfilePoint>& points) {
  SectionCalibration c;
  c.section = sp.name;
  const int gpus = sp.config.tp * sp.config.pp * sp.config.cp;
  const std::vector<const plan::ProfilePoint*> sweep = PointsOf(points, sp.name, gpus);
  // Per size with enough ops: median forward + median backward.
  std::vector<double> x, y, f, w;
  for (const auto& [k, fwd] : ops.forward) {
    if (k <= 0 || static_cast<int>(fwd.size()) < kMinOps) continue;
    auto b = ops.backward.find(k);
    const double forward = Median(fwd);
    x.push_back(k);
    f.push_back(forward);
    y.push_back(forward + (b == ops.backward.end() ? 0.0 : Median(b->second)));
    w.push_back(static_cast<double>(fwd.size()));
    c.ops += static_cast<int>(fwd.size());
  }
  c.sizes = static_cast<int>(x.size());
  const double planned = sp.config.micro_batch;
  if (!sweep.empty()) c.sweep_seconds = SweepAt(sweep, planned, false);
  if (!x.empty() && !sweep.empty()) {
    c.smallest = static_cast<int>(x.front());
    c.largest = static_cast<int>(x.back());
    double a = 0, b = 0, af = 0, bf = 0;
    const bool line = x.size() >= 2 && FitWeightedLine(x, y, w, &a, &b) && FitWeightedLine(x, f, w, &af, &bf) &&
                      b > 0 && a + b * x.front() > 0;
    if (!line) {  // one size (or no usable line): a ratio at the commonest size
      const size_t best = static_cast<size_t>(std::max_element(w.begin(), w.end()) - w.begin());
      a = af = 0;
      b = y[best] / x[best];
      bf = f[best] / x[best];
      const double ratio = y[best] / std::max(1e-12, SweepAt(sweep, x[best], false));
      for (auto& p : points) {
        if (p.section != sp.name || p.gpus != gpus) continue;
        p.seconds *= ratio;
        p.forward_seconds *= ratio;
      }
    } else {
      const auto line_at = [&](double k) { return a + b * k; };
      const auto forward_at = [&](double k) { return std::clamp(af + bf * k, 0.0, line_at(k)); };
      const double lo = x.front(), hi = x.back();
      const double ratio_lo = line_at(lo) / std::max(1e-12, SweepAt(sweep, lo, false));
      const double ratio_hi = line_at(hi) / std::max(1e-12, SweepAt(sweep, hi, false));
      const bool have_forward =
          std::all_of(sweep.begin(), sweep.end(), [](const plan::ProfilePoint* p) { return p->forward_seconds > 0; });
      const plan::ProfilePoint model = *sweep.front();
      std::vector<plan::ProfilePoint> kept;
      for (const auto& p : points) {
        if (p.section != sp.name || p.gpus != gpus) {
          kept.push_back(p);
          continue;
        }
        if (p.micro_batch >= lo && p.micro_batch <= hi) continue;  // the line replaces it
        plan::ProfilePoint q = p;
        const double r = p.micro_batch < lo ? ratio_lo : ratio_hi;
        q.seconds *= r;
        q.forward_seconds *= r;
        kept.push_back(q);
      }
      for (const double k : {lo, hi}) {
        plan::ProfilePoint q = model;
        q.micro_batch = static_cast<int>(k);
        q.seconds = line_at(k);
        q.forward_seconds = have_forward ? forward_at(k) : 0.0;
        kept.push_back(q);
      }
      points = std::move(kept);
    }
    c.fixed_seconds = a;
    c.seconds_per_sample = b;
  }
  if (!ops.optimizer.empty()) c.optimizer_seconds = Median(ops.optimizer);
  for (auto& p : points) {
    if (p.section == sp.name && c.optimizer_seconds >= 0) p.optimizer_seconds = c.optimizer_seconds;
  }
  const std::vector<const plan::ProfilePoint*> now = PointsOf(points, sp.name, gpus);
  if (!now.empty()) c.in_run_seconds = SweepAt(now, planned, false);
  if (c.sweep_seconds > 0 && c.in_run_seconds > 0) c.ratio = c.in_run_seconds / c.sweep_seconds;
  return c;
}

}  // namespace

void ScaleSweepToOneCore(int shared_cores, int world, std::vector<plan::ProfilePoint>* profile) {
  if (shared_cores <= 0 || world <= shared_cores) return;
  const double factor = static_cast<double>(shared_cores) / world;
  for (auto& p : *profile) {
    p.seconds *= factor;
    p.forward_seconds *= factor;
    p.optimizer_seconds *= factor;
  }
}

StatusOr<std::vector<SectionCalibration>> CalibrateProfile(const plan::Plan& plan, const nlohmann::json& trace,
                                                           int64_t skip_steps,
                                                           std::vector<plan::ProfilePoint>* profile) {
  if (profile == nullptr) return Status::InvalidArgument("CalibrateProfile: no profile");
  std::vector<plan::ProfilePoint>& points = *profile;
  const bool wrapped = trace.is_object() && trace.contains("traceEvents");
  const nlohmann::json& events = wrapped ? trace.at("traceEvents") : trace;
  if (!events.is_array()) return Status::InvalidArgument("CalibrateProfile: the trace has no traceEvents array");
  const std::vector<SectionOps> ops =
      OpsBySection(TraceOpsOf(events, plan.shared_cores), plan.sections.size(), skip_steps);
  std::vector<SectionCalibration> out;
  for (size_t i = 0; i < plan.sections.size(); ++i) out.push_back(CalibrateSection(plan.sections[i], ops[i], points));
  return out;
}

}  // namespace maestro::cli
