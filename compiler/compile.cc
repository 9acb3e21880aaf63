// SPDX-License-Identifier: Apache-2.0
#include "compiler/compile.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/checks.h"
#include "base/exit_codes.h"
#include "base/shell.h"
#include "compiler/model.h"
#include "plan/profile.h"

namespace maestro::compiler {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string Gib(double bytes) {
  return fmt::format("{:.1f}", bytes / kGiB);
}

std::string HumanCount(double x) {
  if (x >= 1e12) return fmt::format("{:.1f}T", x / 1e12);
  if (x >= 1e9) return fmt::format("{:.1f}B", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.1f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}K", x / 1e3);
  return fmt::format("{:.0f}", x);
}

std::string HumanBytes(double b) {
  if (b >= kGiB) return fmt::format("{:.1f} GiB", b / kGiB);
  if (b >= 1024.0 * 1024.0) return fmt::format("{:.1f} MiB", b / 1024.0 / 1024.0);
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{:.0f} B", b);
}

std::string ConfigText(const plan::ParallelConfig& c) {
  return fmt::format("TP {} PP {} CP {} DP {}, micro-batch {}{}", c.tp, c.pp, c.cp, c.dp, c.micro_batch,
                     c.recompute ? ", recompute" : "");
}

int DeviceIndex(const Spec& spec, const std::string& name) {
  for (size_t i = 0; i < spec.cluster.gpu_types.size(); ++i) {
    if (spec.cluster.gpu_types[i].name == name) return static_cast<int>(i);
  }
  return 0;
}

// Tokens of the tensor a section hands downstream, per active sample.
int64_t OutputTokens(const SectionWork& s) {
  const int64_t merge = static_cast<int64_t>(ExtraValue(s.model, "spatial_merge", 0));
  if (s.model.kind == plan::ModelKind::kVit && merge > 0) return std::max<int64_t>(1, s.tokens / (merge * merge));
  return s.tokens;
}

}  // namespace

std::vector<DeviceType> DevicesOf(const Spec& spec) {
  std::vector<DeviceType> out;
  for (const auto& g : spec.cluster.gpu_types) {
    DeviceType d;
    d.name = g.name;
    d.cpu = g.cpu;
    d.memory_bytes = g.memory_gb * 1e9;
    d.reserved_bytes = g.cpu ? 0.05 * d.memory_bytes : std::min(2e9, 0.1 * d.memory_bytes);
    d.peak_flops = g.tflops_bf16 * 1e12;
    d.mfu = g.mfu;
    d.half_efficiency_size = g.cpu ? double(1 << 12) : double(1 << 19);
    d.half_efficiency_width = g.cpu ? 0.0 : 128.0;
    d.intra_bytes_per_s = g.intra_node_gbps * 1e9;
    d.inter_bytes_per_s = g.inter_node_gbps * 1e9;
    d.gpus_per_node = g.gpus_per_node;
    d.nodes = g.nodes;
    d.partition = g.partition.empty() ? spec.job.partition : g.partition;
    d.constraint = g.constraint;
    if (spec.cluster.local) {
      d.shared_node = true;
      d.nodes = g.gpus_per_node;  // the budget counts slots
      d.shared_cores = spec.cluster.local_cores;
    }
    out.push_back(d);
  }
  return out;
}

StatusOr<PinOverride> ParsePin(const std::string& text) {
  static const std::vector<std::string> kKeys = {"tp", "dp", "pp", "micro_batch"};
  const auto dot = text.find('.');
  const auto eq = text.find('=');
  if (dot == std::string::npos || eq == std::string::npos || dot == 0 || eq < dot + 2 || eq + 1 == text.size()) {
    return Status::InvalidArgument(
        fmt::format("--pin '{}' must be SECTION.KEY=VALUE, e.g. --pin llm.dp=2 (KEY: tp, dp, pp, micro_batch)", text));
  }
  PinOverride p;
  p.text = text;
  p.section = text.substr(0, dot);
  p.key = text.substr(dot + 1, eq - dot - 1);
  const std::string value = text.substr(eq + 1);
  if (std::find(kKeys.begin(), kKeys.end(), p.key) == kKeys.end()) {
    return Status::InvalidArgument(fmt::format("--pin '{}': unknown key '{}'; pin one of tp, dp, pp, micro_batch{}",
                                               text, p.key, Suggest(p.key, kKeys)));
  }
  long long v = 0;
  size_t used = 0;
  try {
    v = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || v < 1 || v > (1 << 20)) {
    return Status::InvalidArgument(
        fmt::format("--pin '{}': the value '{}' must be a whole number in [1, {}]", text, value, 1 << 20));
  }
  p.value = static_cast<int>(v);
  return p;
}

namespace {

struct SupportFlag {
  const char* name;
  bool RuntimeSupport::*field;
};
constexpr SupportFlag kSupportFlags[] = {{"dp", &RuntimeSupport::data_parallel},
                                         {"micro_batch", &RuntimeSupport::micro_batching},
                                         {"tp_decoder", &RuntimeSupport::tensor_parallel_decoder},
                                         {"pp_decoder", &RuntimeSupport::pipeline_parallel_decoder},
                                         {"tp_encoder", &RuntimeSupport::tensor_parallel_encoder},
                                         {"pp_encoder", &RuntimeSupport::pipeline_parallel_encoder},
                                         {"cp", &RuntimeSupport::context_parallel},
                                         {"ep", &RuntimeSupport::expert_parallel},
                                         {"moe", &RuntimeSupport::mixture_of_experts},
                                         {"recompute", &RuntimeSupport::activation_recompute}};

}  // namespace

StatusOr<RuntimeSupport> ParseRuntimeSupport(const std::string& list) {
  RuntimeSupport out;
  for (const auto& f : kSupportFlags) out.*(f.field) = list == "all";
  if (list == "all") return out;
  std::vector<std::string> names;
  for (const auto& f : kSupportFlags) names.push_back(f.name);
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const auto it = std::find_if(std::begin(kSupportFlags), std::end(kSupportFlags),
                                 [&](const SupportFlag& f) { return item == f.name; });
    if (it == std::end(kSupportFlags)) {
      return Status::InvalidArgument(fmt::format("--runtime-support: unknown feature '{}'{}; features: {} (or all)",
                                                 item, Suggest(item, names), fmt::join(names, ", ")));
    }
    out.*(it->field) = true;
  }
  return out;
}

