// SPDX-License-Identifier: Apache-2.0
#include "plan/plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/checks.h"
#include "base/files.h"
#include "base/graph.h"

namespace maestro::plan {

NLOHMANN_JSON_SERIALIZE_ENUM(SectionMode, {{SectionMode::kTrain, "train"}, {SectionMode::kForward, "forward"}})
NLOHMANN_JSON_SERIALIZE_ENUM(ModelKind, {{ModelKind::kDecoder, "decoder"},
                                         {ModelKind::kVit, "vit"},
                                         {ModelKind::kAudioEncoder, "audio_encoder"},
                                         {ModelKind::kProjector, "projector"}})

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ModelDesc, kind, source, weights, hidden, layers, heads, kv_heads,
                                                head_dim, ffn_hidden, vocab, tie_embeddings, experts, experts_per_token,
                                                moe_ffn_hidden, image_size, patch_size, channels, mel_bins,
                                                audio_frames, in_dim, out_dim, extra)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(OptimizerDesc, kind, lr, weight_decay, beta1, beta2, grad_clip,
                                                warmup_steps, schedule)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(LossDesc, kind, kd_alpha, temperature, top_k, draws)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(MicroBatchCost, fixed_seconds, seconds_per_sample, forward_share,
                                                optimizer_seconds, measured)
// By hand: pp_layers is written only when set (plans without it read the even split).
void to_json(nlohmann::json& j, const ParallelConfig& c) {
  j = nlohmann::json{{"tp", c.tp},
                     {"pp", c.pp},
                     {"cp", c.cp},
                     {"ep", c.ep},
                     {"dp", c.dp},
                     {"micro_batch", c.micro_batch},
                     {"recompute", c.recompute},
                     {"recompute_selective", c.recompute_selective},
                     {"zero_stage", c.zero_stage}};
  if (!c.pp_layers.empty()) j["pp_layers"] = c.pp_layers;
}

void from_json(const nlohmann::json& j, ParallelConfig& c) {
  const ParallelConfig d;
  c.tp = j.value("tp", d.tp);
  c.pp = j.value("pp", d.pp);
  c.cp = j.value("cp", d.cp);
  c.ep = j.value("ep", d.ep);
  c.dp = j.value("dp", d.dp);
  c.micro_batch = j.value("micro_batch", d.micro_batch);
  c.recompute = j.value("recompute", d.recompute);
  c.recompute_selective = j.value("recompute_selective", d.recompute_selective);
  c.zero_stage = j.value("zero_stage", d.zero_stage);
  c.pp_layers = j.value("pp_layers", d.pp_layers);
}

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Placement, het_component, first_rank, nodes, tasks_per_node,
                                                gpus_per_task, gpu_type, partition, constraint)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(EdgePlan, from, to, tensor, bytes_per_sample, carries_gradient, fanout,
                                                fanin, seconds_per_sample)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SectionPlan, name, mode, activation, model, optimizer, config,
                                                placement, predicted_step_seconds, predicted_memory_bytes,
                                                tokens_per_sample, active_fraction, predicted_utilization, planner_only,
                                                init_from, init_section, loss, cost, components, component_edges,
                                                run_ahead)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SectionLayout, section, het_component, first_rank, ranks, order,
                                                tp_groups, cp_groups, dp_groups, pp_groups)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Link, edge, up_dp, down_dp, up_rank, down_rank)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ModalityDesc, name, fraction, tokens)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(DataPlan, manifest, global_batch, seq_len, seed, steps, modalities,
                                                dataset, corpus, sample_rule, eos_id, pad_id, image_token_id,
                                                max_images_per_sample, on_bad_sample, allow_absolute_image_paths,
                                                image_mean, image_std, test_corpus, audio_token_id,
                                                max_audios_per_sample, image_resolution, image_min_pixels,
                                                image_max_pixels, video_token_id)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Plan, schema_version, job_name, spec_path, sections, edges, data,
                                                predicted_step_seconds, work_dir, layout, links, checkpoint_every,
                                                checkpoint_minutes, keep_checkpoints, checkpoint_async, comm_timeout_s,
                                                schedule_policy, schedule_max_in_flight, shared_cores, spool_gib,
                                                spool_dtype, spool_reuse, offline_spool_pass)

