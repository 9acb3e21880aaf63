// SPDX-License-Identifier: Apache-2.0
#include "runtime/step_metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/checks.h"
#include "base/log.h"
#include "base/process_memory.h"
#include "runtime/collectives.h"

namespace maestro::runtime {

StatusOr<StepTotals> SumStepStats(launcher::Backend& world, const plan::Plan& plan, int section,
                                  const RankStepStats& mine) {
  // [loss_sum, loss_samples, answers, right, stop, checkpoint due, checkpoint
  //  writing, busy per section..., framework seconds per section...,
  //  (tokens, model FLOPs) per work slot...]
  constexpr size_t kHead = 7;
  const size_t sections = plan.sections.size();
  const size_t slots = WorkSlotNames(plan).size();
  const size_t work_at = kHead + 2 * sections;
  std::vector<double> stats(work_at + 2 * slots, 0.0);
  if (mine.counts_loss) {
    stats[0] = mine.loss_sum;
    stats[1] = static_cast<double>(mine.loss_samples);
    stats[2] = static_cast<double>(mine.answers);
    stats[3] = static_cast<double>(mine.answers_right);
  }
  stats[4] = mine.stop_requested ? 1.0 : 0.0;
  stats[5] = mine.checkpoint_due ? 1.0 : 0.0;
  stats[6] = mine.checkpoint_writing ? 1.0 : 0.0;
  stats[kHead + static_cast<size_t>(section)] = mine.busy_seconds;
  stats[kHead + sections + static_cast<size_t>(section)] = mine.framework_seconds;
  const size_t first_slot = FirstWorkSlot(plan, section);
  for (size_t k = 0; k < mine.work.size() && k < WorkSlotsOf(plan, section); ++k) {
    stats[work_at + 2 * (first_slot + k)] = mine.work[k].tokens;
    stats[work_at + 2 * (first_slot + k) + 1] = mine.work[k].model_flops;
  }
  MAESTRO_RETURN_IF_ERROR(Wait(world.AllReduce(launcher::CpuBuffer(stats), launcher::ReduceOp::kSum)));
  StepTotals totals;
  totals.loss_sum = stats[0];
  totals.loss_samples = stats[1];
  totals.answers = stats[2];
  totals.answers_right = stats[3];
  totals.stop = stats[4] > 0;
  totals.checkpoint_due = stats[5] > 0;
  totals.checkpoint_writing = stats[6] > 0;
  const auto busy = stats.begin() + static_cast<std::ptrdiff_t>(kHead);
  totals.busy.assign(busy, busy + static_cast<std::ptrdiff_t>(sections));
  totals.framework.assign(busy + static_cast<std::ptrdiff_t>(sections),
                          busy + static_cast<std::ptrdiff_t>(2 * sections));
  totals.work.resize(slots);
  for (size_t k = 0; k < slots; ++k) totals.work[k] = {stats[work_at + 2 * k], stats[work_at + 2 * k + 1]};
  return totals;
}

namespace {
double PeakNow() {
  auto peak = PeakResidentBytes();
  return peak.ok() ? static_cast<double>(*peak) : 0.0;
}
}  // namespace

void RankMemoryTracker::MarkBaseline() {
  auto now = ResidentBytes();
  if (!now.ok()) Log(LogLevel::kWarn, "memory report: {}", now.status().ToString());
  memory_.baseline_rss = now.ok() ? static_cast<double>(*now) : 0.0;
}

void RankMemoryTracker::MarkStepEnd() {
  memory_.peak_rss = std::max(memory_.peak_rss, PeakNow());
}

void RankMemoryTracker::MarkCheckpointEnd() {
  memory_.process_peak_rss = std::max(memory_.process_peak_rss, PeakNow());
  if (auto reset = ResetPeakResident(); !reset.ok()) {
    Log(LogLevel::kDebug, "memory report: {} (the step peak then includes checkpoints)", reset.ToString());
  }
}

RankMemory RankMemoryTracker::Result() const {
  RankMemory out = memory_;
  out.process_peak_rss = std::max({out.process_peak_rss, out.peak_rss, PeakNow()});
  return out;
}

StatusOr<std::vector<RankMemory>> GatherRankMemory(launcher::Backend& world, int world_size, int world_rank,
                                                   const RankMemory& mine) {
  constexpr size_t kFields = 4;
  std::vector<double> values(kFields * static_cast<size_t>(world_size), 0.0);
  const size_t at = kFields * static_cast<size_t>(world_rank);
  values[at] = mine.section;
  values[at + 1] = mine.baseline_rss;
  values[at + 2] = mine.peak_rss;
  values[at + 3] = mine.process_peak_rss;
  MAESTRO_RETURN_IF_ERROR(Wait(world.AllReduce(launcher::CpuBuffer(values), launcher::ReduceOp::kSum)));
  std::vector<RankMemory> out(static_cast<size_t>(world_size));
  for (size_t r = 0; r < out.size(); ++r) {
    out[r].section = static_cast<int>(values[kFields * r]);
    out[r].baseline_rss = values[kFields * r + 1];
    out[r].peak_rss = values[kFields * r + 2];
    out[r].process_peak_rss = values[kFields * r + 3];
  }
  return out;
}

void StepReporter::Open(const std::string& run_dir) {
  metrics_.open(run_dir + "/metrics.jsonl", std::ios::app);
}

void StepReporter::Report(int64_t step, int64_t epoch, size_t samples, double loss, const StepTotals& totals,
                          double step_seconds) {
  const size_t sections = plan_.sections.size();
  nlohmann::json busy = nlohmann::json::object();
  std::string busy_text;
  double framework = 0.0;
  for (size_t s = 0; s < sections; ++s) framework += totals.framework[s];
  const double overhead = step_seconds > 0 ? framework / (plan_.world_size() * step_seconds) : 0.0;
  for (size_t s = 0; s < sections; ++s) {
    const auto& sp = plan_.sections[s];
    const double share = step_seconds > 0 ? totals.busy[s] / (sp.config.ranks() * step_seconds) : 0.0;
    busy[sp.name] = share;
    busy_text += fmt::format(" {} {:.0f}%", sp.name, 100.0 * share);
  }
  const double samples_per_s = step_seconds > 0 ? static_cast<double>(samples) / step_seconds : 0.0;
  nlohmann::json work = nlohmann::json::object();
  const std::vector<std::string> slots = WorkSlotNames(plan_);
  for (size_t k = 0; k < slots.size() && k < totals.work.size(); ++k) {
    const SectionWork& w = totals.work[k];
    work[slots[k]] = {{"tokens", static_cast<int64_t>(std::llround(w.tokens))},
                      {"tokens_per_s", step_seconds > 0 ? w.tokens / step_seconds : 0.0},
                      {"model_flops_per_s", step_seconds > 0 ? w.model_flops / step_seconds : 0.0}};
  }
  const int64_t total = total_steps_;
  nlohmann::json line{{"step", step},
                      {"epoch", epoch},
                      {"loss", loss},
                      {"samples", samples},
                      {"step_seconds", step_seconds},
                      {"samples_per_s", samples_per_s},
                      {"busy", busy},
                      {"overhead", overhead},
                      {"sections", work}};
  if (totals.answers > 0) line["answer_accuracy"] = totals.answers_right / totals.answers;
  if (skipped_samples_ >= 0) line["skipped_samples"] = skipped_samples_;
  if (metrics_) metrics_ << line.dump() << "\n" << std::flush;
  if (!progress_) return;
  const std::string text =
      fmt::format("step {}/{} loss {:.4f} {:.1f} samples/s busy{}", step + 1, total, loss, samples_per_s, busy_text);
  if (isatty(fileno(stderr))) {
    const int width = 30;
    const int filled = total > 0 ? static_cast<int>(width * (step + 1) / total) : 0;
    std::fprintf(stderr, "\r[%s%s] %s", std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(width - filled), '.').c_str(), text.c_str());
    if (step + 1 >= total) std::fprintf(stderr, "\n");
  } else {
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  std::fflush(stderr);
}

void StepReporter::ReportMemory(const std::vector<RankMemory>& ranks) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankMemory& m = ranks[r];
    const bool known = m.section >= 0 && m.section < static_cast<int>(plan_.sections.size());
    list.push_back({{"rank", r},
                    {"section", known ? plan_.sections[static_cast<size_t>(m.section)].name : std::string()},
                    {"baseline_rss_bytes", m.baseline_rss},
                    {"peak_rss_bytes", m.peak_rss},
                    {"process_peak_rss_bytes", m.process_peak_rss}});
  }
  if (metrics_) metrics_ << nlohmann::json{{"memory", list}}.dump() << "\n" << std::flush;
}

void StepReporter::ReportEval(const std::string& name, double value) {
  if (metrics_) metrics_ << nlohmann::json{{"eval", name}, {"value", value}}.dump() << "\n";
}

void StepReporter::ReportOfflinePass(double seconds, int64_t rows) {
  if (metrics_) metrics_ << nlohmann::json{{"offline_pass_s", seconds}, {"rows", rows}}.dump() << "\n" << std::flush;
}

void StepReporter::ReportCheckpoint(int64_t step, int64_t committed_after_step, bool async, double stall_seconds,
                                    double write_seconds, double snapshot_seconds) {
  if (!metrics_) return;
  metrics_ << nlohmann::json{{"checkpoint", step},       {"committed_after_step", committed_after_step},
                             {"async", async},           {"stall_s", stall_seconds},
                             {"write_s", write_seconds}, {"snapshot_s", snapshot_seconds}}
                  .dump()
           << "\n";
}

}  // namespace maestro::runtime
