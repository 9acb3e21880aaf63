// SPDX-License-Identifier: Apache-2.0
#include "cli/profile_calibration.h"

#include <algorithm>
#include <map>

namespace maestro::cli {
namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// In-run durations (seconds) of one section by kind ('F', 'B', 'O') and
// micro-batch size.
struct SectionOps {
  std::map<int, std::vector<double>> forward, backward;
  std::vector<double> optimizer;
};

}  // namespace

StatusOr<std::vector<SectionCalibration>> CalibrateProfile(const plan::Plan& plan, const nlohmann::json& trace,
                                                           int64_t skip_steps,
                                                           std::vector<plan::ProfilePoint>* profile) {
  if (profile == nullptr) return Status::InvalidArgument("CalibrateProfile: no profile");
  std::vector<plan::ProfilePoint>& points = *profile;
  const bool wrapped = trace.is_object() && trace.contains("traceEvents");
  const nlohmann::json& events = wrapped ? trace.at("traceEvents") : trace;
  if (!events.is_array()) return Status::InvalidArgument("CalibrateProfile: the trace has no traceEvents array");

  std::vector<SectionOps> ops(plan.sections.size());
  for (const auto& e : events) {
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("args")) continue;
    const std::string name = e.value("name", "");
    const int section = e.value("pid", -1);
    if (name.empty() || section < 0 || section >= static_cast<int>(ops.size())) continue;
    const nlohmann::json& args = e.at("args");
    if (args.value("step", int64_t{-1}) < skip_steps) continue;
    const double seconds = e.value("dur", 0.0) * 1e-6;
    const int samples = args.value("samples", 0);
    auto& s = ops[static_cast<size_t>(section)];
    if (name[0] == 'F') s.forward[samples].push_back(seconds);
    if (name[0] == 'B') s.backward[samples].push_back(seconds);
    if (name == "O") s.optimizer.push_back(seconds);
  }

  std::vector<SectionCalibration> out;
  for (size_t i = 0; i < plan.sections.size(); ++i) {
    const auto& sp = plan.sections[i];
    SectionCalibration c;
    c.section = sp.name;
    const int gpus = sp.config.tp * sp.config.pp * sp.config.cp;
    // The index of the sweep's point of this section at `samples`; -1: none.
    const auto point = [&](int samples) {
      for (size_t j = 0; j < points.size(); ++j) {
        if (points[j].section == sp.name && points[j].gpus == gpus && points[j].micro_batch == samples) {
          return static_cast<int>(j);
        }
      }
      return -1;
    };
    // Compare at the planned micro-batch size; else at the size with the most
    // in-run micro-batches (at least 3) that the sweep measured too.
    const auto& fwd = ops[i].forward;
    const auto count = [&](int k) {
      auto it = fwd.find(k);
      return it == fwd.end() ? 0 : static_cast<int>(it->second.size());
    };
    int best = 0, best_ops = 0;
    if (count(sp.config.micro_batch) >= 3 && point(sp.config.micro_batch) >= 0) {
      best = sp.config.micro_batch;
      best_ops = count(best);
    } else {
      for (const auto& [k, v] : fwd) {
        if (static_cast<int>(v.size()) >= 3 && static_cast<int>(v.size()) > best_ops && point(k) >= 0) {
          best = k;
          best_ops = static_cast<int>(v.size());
        }
      }
    }
    if (best > 0) {
      c.samples = best;
      c.ops = best_ops;
      c.sweep_seconds = points[static_cast<size_t>(point(best))].seconds;
      auto b = ops[i].backward.find(best);
      c.in_run_seconds = Median(fwd.at(best)) + (b == ops[i].backward.end() ? 0.0 : Median(b->second));
      if (c.sweep_seconds > 0 && c.in_run_seconds > 0) c.ratio = c.in_run_seconds / c.sweep_seconds;
    }
    if (!ops[i].optimizer.empty()) c.optimizer_seconds = Median(ops[i].optimizer);
    for (auto& p : points) {
      if (p.section != sp.name) continue;
      p.seconds *= c.ratio;
      p.forward_seconds *= c.ratio;
      if (c.optimizer_seconds >= 0) p.optimizer_seconds = c.optimizer_seconds;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace maestro::cli