StageLayerRange StageLayerSpan(const ParallelConfig& config, int64_t layers, int stage) {
  StageLayerRange out;
  if (!config.pp_layers.empty()) {
    for (int s = 0; s < stage; ++s) out.first += config.pp_layers[static_cast<size_t>(s)];
    out.end = out.first + config.pp_layers[static_cast<size_t>(stage)];
    return out;
  }
  const int64_t stages = std::max(config.pp, 1), base = layers / stages, extra = layers % stages;
  out.first = stage * base + std::min<int64_t>(stage, extra);
  out.end = out.first + base + (stage < extra ? 1 : 0);
  return out;
}

const char* SectionModeName(SectionMode mode) {
  return mode == SectionMode::kTrain ? "train" : "forward";
}

const char* ModelKindName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kDecoder: return "decoder";
    case ModelKind::kVit: return "vit";
    case ModelKind::kAudioEncoder: return "audio_encoder";
    case ModelKind::kProjector: return "projector";
  }
  return "?";
}

const char* RecomputeGranularityName(RecomputeGranularity g) {
  switch (g) {
    case RecomputeGranularity::kNone: return "none";
    case RecomputeGranularity::kSelective: return "selective";
    case RecomputeGranularity::kFull: return "full";
  }
  return "?";
}

const char* GroupKindName(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTP: return "tp";
    case GroupKind::kCP: return "cp";
    case GroupKind::kDP: return "dp";
    case GroupKind::kPP: return "pp";
    case GroupKind::kEP: return "ep";
    case GroupKind::kExpertDP: return "expert-dp";
    case GroupKind::kDPxCP: return "dp-cp";
  }
  return "?";
}

int Plan::world_size() const {
  int n = 0;
  for (const auto& s : sections) n += s.config.ranks();
  return n;
}