std::string RuntimeSupportText(const RuntimeSupport& support) {
  std::string out;
  for (const auto& f : kSupportFlags) {
    if (support.*(f.field)) out += (out.empty() ? "" : ",") + std::string(f.name);
  }
  return out.empty() ? "none" : out;
}

StatusOr<Spec> EffectiveSpec(const Spec& spec, const CompileOptions& options) {
  Spec s = spec;
  std::vector<std::string> names;
  for (const auto& sec : s.sections) names.push_back(sec.name);
  for (const PinOverride& p : options.pins) {
    const int i = s.section_index(p.section);
    if (i < 0) {
      return Status::InvalidArgument(fmt::format("--pin '{}': unknown section '{}'{}; the spec's sections are {}",
                                                 p.text, p.section, Suggest(p.section, names), fmt::join(names, ", ")));
    }
    SectionSpec& sec = s.sections[static_cast<size_t>(i)];
    if (p.key == "tp")
      sec.tp = p.value;
    else if (p.key == "dp")
      sec.dp = p.value;
    else if (p.key == "pp")
      sec.pp = p.value;
    else if (p.key == "micro_batch")
      sec.micro_batch = p.value;
    else
      return Status::InvalidArgument(fmt::format("--pin '{}': unknown key '{}'", p.text, p.key));
  }
  if (options.local_ranks <= 0) {
    if (options.local_cores > 0) return Status::InvalidArgument("--local-cores needs --local N");
    return s;
  }
  if (options.allow_planner_only || options.support_given) {
    return Status::InvalidArgument(
        fmt::format("--local plans only what this build's runtime runs; drop {}",
                    options.allow_planner_only ? "--allow-planner-only" : "--runtime-support"));
  }
  if (options.local_ranks < static_cast<int>(s.sections.size())) {
    return Status::InvalidArgument(
        fmt::format("--local {}: the spec has {} sections and each needs at least one rank; "
                    "give --local {} or more",
                    options.local_ranks, s.sections.size(), s.sections.size()));
  }
  GpuTypeSpec cpu;
  cpu.name = "cpu";
  cpu.cpu = true;
  cpu.memory_gb = 4;
  cpu.tflops_bf16 = 0.05;
  cpu.intra_node_gbps = 5;
  cpu.inter_node_gbps = 1;
  cpu.mfu = 0.5;
  for (const auto& g : s.cluster.gpu_types) {
    if (g.cpu) {
      cpu = g;
      break;
    }
  }
  cpu.nodes = 1;
  cpu.gpus_per_node = options.local_ranks;
  s.cluster.nodes = 1;
  s.cluster.gpus_per_node = options.local_ranks;
  s.cluster.default_gpu = cpu.name;
  s.cluster.gpu_types = {cpu};
  s.cluster.local = true;
  s.cluster.local_cores = options.local_cores;
  for (auto& sec : s.sections) sec.gpu_type.clear();
  return s;
}

StatusOr<Workload> BuildWorkload(const Spec& spec, const std::vector<DeviceType>& devices,
                                 const std::vector<ProfileSpec>& extra_profiles) {
  Workload w;
  const int default_device = DeviceIndex(spec, spec.cluster.default_gpu);
  for (const auto& s : spec.sections) {
    SectionWork sw;
    sw.name = s.name;
    const ModelSpec* m = spec.FindModel(s.model);
    if (!m) return Status::InvalidArgument(AtPos(spec.path, s.model_pos, "unknown model '" + s.model + "'"));
    sw.model = m->desc;
    sw.mode = s.mode;
    sw.activation = s.activation;
    int64_t modality_tokens = 0;
    for (const auto& mod : spec.data.modalities) {
      if (mod.name == s.activation) {
        sw.active_fraction = mod.fraction;
        modality_tokens = mod.tokens;
      }
    }
    if (s.tokens > 0) {
      sw.tokens = s.tokens;
    } else if (sw.model.kind == plan::ModelKind::kProjector) {
      sw.tokens = modality_tokens > 0 ? modality_tokens : spec.data.seq_len;
    } else {
      sw.tokens = NaturalTokens(sw.model, spec.data.seq_len);
    }
    sw.facts = ComputeModelFacts(sw.model, sw.tokens);
    sw.device = s.gpu_type.empty() ? default_device : DeviceIndex(spec, s.gpu_type);
    sw.pin_tp = s.tp;
    sw.pin_pp = s.pp;
    sw.pin_cp = s.cp;
    sw.pin_dp = s.dp;
    sw.pin_micro_batch = s.micro_batch;
    sw.pin_recompute = s.recompute ? (*s.recompute ? 1 : 0) : -1;
    for (const auto& p : spec.profiles) {
      if (p.section == s.name) sw.profiles.push_back(p);
    }
    for (const auto& p : extra_profiles) {
      if (p.section == s.name) sw.profiles.push_back(p);
    }
    w.sections.push_back(std::move(sw));
  }
  for (const auto& e : spec.edges) {
    EdgeWork ew;
    ew.from = spec.section_index(e.from);
    ew.to = spec.section_index(e.to);
    if (ew.from < 0 || ew.to < 0 || ew.from == ew.to) {  // ParseSpec* rejects these; a Spec built by hand may not
      return Status::InvalidArgument(AtPos(spec.path, e.pos, "edge " + e.from + " -> " + e.to + ": unknown section"));
    }
    ew.tensor = e.tensor;
    const SectionWork& up = w.sections[static_cast<size_t>(ew.from)];
    const SectionWork& down = w.sections[static_cast<size_t>(ew.to)];
    if (e.bytes_per_sample > 0) {
      ew.bytes_per_sample = static_cast<double>(e.bytes_per_sample);
    } else if (e.tensor == "teacher_hidden" && up.model.kind == plan::ModelKind::kDecoder) {
      // A teacher sends its final hidden states in fp32 (the student applies
      // the teacher's head): the hidden size crosses, not the vocabulary.
      ew.bytes_per_sample = static_cast<double>(up.tokens) * static_cast<double>(up.model.hidden) * 4.0;
    } else {
      ew.bytes_per_sample = static_cast<double>(OutputTokens(up)) * static_cast<double>(up.facts.output_dim) * 2.0;
    }
    ew.active_fraction = std::min(up.active_fraction, down.active_fraction);
    ew.carries_gradient = up.trains();
    ew.fanout = e.fanout;
    ew.fanin = e.fanin;
    ew.link_bytes_per_s = std::min(devices[static_cast<size_t>(up.device)].inter_bytes_per_s,
                                   devices[static_cast<size_t>(down.device)].inter_bytes_per_s);
    w.edges.push_back(ew);
  }
  return w;
}

