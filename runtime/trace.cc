// SPDX-License-Identifier: Apache-2.0
#include "runtime/trace.h"

#include <fmt/format.h>

#include <chrono>
#include <fstream>

#include "base/checks.h"
#include "base/files.h"
#include "runtime/collectives.h"

namespace maestro::runtime {

int64_t WallMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void StepTrace::Add(const std::string& name, int64_t start_us, int samples, int computed) {
  if (step_ >= 20 && step_ < total_steps_ - 100) return;
  events_.push_back({name, step_, start_us, WallMicros() - start_us, samples, computed});
}

StatusOr<nlohmann::json> WriteTrace(launcher::Backend& world, const plan::Plan& plan, int section, int world_rank,
                                    const std::string& run_dir, const std::vector<TraceEvent>& events) {
  // Every rank writes its events; rank 0 merges them into trace.json.
  const std::string dir = run_dir + "/trace";
  MAESTRO_RETURN_IF_ERROR(CreateDirectories(dir));
  nlohmann::json mine = nlohmann::json::array();
  for (const auto& e : events) {
    nlohmann::json args = {{"step", e.step}, {"samples", e.samples}};
    if (e.computed >= 0) args["computed"] = e.computed;
    mine.push_back({{"name", e.name},
                    {"ph", "X"},
                    {"ts", e.start_us},
                    {"dur", e.dur_us},
                    {"pid", section},
                    {"tid", world_rank},
                    {"args", std::move(args)}});
  }
  MAESTRO_RETURN_IF_ERROR(WriteFileAtomically(fmt::format("{}/rank-{}.json", dir, world_rank), mine.dump()));
  MAESTRO_RETURN_IF_ERROR(Wait(world.Barrier()));
  nlohmann::json all = nlohmann::json::array();
  if (world_rank != 0) return all;
  for (size_t s = 0; s < plan.sections.size(); ++s) {
    all.push_back({{"name", "process_name"},
                   {"ph", "M"},
                   {"pid", s},
                   {"args", {{"name", fmt::format("section {}", plan.sections[s].name)}}}});
  }
  for (int r = 0; r < plan.world_size(); ++r) {
    std::ifstream in(fmt::format("{}/rank-{}.json", dir, r));
    if (!in) continue;
    auto part = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (part.is_array()) {
      for (auto& e : part) all.push_back(std::move(e));
    }
  }
  MAESTRO_RETURN_IF_ERROR(WriteFileAtomically(run_dir + "/trace.json",
                                              nlohmann::json{{"traceEvents", all}, {"displayTimeUnit", "ms"}}.dump()));
  return all;
}

}  // namespace maestro::runtime