int Plan::section_index(const std::string& name) const {
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

std::string PlanToJson(const Plan& plan, int indent) {
  nlohmann::json j = plan;
  // run_ahead is optional: written only where it is on, so a plan without it
  // reads as before (no schema bump).
  const auto drop_when_off = [](nlohmann::json& section) {
    const auto it = section.find("run_ahead");
    if (it != section.end() && it->is_number_integer() && it->get<int64_t>() == 0) section.erase(it);
  };
  for (auto& section : j.at("sections")) {
    drop_when_off(section);
    for (auto& component : section.at("components")) drop_when_off(component);
  }
  return j.dump(indent);
}

StatusOr<Plan> PlanFromJson(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::InvalidArgument(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  if (!j.is_object()) return Status::InvalidArgument(origin + ": a plan must be a JSON object");
  const int version = j.value("schema_version", -1);
  if (version < kOldestReadablePlanSchemaVersion || version > kPlanSchemaVersion) {
    return Status::InvalidArgument(
        fmt::format("{}: plan schema version {} but this maestro reads versions {} to {}; recompile the spec with "
                    "this maestro-compile",
                    origin, version, kOldestReadablePlanSchemaVersion, kPlanSchemaVersion));
  }
  Plan plan;
  try {
    plan = j.get<Plan>();
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(fmt::format("{}: malformed plan: {}", origin, e.what()));
  }
  Status s = Validate(plan);
  if (!s.ok()) return s.WithContext(origin);
  return plan;
}

StatusOr<Plan> LoadPlan(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(fmt::format("cannot open plan '{}'; run maestro-compile first", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return PlanFromJson(ss.str(), path);
}

Status SavePlan(const Plan& plan, const std::string& path) {
  return WriteFileAtomically(path, PlanToJson(plan) + "\n");
}

bool EdgeDpRuleHolds(int from_dp, int to_dp, int fanout, int fanin) {
  if (fanout > 0) return to_dp == from_dp * fanout;
  if (fanin > 0) return from_dp == to_dp * fanin;
  return from_dp > 0 && to_dp > 0;
}

bool ReplicasLinked(int up, int from_dp, int down, int to_dp) {
  // up/from_dp < (down+1)/to_dp and down/to_dp < (up+1)/from_dp.
  return static_cast<int64_t>(up) * to_dp < static_cast<int64_t>(down + 1) * from_dp &&
         static_cast<int64_t>(down) * from_dp < static_cast<int64_t>(up + 1) * to_dp;
}

namespace {

// A fused section's components: at least two, uniquely named (also against
// the plan's sections), none fused itself, their edges among them and
// acyclic, and no edge of the plan touching the fused section.
Status ValidateComponents(const Plan& plan, const SectionPlan& s) {
  if (!s.fused()) {
    if (!s.component_edges.empty()) {
      return Status::InvalidArgument(fmt::format("section '{}': component_edges without components", s.name));
    }
    return Status::Ok();
  }
  if (s.components.size() < 2) {
    return Status::InvalidArgument(fmt::format("fused section '{}' has {} component; a fused section has two or more",
                                               s.name, s.components.size()));
  }
  const auto index_of = [&](const std::string& name) {
    for (size_t k = 0; k < s.components.size(); ++k) {
      if (s.components[k].name == name) return static_cast<int>(k);
    }
    return -1;
  };
  for (size_t k = 0; k < s.components.size(); ++k) {
    const SectionPlan& c = s.components[k];
    if (c.fused()) {
      return Status::InvalidArgument(fmt::format("fused section '{}': component '{}' is fused itself", s.name, c.name));
    }
    if (index_of(c.name) != static_cast<int>(k) || (plan.section_index(c.name) >= 0 && c.name != s.name)) {
      return Status::InvalidArgument(
          fmt::format("fused section '{}': component name '{}' appears twice in the plan", s.name, c.name));
    }
  }
  DirectedEdges graph;
  for (const auto& e : s.component_edges) {
    const int u = index_of(e.from), d = index_of(e.to);
    if (u < 0 || d < 0 || u == d) {
      return Status::InvalidArgument(fmt::format(
          "fused section '{}': component edge {} -> {} does not join two of its components", s.name, e.from, e.to));
    }
    graph.emplace_back(u, d);
  }
  if (FindCycle(static_cast<int>(s.components.size()), graph).found()) {
    return Status::InvalidArgument(fmt::format("fused section '{}': its components' edges have a cycle", s.name));
  }
  for (const auto& e : plan.edges) {
    if (e.from == s.name || e.to == s.name) {
      return Status::InvalidArgument(fmt::format(
          "edge {} -> {}: fused section '{}' has edges to other sections; this runtime fuses whole graphs only", e.from,
          e.to, s.name));
    }
  }
  return Status::Ok();
}

}  // namespace

Plan ExpandFusedSections(const Plan& plan) {
  bool any = false;
  for (const auto& s : plan.sections) any = any || s.fused();
  if (!any) return plan;
  Plan out = plan;
  out.sections.clear();
  out.layout.clear();
  out.links.clear();
  int next_rank = 0;
  const auto add = [&](SectionPlan s, const ParallelConfig& config) {
    s.config = config;
    s.placement.het_component = static_cast<int>(out.sections.size());
    s.placement.first_rank = next_rank;
    s.placement.nodes = 1;
    s.placement.tasks_per_node = config.ranks();
    next_rank += config.ranks();
    out.sections.push_back(std::move(s));
  };
  for (const auto& s : plan.sections) {
    if (!s.fused()) {
      add(s, s.config);
      continue;
    }
    for (const auto& c : s.components) add(c, s.config);
    out.edges.insert(out.edges.end(), s.component_edges.begin(), s.component_edges.end());
  }
  return out;
}

namespace {

// The sections in rank order (by first_rank).
std::vector<int> SectionsInRankOrder(const Plan& plan) {
  std::vector<int> order(plan.sections.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return plan.sections[static_cast<size_t>(a)].placement.first_rank <
           plan.sections[static_cast<size_t>(b)].placement.first_rank;
  });
  return order;
}

bool SameNodeGroup(const Placement& a, const Placement& b) {
  return a.nodes == b.nodes && a.tasks_per_node == b.tasks_per_node && a.gpus_per_task == b.gpus_per_task &&
         a.gpu_type == b.gpu_type && a.partition == b.partition && a.constraint == b.constraint;
}

// The rank layout's rules (plan.h, "Rank layout").
Status ValidateRankLayout(const Plan& plan) {
  for (size_t i = 0; i < plan.sections.size(); ++i) {
    const auto& s = plan.sections[i];
    if (plan.schema_version < 3 && s.placement.het_component != static_cast<int>(i)) {
      return Status::InvalidArgument(fmt::format("section '{}' is at index {} but placed in het component {}", s.name,
                                                 i, s.placement.het_component));
    }
    if (s.placement.nodes < 1 || s.placement.tasks_per_node < 1) {
      return Status::InvalidArgument(
          fmt::format("section '{}': placement needs nodes >= 1 and tasks_per_node >= 1", s.name));
    }
  }
  int next_rank = 0, component = -1, component_ranks = 0;
  const Placement* group = nullptr;
  std::string group_sections;
  const auto close_group = [&]() -> Status {
    if (group == nullptr) return Status::Ok();
    const int capacity = group->nodes * group->tasks_per_node;
    if (component_ranks > capacity || component_ranks <= capacity - group->tasks_per_node) {
      return Status::InvalidArgument(fmt::format(
          "het component {} ({}): {} ranks do not fill {} nodes x {} tasks per node but the last node whole", component,
          group_sections, component_ranks, group->nodes, group->tasks_per_node));
    }
    if (plan.schema_version < 3 && component_ranks != capacity) {
      return Status::InvalidArgument(fmt::format("section '{}': {} nodes x {} tasks per node != tp*pp*cp*dp = {}",
                                                 group_sections, group->nodes, group->tasks_per_node, component_ranks));
    }
    return Status::Ok();
  };
  for (int i : SectionsInRankOrder(plan)) {
    const auto& s = plan.sections[static_cast<size_t>(i)];
    const Placement& p = s.placement;
    if (p.first_rank != next_rank) {
      return Status::InvalidArgument(
          fmt::format("section '{}': first_rank {} but the sections before it in rank order end at rank {}", s.name,
                      p.first_rank, next_rank));
    }
    if (p.het_component != component) {
      if (p.het_component != component + 1) {
        return Status::InvalidArgument(
            fmt::format("section '{}': het component {} after component {}; components are numbered in rank order",
                        s.name, p.het_component, component));
      }
      MAESTRO_RETURN_IF_ERROR(close_group());
      component = p.het_component;
      component_ranks = 0;
      group = &p;
      group_sections = "'" + s.name + "'";
    } else {
      if (!SameNodeGroup(*group, p)) {
        return Status::InvalidArgument(fmt::format(
            "section '{}' shares het component {} with {} but not its nodes, tasks per node, GPU type, partition "
            "or constraint",
            s.name, component, group_sections));
      }
      group_sections += ", '" + s.name + "'";
    }
    component_ranks += s.config.ranks();
    next_rank += s.config.ranks();
  }
  return close_group();
}

}  // namespace

bool IsSpoolDtype(const std::string& name) {
  return name == "bf16" || name == "f16" || name == "f32";
}

Status Validate(const Plan& plan) {
  if (plan.sections.empty()) return Status::InvalidArgument("plan has no sections");
  if (!(plan.checkpoint_minutes >= 0) || !std::isfinite(plan.checkpoint_minutes)) {
    return Status::InvalidArgument(fmt::format(
        "plan checkpoint_minutes = {}: must be 0 (none) or a positive number of minutes", plan.checkpoint_minutes));
  }
  if (!(plan.spool_gib > 0) || !std::isfinite(plan.spool_gib)) {
    return Status::InvalidArgument(
        fmt::format("plan spool_gib = {}: the spools' disk must be a positive number of GiB", plan.spool_gib));
  }
  if (!IsSpoolDtype(plan.spool_dtype)) {
    return Status::InvalidArgument(fmt::format("plan spool_dtype = '{}': must be bf16, f16 or f32", plan.spool_dtype));
  }
  if (plan.offline_spool_pass && !plan.spool_reuse) {
    return Status::InvalidArgument(
        "plan offline_spool_pass = true with spool_reuse = false: the pass fills spools that training then reads; "
        "recompile");
  }
  if (plan.offline_spool_pass && (plan.sections.size() != 1 || plan.sections.front().components.empty())) {
    return Status::InvalidArgument(
        "plan offline_spool_pass = true: the offline pass runs a plan of one fused section (every rank runs the "
        "frozen components, then training); recompile");
  }
  if (plan.keep_checkpoints < 1) {
    return Status::InvalidArgument(fmt::format(
        "plan keep_checkpoints = {}: a run keeps at least its newest checkpoint (>= 1)", plan.keep_checkpoints));
  }
  if (plan.data.max_images_per_sample < 1) {
    return Status::InvalidArgument(
        fmt::format("data.max_images_per_sample = {} must be >= 1", plan.data.max_images_per_sample));
  }
  if (plan.data.max_audios_per_sample < 1) {
    return Status::InvalidArgument(
        fmt::format("data.max_audios_per_sample = {} must be >= 1", plan.data.max_audios_per_sample));
  }
  if (plan.schedule_max_in_flight < 0) {
    return Status::InvalidArgument(
        fmt::format("schedule_max_in_flight = {} must be >= 0 (0: no cap)", plan.schedule_max_in_flight));
  }
  for (size_t i = 0; i < plan.sections.size(); ++i) {
    const auto& s = plan.sections[i];
    const auto& c = s.config;
    if (c.tp < 1 || c.pp < 1 || c.cp < 1 || c.dp < 1 || c.ep < 1 || c.micro_batch < 1) {
      return Status::InvalidArgument(
          fmt::format("section '{}': parallel degrees and micro_batch must be >= 1", s.name));
    }
    if (c.ep > 1 && (c.dp % c.ep != 0 || s.model.experts % c.ep != 0)) {
      return Status::InvalidArgument(
          fmt::format("section '{}': ep = {} must divide dp ({}) and the model's experts ({}): EP groups are carved "
                      "from the DP ranks and each EP rank holds experts/ep of them (docs/moe.md)",
                      s.name, c.ep, c.dp, s.model.experts));
    }
    if (!c.pp_layers.empty()) {
      int64_t sum = 0;
      bool each_positive = true;
      for (int64_t n : c.pp_layers) {
        sum += n;
        each_positive = each_positive && n >= 1;
      }
      if (s.model.kind != ModelKind::kDecoder || s.fused()) {
        return Status::InvalidArgument(
            fmt::format("section '{}': pp_layers is for pipelined decoder sections; remove config.pp_layers", s.name));
      }
      if (static_cast<int>(c.pp_layers.size()) != c.pp || !each_positive || sum != s.model.layers) {
        return Status::InvalidArgument(fmt::format(
            "section '{}': config.pp_layers [{}] must give each of its pp = {} stages >= 1 layer and sum to its "
            "{} layers; fix the list or remove it (the even split)",
            s.name, fmt::join(c.pp_layers, ", "), c.pp, s.model.layers));
      }
    }
    if (plan.section_index(s.name) != static_cast<int>(i)) {
      return Status::InvalidArgument(fmt::format("section name '{}' appears twice", s.name));
    }
    if (s.run_ahead < 0 || s.run_ahead > kMaxRunAhead) {
      return Status::InvalidArgument(fmt::format("section '{}': run_ahead = {} must be 0 to {} global batches", s.name,
                                                 s.run_ahead, kMaxRunAhead));
    }
    if (s.run_ahead > 0 && (s.mode != SectionMode::kForward || s.fused())) {
      return Status::InvalidArgument(fmt::format(
          "section '{}': run_ahead = {} but only a forward-only section that is not fused may run ahead; set "
          "run_ahead = 0 for it",
          s.name, s.run_ahead));
    }
    MAESTRO_RETURN_IF_ERROR(ValidateComponents(plan, s));
  }
  MAESTRO_RETURN_IF_ERROR(ValidateRankLayout(plan));
  for (const auto& e : plan.edges) {
    const int u = plan.section_index(e.from);
    const int d = plan.section_index(e.to);
    if (u < 0 || d < 0) {
      return Status::InvalidArgument(fmt::format("edge {} -> {}: unknown section", e.from, e.to));
    }
    if (u == d)
      return Status::InvalidArgument(fmt::format("edge {} -> {}: a section cannot feed itself", e.from, e.to));
    const int a = plan.sections[u].config.dp;
    const int b = plan.sections[d].config.dp;
    if (!EdgeDpRuleHolds(a, b)) {
      return Status::InvalidArgument(
          fmt::format("edge {} -> {}: DP degrees {} and {} must be at least 1", e.from, e.to, a, b));
    }
  }
  DirectedEdges graph;
  for (const auto& e : plan.edges) graph.emplace_back(plan.section_index(e.from), plan.section_index(e.to));
  if (FindCycle(static_cast<int>(plan.sections.size()), graph).found()) {
    return Status::InvalidArgument("the section graph has a cycle");
  }
  return Status::Ok();
}

SectionPlan& AppendSingleNodeSection(Plan& plan, const std::string& name, int tp, int cp, int dp, int pp) {
  SectionPlan s;
  s.name = name;
  s.config.tp = tp;
  s.config.cp = cp;
  s.config.dp = dp;
  s.config.pp = pp;
  int components = 0;
  for (const auto& other : plan.sections) components = std::max(components, other.placement.het_component + 1);
  s.placement.het_component = components;
  s.placement.first_rank = plan.world_size();
  s.placement.nodes = 1;
  s.placement.tasks_per_node = s.config.ranks();
  plan.sections.push_back(std::move(s));
  return plan.sections.back();
}

std::vector<NodeGroup> NodeGroupsOf(const Plan& plan) {
  std::vector<NodeGroup> groups;
  for (int i : SectionsInRankOrder(plan)) {
    const auto& s = plan.sections[static_cast<size_t>(i)];
    if (groups.empty() || groups.back().het_component != s.placement.het_component) {
      NodeGroup g;
      g.het_component = s.placement.het_component;
      g.first_rank = s.placement.first_rank;
      g.nodes = s.placement.nodes;
      g.tasks_per_node = s.placement.tasks_per_node;
      groups.push_back(g);
    }
    groups.back().ranks += s.config.ranks();
    groups.back().sections.push_back(i);
  }
  return groups;
}

NodeSpan NodeSpanOf(const Plan& plan, int section) {
  const auto& s = plan.sections.at(static_cast<size_t>(section));
  int component_first = s.placement.first_rank;
  for (const auto& other : plan.sections) {
    if (other.placement.het_component == s.placement.het_component) {
      component_first = std::min(component_first, other.placement.first_rank);
    }
  }
  const int index = s.placement.first_rank - component_first;
  const int tpn = std::max(1, s.placement.tasks_per_node);
  return NodeSpan{index / tpn, (index + s.config.ranks() - 1) / tpn};
}

StatusOr<RankCoords> CoordsOfRank(const Plan& plan, int global_rank) {
  for (size_t i = 0; i < plan.sections.size(); ++i) {
    const auto& s = plan.sections[i];
    const int first = s.placement.first_rank;
    const auto& c = s.config;
    if (global_rank >= first && global_rank < first + c.ranks()) {
      RankCoords rc;
      rc.section = static_cast<int>(i);
      rc.local_rank = global_rank - first;
      int r = rc.local_rank;
      rc.tp = r % c.tp;
      r /= c.tp;
      rc.cp = r % c.cp;
      r /= c.cp;
      rc.dp = r % c.dp;
      r /= c.dp;
      rc.pp = r;
      const int ep = std::max(1, c.ep);
      rc.ep_rank = rc.dp % ep;
      rc.expert_dp = rc.dp / ep;
      return rc;
    }
  }
  return Status::InvalidArgument(fmt::format("rank {} is outside the plan's {} ranks", global_rank, plan.world_size()));
}

int GlobalRankOf(const Plan& plan, int section, int tp, int cp, int dp, int pp) {
  const auto& s = plan.sections.at(static_cast<size_t>(section));
  const auto& c = s.config;
  return s.placement.first_rank + tp + c.tp * (cp + c.cp * (dp + c.dp * pp));
}

std::vector<int> GroupOf(const Plan& plan, int global_rank, GroupKind kind) {
  const RankCoords rc = CoordsOfRank(plan, global_rank).ValueOrDie();
  const auto& c = plan.sections[static_cast<size_t>(rc.section)].config;
  std::vector<int> ranks;
  if (kind == GroupKind::kEP || kind == GroupKind::kExpertDP) {
    // DP indexes of the group: ep consecutive ones, or one per EP group.
    const int ep = std::max(1, c.ep);
    const int size = kind == GroupKind::kEP ? ep : c.dp / ep;
    for (int k = 0; k < size; ++k) {
      const int dp = kind == GroupKind::kEP ? rc.expert_dp * ep + k : k * ep + rc.ep_rank;
      ranks.push_back(GlobalRankOf(plan, rc.section, rc.tp, rc.cp, dp, rc.pp));
    }
    std::sort(ranks.begin(), ranks.end());
    return ranks;
  }
  if (kind == GroupKind::kDPxCP) {
    for (int dp = 0; dp < c.dp; ++dp) {
      for (int cp = 0; cp < c.cp; ++cp) ranks.push_back(GlobalRankOf(plan, rc.section, rc.tp, cp, dp, rc.pp));
    }
    std::sort(ranks.begin(), ranks.end());
    return ranks;
  }
  const int size = kind == GroupKind::kTP ? c.tp : kind == GroupKind::kCP ? c.cp : kind == GroupKind::kDP ? c.dp : c.pp;
  for (int k = 0; k < size; ++k) {
    RankCoords x = rc;
    (kind == GroupKind::kTP ? x.tp : kind == GroupKind::kCP ? x.cp : kind == GroupKind::kDP ? x.dp : x.pp) = k;
    ranks.push_back(GlobalRankOf(plan, x.section, x.tp, x.cp, x.dp, x.pp));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

std::vector<std::vector<int>> GroupsOf(const Plan& plan, int section, GroupKind kind) {
  const auto& s = plan.sections.at(static_cast<size_t>(section));
  std::vector<std::vector<int>> groups;
  std::vector<bool> covered(static_cast<size_t>(s.config.ranks()), false);
  for (int local = 0; local < s.config.ranks(); ++local) {
    if (covered[static_cast<size_t>(local)]) continue;
    auto g = GroupOf(plan, s.placement.first_rank + local, kind);
    for (int r : g) covered[static_cast<size_t>(r - s.placement.first_rank)] = true;
    groups.push_back(std::move(g));
  }
  return groups;
}

std::vector<Link> LinksOfEdge(const Plan& plan, int edge_index) {
  const auto& e = plan.edges.at(static_cast<size_t>(edge_index));
  const int u = plan.section_index(e.from);
  const int d = plan.section_index(e.to);
  const auto& uc = plan.sections[static_cast<size_t>(u)].config;
  const auto& dc = plan.sections[static_cast<size_t>(d)].config;
  std::vector<Link> links;
  // Walk both sections' shares of [0, 1) in order: each step links the two
  // current replicas, then leaves the share that ends first (both when they
  // end together). Fan-out k: downstream i is fed by upstream i / k; fan-in
  // k: upstream i feeds downstream i / k.
  int up = 0, down = 0;
  while (up < uc.dp && down < dc.dp) {
    Link l;
    l.edge = edge_index;
    l.up_dp = up;
    l.down_dp = down;
    l.up_rank = GlobalRankOf(plan, u, 0, 0, up, uc.pp - 1);
    l.down_rank = GlobalRankOf(plan, d, 0, 0, down, 0);
    links.push_back(l);
    // Share ends: (up + 1) / uc.dp against (down + 1) / dc.dp.
    const int64_t up_end = static_cast<int64_t>(up + 1) * dc.dp, down_end = static_cast<int64_t>(down + 1) * uc.dp;
    if (up_end <= down_end) ++up;
    if (down_end <= up_end) ++down;
  }
  return links;
}

void FillLayout(Plan& plan) {
  plan.layout.clear();
  plan.links.clear();
  for (size_t i = 0; i < plan.sections.size(); ++i) {
    const auto& s = plan.sections[i];
    SectionLayout l;
    l.section = s.name;
    l.het_component = s.placement.het_component;
    l.first_rank = s.placement.first_rank;
    l.ranks = s.config.ranks();
    const int sec = static_cast<int>(i);
    l.tp_groups = GroupsOf(plan, sec, GroupKind::kTP);
    l.cp_groups = GroupsOf(plan, sec, GroupKind::kCP);
    l.dp_groups = GroupsOf(plan, sec, GroupKind::kDP);
    l.pp_groups = GroupsOf(plan, sec, GroupKind::kPP);
    plan.layout.push_back(std::move(l));
  }
  for (size_t e = 0; e < plan.edges.size(); ++e) {
    auto& edge = plan.edges[e];
    const int a = plan.sections[static_cast<size_t>(plan.section_index(edge.from))].config.dp;
    const int b = plan.sections[static_cast<size_t>(plan.section_index(edge.to))].config.dp;
    edge.fanout = b >= a && b % a == 0 ? b / a : 0;
    edge.fanin = a > b && a % b == 0 ? a / b : 0;
    for (const Link& l : LinksOfEdge(plan, static_cast<int>(e))) plan.links.push_back(l);
  }
}

std::vector<Link> LinksOfRank(const Plan& plan, int global_rank) {
  std::vector<Link> out;
  for (size_t e = 0; e < plan.edges.size(); ++e) {
    for (const Link& l : LinksOfEdge(plan, static_cast<int>(e))) {
      if (l.up_rank == global_rank || l.down_rank == global_rank) out.push_back(l);
    }
  }
  return out;
}

}  // namespace maestro::plan