// ---- job.sbatch ---------------------------------------------------------------

std::string RenderSbatch(const plan::Plan& plan, const Spec& spec, const CompileOptions& options) {
  std::string s;
  const auto line = [&s](const std::string& l) { s += l + "\n"; };
  const int k = static_cast<int>(plan.sections.size());
  line("#!/bin/bash");
  line(fmt::format("# Generated by maestro-compile from {}: recompile the spec rather than edit this file.",
                   ShellQuote(spec.path)));
  line(fmt::format("# Slurm heterogeneous job '{}': {} component(s), one per section.", plan.job_name, k));
  line("# Job-wide options come first (they belong to component 0).");
  line("#SBATCH --job-name=" + spec.job.name);
  line("#SBATCH --time=" + spec.job.time);
  if (!spec.job.output.empty()) line("#SBATCH --output=" + spec.job.output);
  if (!spec.job.error.empty()) line("#SBATCH --error=" + spec.job.error);
  if (!spec.job.account.empty()) line("#SBATCH --account=" + spec.job.account);
  if (!spec.job.qos.empty()) line("#SBATCH --qos=" + spec.job.qos);
  if (spec.job.requeue) {
    line("#SBATCH --requeue");
    line("#SBATCH --open-mode=append");  // keep every run's log after a requeue
  }
  if (spec.job.signal_seconds > 0)
    line(fmt::format("#SBATCH --signal=B:{}@{}", spec.job.signal, spec.job.signal_seconds));
  for (int i = 0; i < k; ++i) {
    const plan::SectionPlan& sec = plan.sections[static_cast<size_t>(i)];
    const plan::Placement& p = sec.placement;
    if (i > 0) line("#SBATCH hetjob");
    line(fmt::format("# het component {}: section '{}' ({}, {}), {} {} rank(s) on {} node(s): {}", i, sec.name,
                     plan::ModelKindName(sec.model.kind), plan::SectionModeName(sec.mode), sec.config.ranks(),
                     p.gpus_per_task > 0 ? p.gpu_type + " GPU" : p.gpu_type + " CPU", p.nodes, ConfigText(sec.config)));
    if (!p.partition.empty()) line("#SBATCH --partition=" + p.partition);
    line(fmt::format("#SBATCH --nodes={}", p.nodes));
    line(fmt::format("#SBATCH --ntasks-per-node={}", p.tasks_per_node));
    if (p.gpus_per_task > 0) line(fmt::format("#SBATCH --gpus-per-task={}", p.gpus_per_task));
    if (!p.constraint.empty()) line("#SBATCH --constraint=" + p.constraint);
  }
  const std::string plan_path = (options.out_dir.empty() ? std::string(".") : options.out_dir) + "/plan.json";
  line("");
  line("set -u");
  line("MAESTRO_PLAN=" + ShellQuote(plan_path));
  line("step_pid=\"\"");
  line("# The worker checkpoints on USR1/TERM and exits " + std::to_string(kExitRequeue) +
       " to ask for a requeue: pass the");
  line("# signals on to the step. A trap runs only while the script waits in `wait`.");
  line("forward_signal() {");
  line("  echo \"maestro: job got SIG$1; forwarding it to the training step\" >&2");
  line("  if [ -n \"$step_pid\" ]; then kill -s \"$1\" \"$step_pid\" 2>/dev/null || true; fi");
  line("}");
  line("trap 'forward_signal USR1' USR1");
  line("trap 'forward_signal TERM' TERM");
  std::string extra;
  for (const auto& a : options.worker_args) extra += " " + ShellQuote(a);
  line("# Rank 0 writes the step's exit code here once every rank has finished.");
  line("step_exit=\"${MAESTRO_PLAN%/*}/step-exit.${SLURM_JOB_ID}.${SLURM_RESTART_COUNT:-0}\"");
  line("rm -f \"$step_exit\"");
  line("export MAESTRO_STEP_EXIT_FILE=\"$step_exit\"");
  line(fmt::format("srun --mpi=pmix --het-group=0-{} {} \"$MAESTRO_PLAN\"{} &", k - 1, ShellQuote(options.worker),
                   extra));
  line("step_pid=$!");
  line("# Slurm 22.05's pmix plugin can leave srun waiting forever after every task has");
  line("# ended (srun joins its abort agent in pmixp_abort_agent_stop): once the exit code");
  line("# is written, srun gets MAESTRO_STEP_EXIT_GRACE seconds (30) to end by itself.");
  line("(");
  line("  while kill -0 \"$step_pid\" 2>/dev/null; do");
  line("    if [ -f \"$step_exit\" ]; then");
  line("      sleep \"${MAESTRO_STEP_EXIT_GRACE:-30}\"");
  line("      if kill -0 \"$step_pid\" 2>/dev/null; then");
  line(
      "        echo \"maestro: every rank finished but srun did not end within ${MAESTRO_STEP_EXIT_GRACE:-30} s "
      "(the Slurm 22.05 pmix hang); ending it\" >&2");
  line("        kill -KILL \"$step_pid\" 2>/dev/null || true");
  line("      fi");
  line("      exit 0");
  line("    fi");
  line("    sleep 1");
  line("  done");
  line(") &");
  line("watchdog_pid=$!");
  line("while kill -0 \"$step_pid\" 2>/dev/null; do");
  line("  wait \"$step_pid\"");
  line("done");
  line("wait \"$step_pid\"");
  line("rc=$?");
  line("kill \"$watchdog_pid\" 2>/dev/null || true");
  line("if [ \"$rc\" -eq 137 ] && [ -f \"$step_exit\" ]; then rc=$(cat \"$step_exit\"); fi");
  line("rm -f \"$step_exit\"");
  line(fmt::format("if [ \"$rc\" -eq {} ]; then", kExitRequeue));
  line("  echo \"maestro: the step checkpointed and asked for a requeue; requeueing job $SLURM_JOB_ID\" >&2");
  line("  scontrol requeue \"$SLURM_JOB_ID\"");
  line("  exit 0");
  line("fi");
  line("exit \"$rc\"");
  return s;
}

