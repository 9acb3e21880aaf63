// SPDX-License-Identifier: Apache-2.0
// The compact JSON form of a Schedule (what the datalayer stores per step):
// ScheduleToJson / ScheduleFromJson, declared in scheduler/scheduler.h.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/scheduler.h"

namespace maestro::scheduler {

std::string ScheduleToJson(const Schedule& sch) {
  nlohmann::json j;
  j["v"] = 1;
  j["policy"] = sch.policy;
  j["seed"] = sch.seed;
  j["step"] = sch.step;
  j["predicted"] = sch.predicted_step_seconds;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankProgram& r : sch.ranks) {
    nlohmann::json jr;
    jr["s"] = r.section;
    jr["r"] = r.replica;
    nlohmann::json mbs = nlohmann::json::array();
    for (const MicroBatch& mb : r.micro_batches) mbs.push_back(mb.sample_ids);
    jr["mb"] = std::move(mbs);
    std::string ops;
    for (const Op& op : r.ops) {
      if (!ops.empty()) ops += ' ';
      if (op.kind == OpKind::kOptimizer) {
        ops += 'O';
      } else {
        ops += op.kind == OpKind::kForward ? 'F' : 'B';
        ops += std::to_string(op.micro_batch);
      }
    }
    jr["ops"] = ops;
    ranks.push_back(std::move(jr));
  }
  j["ranks"] = std::move(ranks);
  return j.dump();
}

StatusOr<Schedule> ScheduleFromJson(const std::string& text, const std::string& origin) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument(origin + ": not valid JSON");
  try {
    const auto version = j.find("v");
    if (version == j.end() || *version != 1) {
      return Status::InvalidArgument(origin + ": schedule format version " +
                                     (version == j.end() ? std::string("(none)") : version->dump()) +
                                     " is not supported (expected 1)");
    }
    Schedule sch;
    sch.policy = j.at("policy").get<std::string>();
    sch.seed = j.at("seed").get<uint64_t>();
    sch.step = j.at("step").get<int64_t>();
    sch.predicted_step_seconds = j.value("predicted", 0.0);
    for (const auto& jr : j.at("ranks")) {
      RankProgram r;
      r.section = jr.at("s").get<int>();
      r.replica = jr.at("r").get<int>();
      for (const auto& mb : jr.at("mb")) r.micro_batches.push_back(MicroBatch{mb.get<std::vector<uint64_t>>()});
      const std::string ops = jr.at("ops").get<std::string>();
      size_t pos = 0;
      while (pos < ops.size()) {
        size_t end = ops.find(' ', pos);
        if (end == std::string::npos) end = ops.size();
        const std::string tok = ops.substr(pos, end - pos);
        pos = end + 1;
        if (tok.empty()) continue;
        Op op;
        if (tok == "O") {
          op.kind = OpKind::kOptimizer;
        } else if ((tok[0] == 'F' || tok[0] == 'B') && tok.size() > 1 &&
                   tok.find_first_not_of("0123456789", 1) == std::string::npos && tok.size() < 11) {
          op.kind = tok[0] == 'F' ? OpKind::kForward : OpKind::kBackward;
          op.micro_batch = static_cast<int32_t>(std::stol(tok.substr(1)));
        } else {
          return Status::InvalidArgument(origin + ": section " + std::to_string(r.section) + " replica " +
                                         std::to_string(r.replica) + ": bad op '" + tok +
                                         "' (expected F<n>, B<n> or O)");
        }
        r.ops.push_back(op);
      }
      sch.ranks.push_back(std::move(r));
    }
    return sch;
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(origin + ": malformed schedule: " + e.what());
  }
}

}  // namespace maestro::scheduler
