// SPDX-License-Identifier: Apache-2.0
#include "cli/dry_run.h"

#include <fmt/format.h>

#include <set>

#include "base/shell.h"
#include "base/text.h"
#include "launcher/launch_env.h"

namespace maestro::cli {

namespace {

// "0-7", "3", "0,2,5"
std::string RankRange(const std::vector<int>& ranks) {
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i) contiguous = contiguous && ranks[i] == ranks[i - 1] + 1;
  if (ranks.size() > 1 && contiguous) return fmt::format("{}-{}", ranks.front(), ranks.back());
  return fmt::format("{}", fmt::join(ranks, ","));
}

std::string DevicesLine(const LocalDevices& d) {
  if (!d.gpus) return fmt::format("devices: CPU slots ({})\n", d.cpu_reason);
  std::string line = fmt::format("devices: {} x {} (GPU{} {} by {}): ", d.used.size(), PrintableText(d.gpu_name),
                                 d.used.size() == 1 ? "" : "s", RankRange(d.used), PrintableText(d.source));
  line += d.type.has_profile ? fmt::format("device profile {}", d.type.type)
                             : fmt::format("type {}, no device profile: {}", d.type.type, d.type.note);
  line += "\n";
  for (const auto& idle : d.idle) line += "  " + idle + "\n";
  return line;
}

std::string PlanLines(const plan::Plan& plan, const std::string& plan_path) {
  std::string out =
      fmt::format("plan: {}: {} section(s), {} rank(s), predicted {:.4g} s per step\n", PrintableText(plan_path),
                  plan.sections.size(), plan.world_size(), plan.predicted_step_seconds);
  for (const auto& s : plan.sections) {
    std::vector<int> ranks;
    for (int r = 0; r < s.config.ranks(); ++r) ranks.push_back(s.placement.first_rank + r);
    std::string components;
    for (const auto& c : s.components) components += (components.empty() ? "" : ", ") + PrintableText(c.name);
    out += fmt::format("  section '{}'{} ranks {}: TP {} PP {} CP {} DP {}, micro-batch {}, on {}\n",
                       PrintableText(s.name), components.empty() ? "" : " (fused: " + components + ")",
                       RankRange(ranks), s.config.tp, s.config.pp, s.config.cp, s.config.dp, s.config.micro_batch,
                       s.placement.gpus_per_task > 0
                           ? fmt::format("{} GPU(s) of type {} per rank", s.placement.gpus_per_task,
                                         PrintableText(s.placement.gpu_type))
                           : std::string("the CPU"));
  }
  return out;
}

// The device rank `r` binds: the launcher's placement under mpirun on one
// machine (OMPI_COMM_WORLD_RANK = OMPI_COMM_WORLD_LOCAL_RANK = r).
std::string RankDevice(const DryRunInput& in, int r) {
  const std::string rank = std::to_string(r);
  const launcher::EnvLookup env = [&](const char* name) -> const char* {
    const std::string n = name;
    if (n == "OMPI_COMM_WORLD_RANK" || n == "OMPI_COMM_WORLD_LOCAL_RANK") return rank.c_str();
    if (n == "CUDA_VISIBLE_DEVICES") return in.child_visible;
    return nullptr;
  };
  auto launch = launcher::ReadLaunchEnv(env);
  if (!launch.ok()) return "refused: " + launch.status().message();
  auto place = launcher::PlaceRank(*in.plan, *launch, r, in.plan->world_size());
  if (!place.ok()) return "refused: " + place.status().message();
  if (place->local_gpu < 0) return "cpu";
  std::string out = fmt::format("cuda:{}", place->local_gpu);
  const auto& used = in.devices.used;
  if (in.devices.gpus && place->local_gpu < static_cast<int>(used.size()) &&
      used[static_cast<size_t>(place->local_gpu)] != place->local_gpu) {
    out += fmt::format(" (GPU {} of this machine)", used[static_cast<size_t>(place->local_gpu)]);
  }
  return out;
}

// What a group or link of GPU ranks gets when it is not NCCL.
std::string StagedMpi(launcher::BackendChoice backend) {
  return fmt::format("mpi, host-staged (CUDA buffers copied through host memory: {})",
                     backend == launcher::BackendChoice::kMpi ? "MAESTRO_COMM_BACKEND=mpi" : "this build has no NCCL");
}

std::string GroupLines(const DryRunInput& in, const std::vector<bool>& nccl) {
  const plan::Plan& plan = *in.plan;
  std::string out;
  // Kind by kind, each group once; the expert-DP and DP x CP groups only
  // where their ranks differ from the DP group's (else they are that group).
  std::set<std::vector<int>> seen[plan::kGroupKinds];
  for (int k = 0; k < plan::kGroupKinds; ++k) {
    const auto kind = static_cast<plan::GroupKind>(k);
    for (int r = 0; r < plan.world_size(); ++r) {
      auto coords = plan::CoordsOfRank(plan, r);
      if (!coords.ok()) continue;
      const auto section = static_cast<size_t>(coords->section);
      const std::vector<int> ranks = plan::GroupOf(plan, r, kind);
      const bool same_as_dp = (kind == plan::GroupKind::kExpertDP || kind == plan::GroupKind::kDPxCP) &&
                              ranks == plan::GroupOf(plan, r, plan::GroupKind::kDP);
      if (ranks.size() < 2 || same_as_dp || !seen[k].insert(ranks).second) continue;
      const bool gpu = plan.sections[section].placement.gpus_per_task > 0;
      out += fmt::format("  {}: {}\n", launcher::GroupDescription(plan, coords->section, kind, ranks),
                         nccl[section] ? "nccl"
                         : gpu         ? StagedMpi(in.backend)
                                       : "mpi");
    }
  }
  for (size_t e = 0; e < plan.edges.size(); ++e) {
    const bool link_nccl = launcher::NcclLink(plan, nccl, static_cast<int>(e));
    const int up = plan.section_index(plan.edges[e].from), down = plan.section_index(plan.edges[e].to);
    const bool gpu = (up >= 0 && plan.sections[static_cast<size_t>(up)].placement.gpus_per_task > 0) ||
                     (down >= 0 && plan.sections[static_cast<size_t>(down)].placement.gpus_per_task > 0);
    const auto links = plan::LinksOfEdge(plan, static_cast<int>(e));
    for (size_t i = 0; i < links.size(); ++i) {
      out += fmt::format("  {}: {}\n", launcher::LinkDescription(plan, links[i], static_cast<int>(i)),
                         link_nccl ? "nccl"
                         : gpu     ? StagedMpi(in.backend)
                                   : "mpi");
    }
  }
  return out.empty() ? "  (none: every group has one rank and there are no links)\n" : out;
}

}  // namespace