// ---- the report ---------------------------------------------------------------

namespace {

struct SectionRow {
  std::string name, model, mode, gpus, type, tp, pp, cp, dp, mb, recompute, share, memory, util, runs;
};

std::string PadRight(const std::string& s, size_t w) {
  return s.size() >= w ? s : s + std::string(w - s.size(), ' ');
}

std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::string out;
  for (const auto& r : rows) {
    std::string l;
    for (size_t i = 0; i < r.size(); ++i) l += (i ? "  " : "") + (i + 1 < r.size() ? PadRight(r[i], width[i]) : r[i]);
    out += l + "\n";
  }
  return out;
}

double Utilization(const SectionCost& c, const DeviceType& d, double step) {
  if (step <= 0 || c.gpus <= 0) return 0;
  return c.useful_flops_per_step / (c.gpus * d.peak_flops * step);
}

void RenderReport(const Spec& spec, const CostModel& model, CompileResult& r) {
  const Workload& w = r.workload;
  const Assignment& a = r.assignment;
  const auto& devs = model.devices();
  const double step = a.bottleneck_seconds;
  std::string t;
  t += fmt::format("maestro-compile: job '{}' from {}\n", spec.job.name, spec.path);
  t += fmt::format("global batch {} samples, seq_len {}; {} section(s), {} edge(s)\n", spec.data.global_batch,
                   spec.data.seq_len, w.sections.size(), w.edges.size());
  for (size_t d = 0; d < devs.size(); ++d) {
    if (devs[d].shared_node) {
      t += fmt::format(
          "local mode: one node of {} '{}' slot(s) ({:.0f} GB, {:.4g} TFLOP/s each) that the sections "
          "share; plan uses {}{}\n",
          devs[d].gpus_per_node, devs[d].name, devs[d].memory_bytes / 1e9, devs[d].peak_flops / 1e12,
          a.nodes_per_device[d],
          devs[d].shared_cores > 0 ? fmt::format("; the ranks share {} core(s)", devs[d].shared_cores) : "");
      continue;
    }
    t += fmt::format("budget '{}': {} node(s) x {} {} ({:.0f} GB, {:.4g} TFLOP/s each); plan holds {} node(s)\n",
                     devs[d].name, devs[d].nodes, devs[d].gpus_per_node, devs[d].cpu ? "CPU slots" : "GPUs",
                     devs[d].memory_bytes / 1e9, devs[d].peak_flops / 1e12, a.nodes_per_device[d]);
  }
  t += "\n";
  std::vector<std::vector<std::string>> rows = {{"section", "model", "mode", "active", "GPUs", "type", "TP", "PP", "CP",
                                                 "DP", "mb", "recomp", "share", "mem/GPU GiB", "util", "runtime"}};
  nlohmann::json js;
  js["job"] = spec.job.name;
  js["spec"] = spec.path;
  js["global_batch"] = spec.data.global_batch;
  nlohmann::json jsections = nlohmann::json::array();
  for (size_t i = 0; i < w.sections.size(); ++i) {
    const SectionWork& s = w.sections[i];
    const SectionCost& c = a.sections[i].cost;
    const DeviceType& d = devs[static_cast<size_t>(s.device)];
    const double share = step > 0 ? c.step_seconds / step : 0;
    const double util = Utilization(c, d, step);
    const std::string runtime = a.sections[i].planner_only.empty() ? "yes" : "planner-only";
    rows.push_back(
        {s.name,
         fmt::format("{} {}", plan::ModelKindName(s.model.kind), HumanCount(static_cast<double>(s.facts.params))),
         plan::SectionModeName(s.mode), fmt::format("{:.0f}%", 100 * s.active_fraction), std::to_string(c.gpus), d.name,
         std::to_string(c.config.tp), std::to_string(c.config.pp), std::to_string(c.config.cp),
         std::to_string(c.config.dp), std::to_string(c.config.micro_batch), c.config.recompute ? "yes" : "no",
         fmt::format("{:.0f}%", 100 * share), fmt::format("{}/{:.0f}", Gib(c.memory.total()), d.memory_bytes / kGiB),
         fmt::format("{:.0f}%", 100 * util), runtime});
    nlohmann::json j;
    j["name"] = s.name;
    j["model"] = plan::ModelKindName(s.model.kind);
    j["params"] = s.facts.params;
    j["mode"] = plan::SectionModeName(s.mode);
    j["active_fraction"] = s.active_fraction;
    j["tokens_per_sample"] = s.tokens;
    j["gpus"] = c.gpus;
    j["nodes"] = d.shared_node ? 1 : c.nodes;
    j["gpu_type"] = d.name;
    j["tp"] = c.config.tp;
    j["pp"] = c.config.pp;
    j["cp"] = c.config.cp;
    j["dp"] = c.config.dp;
    j["micro_batch"] = c.config.micro_batch;
    j["recompute"] = c.config.recompute;
    j["step_seconds"] = c.step_seconds;
    j["share_of_step"] = share;
    j["memory_bytes"] = {{"weights", c.memory.weights},     {"gradients", c.memory.gradients},
                         {"optimizer", c.memory.optimizer}, {"activations", c.memory.activations},
                         {"reserved", c.memory.reserved},   {"total", c.memory.total()},
                         {"capacity", d.memory_bytes}};
    j["flops_forward_per_sample"] = c.flops_forward_per_sample;
    j["flops_backward_per_sample"] = c.flops_backward_per_sample;
    j["utilization"] = util;
    j["measured_profile"] = c.measured;
    j["runtime_supported"] = a.sections[i].planner_only.empty();
    j["planner_only"] = a.sections[i].planner_only;
    jsections.push_back(j);
  }
  t += Table(rows);
  nlohmann::json jedges = nlohmann::json::array();
  for (size_t e = 0; e < w.edges.size(); ++e) {
    const EdgeWork& ew = w.edges[e];
    const int a_dp = a.sections[static_cast<size_t>(ew.from)].cost.config.dp;
    const int b_dp = a.sections[static_cast<size_t>(ew.to)].cost.config.dp;
    const std::string fan =
        b_dp >= a_dp ? fmt::format("fan-out {}", b_dp / a_dp) : fmt::format("fan-in {}", a_dp / b_dp);
    t += fmt::format("edge {} -> {} ({}): {} (DP {} -> {}), {}/sample{}, {:.3g} s/step of transfer\n",
                     w.sections[static_cast<size_t>(ew.from)].name, w.sections[static_cast<size_t>(ew.to)].name,
                     ew.tensor, fan, a_dp, b_dp, HumanBytes(ew.bytes_per_sample),
                     ew.carries_gradient ? " (+ gradient back)" : "", a.edge_seconds[e]);
    jedges.push_back({{"from", w.sections[static_cast<size_t>(ew.from)].name},
                      {"to", w.sections[static_cast<size_t>(ew.to)].name},
                      {"tensor", ew.tensor},
                      {"dp_from", a_dp},
                      {"dp_to", b_dp},
                      {"bytes_per_sample", ew.bytes_per_sample},
                      {"carries_gradient", ew.carries_gradient},
                      {"seconds_per_step", a.edge_seconds[e]}});
  }
  t += "\n";
  t += fmt::format(
      "analytic steady state: {:.4g} s/step -> {:.4g} samples/s on {} GPU(s) (the slowest section or "
      "edge)\n",
      step, a.throughput, a.gpus);
  const SimulatedStep& sim = r.simulated;
  const SimulatedStep& msim = r.monolithic_simulated;
  if (sim.ok) {
    t += fmt::format(
        "simulated step: {:.4g} s -> {:.4g} samples/s ({} schedule, mean of {} sampled global batches, "
        "{:.4g}..{:.4g} s)\n",
        sim.step_seconds, r.prediction.samples_per_second, sim.policy, sim.batches, sim.min_step_seconds,
        sim.max_step_seconds);
    std::vector<std::vector<std::string>> srows = {
        {"  section", "replicas", "busy", "idle s/replica", "bubbles/replica"}};
    for (const auto& ss : sim.sections) {
      srows.push_back({"  " + ss.name, std::to_string(ss.replicas), fmt::format("{:.0f}%", 100 * ss.utilization),
                       fmt::format("{:.4g}", ss.bubble_seconds), fmt::format("{:.1f}", ss.bubbles)});
    }
    t += Table(srows);
  } else {
    t += fmt::format("simulated step: none ({}); predicted {:.4g} s ({})\n", sim.error, r.prediction.step_seconds,
                     r.prediction.predictor);
  }
  const MonolithicPlan& m = r.monolithic;
  double speedup = 0, per_gpu = 0, per_flops = 0, speedup_analytic = 0;
  const bool simulated = sim.ok && msim.ok && sim.step_seconds > 0;
  double held_peak = 0;  // peak FLOP/s of the GPUs the sectioned plan runs on
  for (size_t i = 0; i < w.sections.size(); ++i) {
    held_peak += a.sections[i].cost.gpus * devs[static_cast<size_t>(w.sections[i].device)].peak_flops;
  }
  if (m.found) {
    speedup_analytic = a.throughput / m.throughput;
    speedup = simulated ? msim.step_seconds / sim.step_seconds : speedup_analytic;
    per_gpu = speedup * m.gpus / std::max(1, a.gpus);
    const double mono_peak =
        m.peak_flops > 0 ? m.peak_flops : m.gpus * devs[static_cast<size_t>(r.monolithic_device)].peak_flops;
    per_flops = held_peak > 0 ? speedup * mono_peak / held_peak : 0;
    t += fmt::format(
        "monolithic baseline: every section on all {} GPU(s), one after another; {}: analytic {:.4g} s/step, "
        "{} GiB/GPU{}\n",
        m.gpus, ConfigText(m.config), m.step_seconds, Gib(m.memory.total()),
        m.planner_only.empty() ? "" : " (uses features our runtime lacks: " + m.planner_only + ")");
    t += DescribeMonolithic(m);
    if (msim.ok) {
      t += fmt::format(
          "  simulated: {:.4g} s -> {:.4g} samples/s ({} over the same sampled batches, {:.4g}..{:.4g} s; "
          "busy {:.0f}%)\n",
          msim.step_seconds, spec.data.global_batch / msim.step_seconds, msim.policy, msim.min_step_seconds,
          msim.max_step_seconds, 100 * msim.utilization);
    }
    t += fmt::format(
        "speed-up vs monolithic: {:.2f}x ({}; per GPU: {:.2f}x, per peak FLOP/s: {:.2f}x); analytic steady "
        "state: {:.2f}x\n",
        speedup, simulated ? "simulated step times" : "analytic", per_gpu, per_flops, speedup_analytic);
  } else {
    t += "monolithic baseline: none: " + m.why_not + "\n";
  }
  std::string planner_only;
  for (size_t i = 0; i < w.sections.size(); ++i) {
    if (!a.sections[i].planner_only.empty()) {
      planner_only += fmt::format("  {}: {}\n", w.sections[i].name, a.sections[i].planner_only);
    }
  }
  if (!planner_only.empty()) t += "planner-only (the runtime cannot run these yet):\n" + planner_only;
  r.report = t;

  js["sections"] = jsections;
  js["edges"] = jedges;
  js["step_seconds"] = step;
  js["samples_per_second"] = a.throughput;
  js["predicted_step_seconds"] = r.prediction.step_seconds;
  js["predictor"] = r.prediction.predictor;
  const auto sim_json = [](const SimulatedStep& x) -> nlohmann::json {
    if (!x.ok) return {{"ok", false}, {"error", x.error}};
    nlohmann::json secs = nlohmann::json::array();
    for (const auto& ss : x.sections) {
      secs.push_back({{"name", ss.name},
                      {"replicas", ss.replicas},
                      {"utilization", ss.utilization},
                      {"idle_seconds_per_replica", ss.bubble_seconds},
                      {"bubbles_per_replica", ss.bubbles}});
    }
    return {{"ok", true},
            {"policy", x.policy},
            {"batches", x.batches},
            {"step_seconds", x.step_seconds},
            {"min_step_seconds", x.min_step_seconds},
            {"max_step_seconds", x.max_step_seconds},
            {"utilization", x.utilization},
            {"sections", secs}};
  };
  js["simulation"] = sim_json(sim);
  js["gpus"] = a.gpus;
  js["nodes_per_gpu_type"] = a.nodes_per_device;
  if (m.found) {
    js["monolithic"] = {{"gpus", m.gpus},
                        {"tp", m.config.tp},
                        {"pp", m.config.pp},
                        {"cp", m.config.cp},
                        {"dp", m.config.dp},
                        {"micro_batch", m.config.micro_batch},
                        {"recompute", m.config.recompute},
                        {"step_seconds", m.step_seconds},
                        {"samples_per_second", m.throughput},
                        {"memory_bytes", m.memory.total()},
                        {"planner_only", m.planner_only},
                        {"basis", m.basis}};
    nlohmann::json terms = nlohmann::json::array();
    for (const auto& term : m.terms)
      terms.push_back({{"name", term.name}, {"seconds", term.seconds}, {"why", term.why}});
    js["monolithic"]["terms"] = terms;
    nlohmann::json on = nlohmann::json::array();
    for (const auto& d : m.devices)
      on.push_back({{"gpu_type", devs[static_cast<size_t>(d.device)].name}, {"gpus", d.gpus}});
    js["monolithic"]["gpu_types"] = on;
    js["monolithic"]["simulation"] = sim_json(msim);
    js["speedup_vs_monolithic"] = speedup;
    js["speedup_source"] = simulated ? "simulated" : "analytic";
    js["speedup_vs_monolithic_analytic"] = speedup_analytic;
    js["speedup_per_gpu"] = per_gpu;
    js["speedup_per_peak_flops"] = per_flops;
  } else {
    js["monolithic"] = nullptr;
    js["speedup_vs_monolithic"] = nullptr;
  }
  js["planner_only"] = !planner_only.empty();
  r.report_json = js.dump(2);
}

