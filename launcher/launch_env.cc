// SPDX-License-Identifier: Apache-2.0
#include "launcher/launch_env.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cstdlib>
#include <string_view>

#include "base/checks.h"

namespace maestro::launcher {
namespace {

StatusOr<int> ParseInt(const char* name, const char* value) {
  if (value == nullptr || *value == '\0') return Status::InvalidArgument(fmt::format("{} is empty", name));
  char* end = nullptr;
  const long v = std::strtol(value, &end, 10);
  if (*end != '\0' || v < 0 || v > (1L << 30)) {
    return Status::InvalidArgument(fmt::format("{}='{}' is not a non-negative integer", name, value));
  }
  return static_cast<int>(v);
}

std::vector<std::string> SplitList(std::string_view s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string_view::npos ? s.size() : comma;
    if (end > start) out.emplace_back(s.substr(start, end - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string SectionSizes(const plan::Plan& plan) {
  std::string s;
  for (const auto& sec : plan.sections) {
    if (!s.empty()) s += ", ";
    s += fmt::format("'{}' {}", sec.name, sec.config.ranks());
  }
  return s;
}

// "component 0: 'vit' 2 + 'llm' 30 ranks on 4 nodes" for each of `groups`.
std::string ComponentSizes(const plan::Plan& plan, const std::vector<plan::NodeGroup>& groups) {
  std::string out;
  for (const auto& g : groups) {
    std::string sections;
    for (int i : g.sections) {
      const auto& sec = plan.sections[static_cast<size_t>(i)];
      sections += fmt::format("{}'{}' {}", sections.empty() ? "" : " + ", sec.name, sec.config.ranks());
    }
    out += fmt::format("{}component {}: {} ranks on {} node(s)", out.empty() ? "" : "; ", g.het_component, sections,
                       g.nodes);
  }
  return out;
}

}  // namespace

const char* LauncherKindName(LauncherKind kind) {
  switch (kind) {
    case LauncherKind::kMpirun: return "mpirun";
    case LauncherKind::kSlurm: return "srun";
    case LauncherKind::kOther: return "other";
  }
  return "?";
}

EnvLookup ProcessEnv() {
  return [](const char* name) -> const char* { return std::getenv(name); };
}

StatusOr<LaunchEnv> ReadLaunchEnv(const EnvLookup& env) {
  LaunchEnv out;
  // mpirun first: a job script may run mpirun and leak SLURM_* into its ranks.
  if (const char* r = env("OMPI_COMM_WORLD_RANK")) {
    out.launcher = LauncherKind::kMpirun;
    MAESTRO_ASSIGN_OR_RETURN(out.procid, ParseInt("OMPI_COMM_WORLD_RANK", r));
    if (const char* l = env("OMPI_COMM_WORLD_LOCAL_RANK")) {
      MAESTRO_ASSIGN_OR_RETURN(out.local_rank, ParseInt("OMPI_COMM_WORLD_LOCAL_RANK", l));
    }
  } else if (const char* p = env("SLURM_PROCID"); p != nullptr && env("SLURM_STEP_ID") != nullptr) {
    out.launcher = LauncherKind::kSlurm;
    MAESTRO_ASSIGN_OR_RETURN(out.procid, ParseInt("SLURM_PROCID", p));
    if (const char* l = env("SLURM_LOCALID")) {
      MAESTRO_ASSIGN_OR_RETURN(out.local_rank, ParseInt("SLURM_LOCALID", l));
    }
    if (const char* h = env("SLURM_HET_SIZE")) {
      MAESTRO_ASSIGN_OR_RETURN(out.het_size, ParseInt("SLURM_HET_SIZE", h));
      for (int n = 0; n < out.het_size; ++n) {
        const std::string name = fmt::format("SLURM_NTASKS_HET_GROUP_{}", n);
        const char* v = env(name.c_str());
        if (v == nullptr) {
          return Status::FailedPrecondition(
              fmt::format("SLURM_HET_SIZE={} but {} is not set: start the step with srun --het-group=0-{}",
                          out.het_size, name, out.het_size - 1));
        }
        MAESTRO_ASSIGN_OR_RETURN(const int tasks, ParseInt(name.c_str(), v));
        out.tasks_per_component.push_back(tasks);
      }
    }
  }
  if (const char* v = env("CUDA_VISIBLE_DEVICES")) {
    out.gpu_list_set = true;
    out.gpu_list_source = "CUDA_VISIBLE_DEVICES";
    out.visible_gpus = SplitList(v);
  } else if (const char* g = env("SLURM_STEP_GPUS")) {
    out.gpu_list_set = true;
    out.gpu_list_source = "SLURM_STEP_GPUS";
    out.visible_gpus = SplitList(g);
  }
  if (const char* n = env("SLURMD_NODENAME")) {
    out.host = n;
  } else {
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) == 0) out.host = buf;
  }
  return out;
}

std::string RankPlace::ToString() const {
  return fmt::format("rank {} of {}: section '{}' (het component {}), local rank {}, tp {} cp {} dp {} pp {}, {} on {}",
                     world_rank, world_size, section_name, het_component, local_rank, coords.tp, coords.cp, coords.dp,
                     coords.pp, local_gpu < 0 ? std::string("cpu") : fmt::format("gpu {}", local_gpu),
                     host.empty() ? "?" : host);
}

StatusOr<RankPlace> PlaceRank(const plan::Plan& plan, const LaunchEnv& env, int world_rank, int world_size) {
  const char* fix =
      env.launcher == LauncherKind::kSlurm
          ? "submit the job.sbatch that maestro-compile wrote for this plan.json, unchanged"
          : "start one process per rank: mpirun -np <world size> maestro-worker plan.json (or `maestro run`)";
  if (world_size != plan.world_size()) {
    return Status::FailedPrecondition(fmt::format("the job has {} ranks but the plan needs {} (sections: {}); {}",
                                                  world_size, plan.world_size(), SectionSizes(plan), fix));
  }
  if (env.procid >= 0 && env.procid != world_rank) {
    return Status::FailedPrecondition(fmt::format(
        "PMIx says rank {} but the launcher's environment says {}: the ranks are not laid out as the plan expects; {}",
        world_rank, env.procid, fix));
  }
  const std::vector<plan::NodeGroup> groups = plan::NodeGroupsOf(plan);
  if (env.het_size > 0) {
    if (env.het_size != static_cast<int>(groups.size())) {
      return Status::FailedPrecondition(
          fmt::format("the Slurm step spans {} het components (SLURM_HET_SIZE) but the plan has {} ({}); {}",
                      env.het_size, groups.size(), ComponentSizes(plan, groups), fix));
    }
    for (int k = 0; k < env.het_size; ++k) {
      const plan::NodeGroup& g = groups[static_cast<size_t>(k)];
      if (env.tasks_per_component[static_cast<size_t>(k)] != g.ranks) {
        return Status::FailedPrecondition(fmt::format(
            "het component {} has {} tasks (SLURM_NTASKS_HET_GROUP_{}) but the plan gives it {} ranks ({}); {}", k,
            env.tasks_per_component[static_cast<size_t>(k)], k, g.ranks, ComponentSizes(plan, {g}), fix));
      }
    }
  }
  RankPlace place;
  place.world_rank = world_rank;
  place.world_size = world_size;
  MAESTRO_ASSIGN_OR_RETURN(place.coords, plan::CoordsOfRank(plan, world_rank));
  const auto& sec = plan.sections[static_cast<size_t>(place.coords.section)];
  place.section_name = sec.name;
  place.het_component = sec.placement.het_component;
  if (env.het_size > 0) {
    // The component from Slurm's numbers must be the one the plan puts the
    // rank's section in.
    int first = 0, component = -1;
    for (int k = 0; k < env.het_size; ++k) {
      const int n = env.tasks_per_component[static_cast<size_t>(k)];
      if (world_rank >= first && world_rank < first + n) component = k;
      first += n;
    }
    if (component != place.het_component) {
      return Status::FailedPrecondition(
          fmt::format("rank {} is in het component {} by SLURM_NTASKS_HET_GROUP_* but the plan puts it in section '{}' "
                      "(component {}); {}",
                      world_rank, component, sec.name, place.het_component, fix));
    }
  }
  place.local_rank = env.local_rank;
  place.host = env.host;
  const int gpus = sec.placement.gpus_per_task;
  if (gpus > 0) {
    if (env.gpu_list_set) {
      const int visible = static_cast<int>(env.visible_gpus.size());
      if (visible == gpus) {
        place.local_gpu = 0;  // srun --gpus-per-task: this task's own GPUs
      } else if ((env.local_rank + 1) * gpus <= visible) {
        place.local_gpu = env.local_rank * gpus;  // node-wide list shared by the node's tasks
      } else {
        return Status::FailedPrecondition(
            fmt::format("section '{}' needs {} GPU(s) per task but {} lists {} ({}) for local rank {}; {}", sec.name,
                        gpus, env.gpu_list_source, visible,
                        visible == 0 ? std::string("none") : fmt::format("{}", fmt::join(env.visible_gpus, ",")),
                        env.local_rank, fix));
      }
    } else {
      place.local_gpu = env.local_rank * gpus;  // mpirun on one machine: the CUDA runtime checks the count
    }
  }
  return place;
}

}  // namespace maestro::launcher
