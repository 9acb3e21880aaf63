// SPDX-License-Identifier: Apache-2.0
#include "runtime/profiler.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "base/checks.h"
#include "plan/plan_graph.h"
#include "plan/runtime_support.h"
#include "runtime/collectives.h"
#include "runtime/executor.h"
#include "runtime/message_tags.h"
#include "runtime/parallel/tensor_parallel.h"
#include "runtime/plan_data.h"
#include "runtime/section_runner.h"

namespace maestro::runtime {

namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The sizes every rank walks through, in the same order (ProfileRanks joins
// the ranks before each one).
std::vector<int> Sizes(const plan::Plan& plan, const ProfileOptions& options) {
  std::vector<int> sizes = options.micro_batches;
  for (const auto& s : plan.sections) sizes.push_back(s.config.micro_batch);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  sizes.erase(std::remove_if(sizes.begin(), sizes.end(), [&](int b) { return b < 1 || b > plan.data.global_batch; }),
              sizes.end());
  return sizes;
}

// Measures section `section` of `plan` (built as `runner`) at b samples.
// Returns false in *measured when the dataset has fewer than b samples that
// activate the section in its first part.
class SectionProfiler {
 public:
  SectionProfiler(const plan::Plan& plan, int section, SectionRunner& runner, const datasets::SampleSource& samples)
      : plan_(plan), section_(section), runner_(runner), samples_(samples) {}

  StatusOr<bool> Measure(int b, int repeats, ProfilePoint* point) {
    const auto& sp = plan_.sections[static_cast<size_t>(section_)];
    std::vector<int64_t> ids;
    std::vector<plan::SampleMedia> media;
    for (int64_t id = 0; id < samples_.NumSamples(datasets::Split::kTrain) && static_cast<int>(ids.size()) < b; ++id) {
      MAESTRO_ASSIGN_OR_RETURN(auto sample, samples_.Load(datasets::Split::kTrain, id));
      const plan::SampleMedia carries{static_cast<int64_t>(sample.images.size()),
                                      static_cast<int64_t>(sample.audios.size())};
      if (!SectionActivates(sp, carries)) continue;
      ids.push_back(id);
      media.push_back(carries);
    }
    if (static_cast<int>(ids.size()) < b) return false;
    MAESTRO_ASSIGN_OR_RETURN(auto data, LoadMicroBatch(samples_, ids));
    std::map<int, torch::Tensor> inputs;
    for (int e : runner_.in_edges()) {
      const int up = plan_.section_index(plan_.edges[static_cast<size_t>(e)].from);
      int64_t rows = 0;
      for (const auto& carries : media)
        rows += SectionActivates(plan_.sections[static_cast<size_t>(up)], carries) ? 1 : 0;
      std::vector<int64_t> shape{rows};
      for (int64_t d : RowShapeOf(plan_, up)) shape.push_back(d);
      torch::manual_seed(static_cast<uint64_t>(1000 * section_ + e));
      inputs[e] = torch::randn(shape) * 0.02;
      if (runner_.trains() && plan_.sections[static_cast<size_t>(up)].mode == plan::SectionMode::kTrain) {
        inputs[e].set_requires_grad(true);
      }
    }
    std::vector<double> total, forward, optimizer;
    for (int rep = 0; rep < 2 + repeats; ++rep) {
      const auto t0 = Clock::now();
      double fwd = 0.0;
      if (runner_.trains()) {
        MAESTRO_ASSIGN_OR_RETURN(auto out, runner_.Forward(data, inputs));
        fwd = SecondsSince(t0);
        if (out.loss.defined()) {
          out.loss.backward();
        } else if (out.rows.defined()) {
          out.rows.backward(torch::ones_like(out.rows));
        }
      } else {
        torch::NoGradGuard no_grad;
        MAESTRO_ASSIGN_OR_RETURN(auto out, runner_.Forward(data, inputs));
        fwd = SecondsSince(t0);
      }
      const double seconds = SecondsSince(t0);
      double opt = 0.0;
      if (runner_.trains()) {
        const auto o0 = Clock::now();
        runner_.EnsureGradients();
        runner_.OptimizerStep(0);
        opt = SecondsSince(o0);
      }
      for (auto& [e, t] : inputs) {
        if (t.grad().defined()) t.mutable_grad().reset();
      }
      if (rep >= 2) {
        total.push_back(seconds);
        forward.push_back(fwd);
        optimizer.push_back(opt);
      }
    }
    point->section = sp.name;
    point->gpus = sp.config.tp * sp.config.pp * sp.config.cp;
    point->micro_batch = b;
    point->seconds = Median(total);
    point->forward_seconds = std::min(point->seconds, Median(forward));
    point->optimizer_seconds = Median(optimizer);
    return true;
  }

 private:
  const plan::Plan& plan_;
  int section_;
  SectionRunner& runner_;
  const datasets::SampleSource& samples_;
};

}  // namespace

namespace {

// Profiles time sections of one component: a fused plan is profiled as the
// sectioned plan of the same spec (its components' lines, summed, price it).
Status RefuseFused(const plan::Plan& plan) {
  for (const auto& s : plan.sections) {
    if (!s.fused()) continue;
    return Status::InvalidArgument(fmt::format(
        "section '{}' is fused; profiles measure one component per section: compile the spec with --grouping "
        "sectioned to profile it (maestro profile does)",
        s.name));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::vector<ProfilePoint>> ProfileSections(const plan::Plan& plan, const ProfileOptions& options) {
  MAESTRO_RETURN_IF_ERROR(RefuseFused(plan));
  MAESTRO_RETURN_IF_ERROR(plan::CheckPlanRuns(plan));
  torch::set_num_threads(std::max(1, options.threads));
  MAESTRO_ASSIGN_OR_RETURN(auto samples, OpenPlanDataset(plan));
  std::vector<ProfilePoint> points;
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    plan::Plan solo = plan;  // TP 1: one process
    solo.sections[s].config.tp = 1;
    MAESTRO_ASSIGN_OR_RETURN(auto runner, SectionRunner::Create(solo, static_cast<int>(s)));
    SectionProfiler profiler(solo, static_cast<int>(s), *runner, *samples);
    for (int b : Sizes(plan, options)) {
      ProfilePoint point;
      MAESTRO_ASSIGN_OR_RETURN(bool measured, profiler.Measure(b, options.repeats, &point));
      if (!measured) break;
      points.push_back(point);
    }
  }
  return points;
}

StatusOr<std::vector<ProfilePoint>> ProfileRanks(const plan::Plan& plan, const launcher::RankPlace& place,
                                                 launcher::Communicators& comms, const ProfileOptions& options) {
  MAESTRO_RETURN_IF_ERROR(RefuseFused(plan));
  MAESTRO_RETURN_IF_ERROR(plan::CheckPlanRuns(plan));
  torch::set_num_threads(ThreadsPerRank());
  const int section = place.coords.section;
  const auto& sp = plan.sections[static_cast<size_t>(section)];
  MAESTRO_ASSIGN_OR_RETURN(auto samples, OpenPlanDataset(plan));
  RunnerOptions runner_options;
  std::unique_ptr<GroupReducer> tp_reducer;
  if (sp.config.tp > 1) {
    tp_reducer = std::make_unique<GroupReducer>(comms.group(plan::GroupKind::kTP));
    runner_options.tensor_parallel = tp_reducer.get();
  }
  MAESTRO_ASSIGN_OR_RETURN(auto runner, SectionRunner::Create(plan, section, runner_options));
  SectionProfiler profiler(plan, section, *runner, *samples);
  std::vector<ProfilePoint> mine;
  bool exhausted = false;
  for (int b : Sizes(plan, options)) {
    // Every rank starts each size together, so they measure side by side.
    MAESTRO_RETURN_IF_ERROR(Wait(comms.world().Barrier()));
    if (exhausted) continue;
    ProfilePoint point;
    MAESTRO_ASSIGN_OR_RETURN(bool measured, profiler.Measure(b, options.repeats, &point));
    if (measured) {
      mine.push_back(point);
    } else {
      exhausted = true;
    }
  }
  // Rank 0 gathers every rank's points; a section's replicas give one median.
  if (place.world_rank != 0) {
    MAESTRO_RETURN_IF_ERROR(SendBytes(comms.world(), plan::ProfilePointsToJson(mine), 0, kTagProfilePoints));
    return std::vector<ProfilePoint>{};
  }
  std::map<std::pair<std::string, int>, std::vector<ProfilePoint>> by_size;
  const auto add = [&](const std::vector<ProfilePoint>& points) {
    for (const auto& p : points) by_size[{p.section, p.micro_batch}].push_back(p);
  };
  add(mine);
  for (int r = 1; r < place.world_size; ++r) {
    MAESTRO_ASSIGN_OR_RETURN(auto text, RecvBytes(comms.world(), r, kTagProfilePoints));
    MAESTRO_ASSIGN_OR_RETURN(auto points, plan::ProfilePointsFromJson(text));
    add(points);
  }
  std::vector<ProfilePoint> merged;
  for (const auto& s : plan.sections) {  // plan order, then micro-batch
    for (auto& [key, points] : by_size) {
      if (key.first != s.name) continue;
      ProfilePoint p = points.front();
      std::vector<double> total, forward, optimizer;
      for (const auto& q : points) {
        total.push_back(q.seconds);
        forward.push_back(q.forward_seconds);
        optimizer.push_back(q.optimizer_seconds);
      }
      p.seconds = Median(total);
      p.forward_seconds = std::min(p.seconds, Median(forward));
      p.optimizer_seconds = Median(optimizer);
      merged.push_back(p);
    }
  }
  return merged;
}

}  // namespace maestro::runtime