// One line per alternative: what the neighbouring choice would have cost.
std::string Alternative(const CostModel& model, const SectionWork& s, const plan::ParallelConfig& c,
                        const std::string& what, const PlannerOptions& o) {
  if (c.tp < 1 || c.pp < 1 || c.dp < 1 || c.micro_batch < 1 || c.cp < 1) return "";
  const SectionCost alt = model.Evaluate(s, c);
  const DeviceType& d = model.devices()[static_cast<size_t>(s.device)];
  const std::string only = PlannerOnlyFeatures(s.model, c, o.support);
  if (!only.empty() && !o.allow_planner_only)
    return fmt::format("    {}: the runtime cannot run it ({})\n", what, only);
  if (!alt.fits) {
    return fmt::format("    {}: needs {} GiB per GPU > {:.1f}\n", what, Gib(alt.memory.total()), d.memory_bytes / kGiB);
  }
  return fmt::format("    {}: {:.4g} s/step, {} GiB per GPU\n", what, alt.step_seconds, Gib(alt.memory.total()));
}

void RenderExplain(const CostModel& model, const PlannerOptions& o, CompileResult& r, const PlanOutcome& outcome) {
  const Workload& w = r.workload;
  const Assignment& a = r.assignment;
  std::string t;
  size_t bottleneck = 0;
  for (size_t i = 0; i < a.sections.size(); ++i) {
    if (a.sections[i].cost.step_seconds > a.sections[bottleneck].cost.step_seconds) bottleneck = i;
  }
  t += fmt::format(
      "objective: the highest steady-state throughput = global batch / the slowest section or edge; "
      "then the fewest nodes.\n");
  for (size_t i = 0; i < w.sections.size(); ++i) {
    const SectionWork& s = w.sections[i];
    const SectionCost& c = a.sections[i].cost;
    const DeviceType& d = model.devices()[static_cast<size_t>(s.device)];
    t += fmt::format("section '{}': {} on {} {} ({} node(s)); {} configurations evaluated, {} fit in memory\n", s.name,
                     ConfigText(c.config), c.gpus, d.name, d.shared_node ? 1 : c.nodes, outcome.evaluated[i],
                     outcome.fitting[i]);
    t += fmt::format("  work: {:.0f}% of the samples x {} tokens; {:.3g} GFLOP forward{} per sample\n",
                     100 * s.active_fraction, s.tokens, c.flops_forward_per_sample / 1e9,
                     s.trains() ? fmt::format(" + {:.3g} backward", c.flops_backward_per_sample / 1e9) : "");
    t += fmt::format(
        "  memory per GPU: weights {} + gradients {} + optimizer {} (ZeRO-1 over DP {}) + activations {} "
        "+ reserve {} = {} of {}\n",
        HumanBytes(c.memory.weights), HumanBytes(c.memory.gradients), HumanBytes(c.memory.optimizer), c.config.dp,
        HumanBytes(c.memory.activations), HumanBytes(c.memory.reserved), HumanBytes(c.memory.total()),
        HumanBytes(d.memory_bytes));
    t +=
        fmt::format("  time per step: {:.4g} micro-batches x {:.4g} s per stage{} + DP sync {:.4g} s = {:.4g} s{}\n",
                    c.microbatches, c.stage_seconds, c.config.pp > 1 ? fmt::format(" (+{} fill)", c.config.pp - 1) : "",
                    c.dp_sync_seconds, c.step_seconds, c.measured ? " (measured profile)" : "");
    if (i == bottleneck) {
      t += "  this is the bottleneck section: the other sections got the fewest nodes that keep up with it\n";
    } else {
      t += fmt::format("  it keeps up with the bottleneck '{}' ({:.4g} s) on the fewest nodes that allow it\n",
                       w.sections[bottleneck].name, a.bottleneck_seconds);
    }
    t += "  neighbouring choices (same GPU count where possible):\n";
    plan::ParallelConfig x = c.config;
    if (x.tp > 1) {
      x = c.config;
      x.tp /= 2;
      x.dp *= 2;
      t += Alternative(model, s, x, fmt::format("TP {} (DP {})", x.tp, x.dp), o);
    }
    if (x.dp % 2 == 0 || c.config.dp % 2 == 0) {
      x = c.config;
      if (x.dp % 2 == 0) {
        x.tp *= 2;
        x.dp /= 2;
        t += Alternative(model, s, x, fmt::format("TP {} (DP {})", x.tp, x.dp), o);
      }
    }
    x = c.config;
    if (x.micro_batch > 1) {
      x.micro_batch /= 2;
      t += Alternative(model, s, x, fmt::format("micro-batch {}", x.micro_batch), o);
    }
    x = c.config;
    x.micro_batch *= 2;
    t += Alternative(model, s, x, fmt::format("micro-batch {}", x.micro_batch), o);
    if (s.trains()) {
      x = c.config;
      x.recompute = !x.recompute;
      t += Alternative(model, s, x, x.recompute ? "with recomputation" : "without recomputation", o);
    }
  }
  for (size_t e = 0; e < w.edges.size(); ++e) {
    const EdgeWork& ew = w.edges[e];
    const int a_dp = a.sections[static_cast<size_t>(ew.from)].cost.config.dp;
    const int b_dp = a.sections[static_cast<size_t>(ew.to)].cost.config.dp;
    t += fmt::format("edge {} -> {}: DP {} x {} = {}{}\n", w.sections[static_cast<size_t>(ew.from)].name,
                     w.sections[static_cast<size_t>(ew.to)].name, a_dp,
                     b_dp >= a_dp ? fmt::format("fan-out {}", b_dp / a_dp) : fmt::format("(1/{}) fan-in", a_dp / b_dp),
                     b_dp, ew.fanout || ew.fanin ? " (pinned)" : "");
  }
  t += "simulation (FromPlan -> BuildSchedule -> Simulate over sampled global batches): ";
  t += r.refinement_log.empty() ? "no other micro-batch size or DP inside the held nodes shortens the simulated step\n"
                                : "changed what the steady-state objective cannot see (fill and drain between "
                                  "sections):\n" +
                                      r.refinement_log;
  if (r.monolithic.found) {
    const MonolithicPlan& m = r.monolithic;
    t += fmt::format("monolithic: best single configuration {} on all {} GPUs ({:.4g} s/step analytic)\n",
                     ConfigText(m.config), m.gpus, m.step_seconds);
    for (size_t i = 0; i < w.sections.size() && i < m.sections.size(); ++i) {
      const SectionWork& s = w.sections[i];
      const plan::ParallelConfig& c = m.sections[i].config;
      if (c.tp != m.config.tp || c.pp != m.config.pp) {
        t += fmt::format(
            "  '{}' cannot be split like the LLM (TP {} PP {}): it runs whole on pipeline stage 0 of "
            "every TP rank, {}x its FLOPs per replica, and stage 0 sets the pipeline's pace\n",
            s.name, m.config.tp, m.config.pp, m.config.tp);
      } else if (!s.trains()) {
        t += fmt::format(
            "  frozen '{}' runs at the trainer's TP {} PP {} and micro-batch {}, its replica in the same "
            "GPU memory as the training states\n",
            s.name, c.tp, c.pp, c.micro_batch);
      }
      if (s.active_fraction < 1.0) {
        t += fmt::format(
            "  '{}' runs for {:.0f}% of the samples: FIFO deals the data order round-robin, so DP "
            "replicas draw different counts and the step waits for the one with the most\n",
            s.name, 100 * s.active_fraction);
      }
    }
    if (r.monolithic_simulated.ok) {
      t += fmt::format(
          "  simulated (FIFO, {} sampled batches): {:.4g} s per step (slowest batch {:.4g} s); the "
          "analytic formula expects {:.4g} s\n",
          r.monolithic_simulated.batches, r.monolithic_simulated.step_seconds, r.monolithic_simulated.max_step_seconds,
          m.step_seconds);
    }
  }
  r.explain = t;
}

}  // namespace