std::string DryRunText(const DryRunInput& in) {
  const plan::Plan& plan = *in.plan;
  std::string out = DevicesLine(in.devices) + PlanLines(plan, in.plan_path);
  const auto gpus = static_cast<int>(in.devices.used.size());
  if (in.devices.gpus && plan.world_size() < gpus) {
    out += fmt::format("  the plan uses {} of the {} GPUs (the planner's fastest plan); GPU{} {} stay idle\n",
                       plan.world_size(), gpus, gpus - plan.world_size() == 1 ? "" : "s",
                       RankRange(std::vector<int>(in.devices.used.begin() + plan.world_size(), in.devices.used.end())));
  }
  out += "ranks (the device each binds):\n";
  for (int r = 0; r < plan.world_size(); ++r) {
    auto coords = plan::CoordsOfRank(plan, r);
    const std::string section =
        coords.ok() ? PrintableText(plan.sections[static_cast<size_t>(coords->section)].name) : "?";
    out += fmt::format("  rank {}: section '{}' -> {}\n", r, section, RankDevice(in, r));
  }
  const std::vector<bool> nccl = launcher::NcclSections(plan, in.backend, in.devices.gpus);
  out += "groups and links (the backend each gets):\n" + GroupLines(in, nccl);
  if (in.devices.gpus && !in.devices.cuda_visible_devices.empty()) {
    out += fmt::format("environment: CUDA_VISIBLE_DEVICES={}\n", ShellQuote(in.devices.cuda_visible_devices));
  }
  std::string command;
  for (const auto& arg : in.command) command += (command.empty() ? "" : " ") + ShellQuote(arg);
  out += "command: " + command + "\n";
  return out;
}

}  // namespace maestro::cli