StatusOr<CompileResult> Compile(const Spec& given_spec, const CompileOptions& options) {
  CompileResult r;
  MAESTRO_ASSIGN_OR_RETURN(const Spec spec, EffectiveSpec(given_spec, options));
  for (const auto& p : options.extra_profiles) {
    if (spec.section_index(p.section) < 0) {
      std::vector<std::string> names;
      for (const auto& s : spec.sections) names.push_back(s.name);
      return Status::InvalidArgument(
          fmt::format("--profiles: a profile of unknown section '{}'{}", p.section, Suggest(p.section, names)));
    }
  }
  const std::vector<DeviceType> devices = DevicesOf(spec);
  MAESTRO_ASSIGN_OR_RETURN(r.workload, BuildWorkload(spec, devices, options.extra_profiles));
  const CostModel model(devices, spec.data.global_batch);
  PlannerOptions po;
  po.allow_planner_only = options.allow_planner_only;
  po.support = spec.cluster.local ? kRuntimeSupport : options.support;
  const PlanOutcome outcome = PlanSections(model, r.workload, po);
  if (!outcome.ok()) {
    const PlanFailure& f = outcome.failure;
    SourcePos pos = spec.cluster.pos;
    if (f.kind == PlanFailure::Kind::kNoConfigFits && f.section >= 0)
      pos = spec.sections[static_cast<size_t>(f.section)].pos;
    if (f.kind == PlanFailure::Kind::kFanOutImpossible && f.edge >= 0 && f.edge < static_cast<int>(spec.edges.size())) {
      pos = spec.edges[static_cast<size_t>(f.edge)].pos;
    }
    return Status::InvalidArgument(AtPos(spec.path, pos, f.message));
  }
  r.assignment = outcome.assignment;
  if (spec.cluster.local) {
    for (size_t i = 0; i < r.assignment.sections.size(); ++i) {
      if (!r.assignment.sections[i].planner_only.empty()) {
        return Status::InvalidArgument(
            AtPos(spec.path, spec.sections[i].pos,
                  fmt::format("--local: section '{}' needs what the runtime cannot run "
                              "yet ({}); it runs only under Slurm with a runtime that has it",
                              spec.sections[i].name, r.assignment.sections[i].planner_only)));
      }
    }
  }
  r.monolithic = PlanMonolithic(model, r.workload, DeviceIndex(spec, spec.cluster.default_gpu), po);
  SimulationSettings sim;
  sim.seed = spec.data.seed;
  sim.seq_len = spec.data.seq_len;
  sim.modalities = spec.data.modalities;
  const SimulatorStepPredictor predictor(sim);
  r.assignment = RefineBySimulation(model, r.workload, r.assignment, po, sim, &r.refinement_log);
  r.simulated = predictor.Run(model, r.workload, r.assignment);
  r.prediction = PredictionOf(r.simulated, model, r.workload, r.assignment);
  r.monolithic_device = DeviceIndex(spec, spec.cluster.default_gpu);
  r.monolithic_simulated = SimulateMonolithic(model, r.workload, r.monolithic, r.monolithic_device, sim);

  // The plan.
  plan::Plan& p = r.plan;
  p.job_name = spec.job.name;
  p.spec_path = spec.path;
  p.work_dir = spec.job.work_dir;
  p.predicted_step_seconds = r.prediction.step_seconds;
  int next_rank = 0;
  for (size_t i = 0; i < spec.sections.size(); ++i) {
    const SectionSpec& ss = spec.sections[i];
    const SectionWork& sw = r.workload.sections[i];
    const SectionCost& c = r.assignment.sections[i].cost;
    const DeviceType& d = devices[static_cast<size_t>(sw.device)];
    plan::SectionPlan sp;
    sp.name = ss.name;
    sp.mode = ss.mode;
    sp.activation = ss.activation;
    sp.model = sw.model;
    sp.optimizer = ss.optimizer;
    sp.config = c.config;
    sp.placement.het_component = static_cast<int>(i);
    sp.placement.first_rank = next_rank;
    sp.placement.nodes = d.shared_node ? 1 : c.nodes;
    sp.placement.tasks_per_node = c.gpus / sp.placement.nodes;
    sp.placement.gpus_per_task = d.cpu ? 0 : 1;
    sp.placement.gpu_type = d.name;
    sp.placement.partition = d.partition;
    sp.placement.constraint = d.constraint;
    sp.predicted_step_seconds = c.step_seconds;
    sp.predicted_memory_bytes = c.memory.total();
    sp.tokens_per_sample = sw.tokens;
    sp.active_fraction = sw.active_fraction;
    sp.predicted_utilization = Utilization(c, d, r.assignment.bottleneck_seconds);
    sp.planner_only = r.assignment.sections[i].planner_only;
    sp.init_from = ss.init_from;
    sp.init_section = ss.init_section;
    sp.loss = ss.loss;
    sp.cost = MicroBatchCostOf(model, sw, c);
    next_rank += c.gpus;
    p.sections.push_back(std::move(sp));
  }
  for (const auto& ew : r.workload.edges) {
    plan::EdgePlan ep;
    ep.from = spec.sections[static_cast<size_t>(ew.from)].name;
    ep.to = spec.sections[static_cast<size_t>(ew.to)].name;
    ep.tensor = ew.tensor;
    ep.bytes_per_sample = static_cast<int64_t>(ew.bytes_per_sample);
    ep.carries_gradient = ew.carries_gradient;
    ep.seconds_per_sample = ew.bytes_per_sample / std::max(ew.link_bytes_per_s, 1.0);
    p.edges.push_back(ep);
  }
  p.data.manifest = spec.data.manifest;
  p.data.global_batch = spec.data.global_batch;
  p.data.seq_len = spec.data.seq_len;
  p.data.seed = spec.data.seed;
  p.data.steps = spec.job.steps;
  p.data.modalities = spec.data.modalities;
  p.data.dataset = spec.data.dataset;
  p.checkpoint_every = spec.job.checkpoint_every;
  p.comm_timeout_s = spec.job.comm_timeout_s;
  p.shared_cores = spec.cluster.local ? spec.cluster.local_cores : 0;
  p.schedule_policy = spec.job.schedule;
  Status valid = plan::Validate(p);
  if (!valid.ok()) return Status::Internal("maestro-compile built an invalid plan (a bug): " + valid.message());
  plan::FillLayout(p);

  r.sbatch = RenderSbatch(p, spec, options);
  RenderReport(spec, model, r);
  if (options.support_given && !spec.cluster.local) {
    r.report += fmt::format("planned for a runtime with: {} (--runtime-support, not this build's table)\n",
                            RuntimeSupportText(options.support));
  }
  RenderExplain(model, po, r, outcome);
  return r;
}

namespace {

Status MakeDirs(const std::string& dir) {
  if (dir.empty()) return Status::Ok();
  std::string partial;
  std::stringstream ss(dir);
  std::string part;
  if (dir.front() == '/') partial = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty()) continue;
    partial += part + "/";
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::IOError(fmt::format("cannot create directory '{}': {}", partial, std::strerror(errno)));
    }
  }
  return Status::Ok();
}

Status WriteFile(const std::string& path, const std::string& text, mode_t mode) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc | std::ios::binary);
    if (!out) return Status::IOError(fmt::format("cannot write '{}'", tmp));
    out << text;
    if (!out.flush()) return Status::IOError(fmt::format("short write to '{}'", tmp));
  }
  if (::chmod(tmp.c_str(), mode) != 0) return Status::IOError(fmt::format("cannot chmod '{}'", tmp));
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::IOError(fmt::format("cannot rename '{}'", tmp));
  return Status::Ok();
}

}  // namespace

Status WriteOutputs(const CompileResult& r, const CompileOptions& options) {
  const std::string dir = options.out_dir.empty() ? "." : options.out_dir;
  MAESTRO_RETURN_IF_ERROR(MakeDirs(dir));
  MAESTRO_RETURN_IF_ERROR(plan::SavePlan(r.plan, dir + "/plan.json"));
  MAESTRO_RETURN_IF_ERROR(WriteFile(dir + "/job.sbatch", r.sbatch, 0755));
  MAESTRO_RETURN_IF_ERROR(WriteFile(dir + "/report.txt", r.report, 0644));
  return Status::Ok();
}

StatusOr<std::vector<ProfileSpec>> ReadProfilesJson(const std::string& path) {
  MAESTRO_ASSIGN_OR_RETURN(auto points, plan::ReadProfileFile(path));
  std::vector<ProfileSpec> out;
  for (size_t i = 0; i < points.size(); ++i) {
    const plan::ProfilePoint& q = points[i];
    ProfileSpec p;
    p.section = q.section;
    p.gpus = q.gpus;
    p.micro_batch = q.micro_batch;
    p.seconds = q.seconds;
    p.forward_seconds = q.forward_seconds;
    p.optimizer_seconds = q.optimizer_seconds;
    if (p.gpus < 1 || p.micro_batch < 1 || !(p.seconds > 0)) {
      return Status::InvalidArgument(
          fmt::format("{}: profile {}: gpus, micro_batch and seconds must be positive", path, i));
    }
    if (p.forward_seconds < 0 || p.forward_seconds > p.seconds || p.optimizer_seconds < 0) {
      return Status::InvalidArgument(fmt::format(
          "{}: profile {}: forward_seconds must lie in [0, seconds] and optimizer_seconds be >= 0", path, i));
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace maestro::compiler
