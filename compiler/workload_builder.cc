// SPDX-License-Identifier: Apache-2.0
#include "compiler/workload_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "base/checks.h"
#include "base/text.h"
#include "compiler/device_profile.h"
#include "compiler/local_gpu_type.h"
#include "compiler/memory_model.h"
#include "compiler/model.h"
#include "compiler/sample_mix.h"
#include "plan/native_vision.h"
#include "plan/profile.h"
#include "plan/teacher_rows.h"

namespace maestro::compiler {

namespace {

// Tokens of the tensor a section hands downstream, per active sample.
int64_t OutputTokens(const SectionWork& s) {
  if (s.output_rows > 0) return s.output_rows;
  const int64_t merge = static_cast<int64_t>(ExtraValue(s.model, "spatial_merge", 0));
  if (s.model.kind == plan::ModelKind::kVit && merge > 0) return std::max<int64_t>(1, s.tokens / (merge * merge));
  return s.tokens;
}

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
                                         {"pp_fused", &RuntimeSupport::pipeline_parallel_fused},
                                         {"cp_decoder", &RuntimeSupport::context_parallel_decoder},
                                         {"cp_encoder", &RuntimeSupport::context_parallel_encoder},
                                         {"cp_pp", &RuntimeSupport::context_parallel_with_pipeline},
                                         {"cp_fused", &RuntimeSupport::context_parallel_fused},
                                         {"ep", &RuntimeSupport::expert_parallel},
                                         {"moe", &RuntimeSupport::mixture_of_experts},
                                         {"recompute", &RuntimeSupport::activation_recompute},
                                         {"zero1", &RuntimeSupport::zero1_optimizer_sharding},
                                         {"run_ahead", &RuntimeSupport::run_ahead},
                                         {"run_ahead_mp", &RuntimeSupport::run_ahead_model_parallel},
                                         {"run_ahead_cp", &RuntimeSupport::run_ahead_context_parallel},
                                         {"run_ahead_stream", &RuntimeSupport::run_ahead_stream}};

}  // namespace

int DeviceIndex(const Spec& spec, const std::string& name) {
  for (size_t i = 0; i < spec.cluster.gpu_types.size(); ++i) {
    if (spec.cluster.gpu_types[i].name == name) return static_cast<int>(i);
  }
  return 0;
}

std::vector<DeviceType> DevicesOf(const Spec& spec) {
  std::vector<DeviceType> out;
  for (const auto& g : spec.cluster.gpu_types) {
    DeviceType d;
    d.name = g.name;
    d.cpu = g.cpu;
    // What maestro-worker's --precision auto runs there (cost_model.h).
    d.precision = g.cpu ? ParamPrecision::kFp32 : ParamPrecision::kMixedBf16;
    d.kernels = g.kernels;
    d.kernels_origin = g.kernels_origin;
    d.kernels_note = g.kernels_note;
    d.memory_bytes = g.memory_gb * 1e9;
    // A CPU slot's reserve is what a maestro-worker rank occupies before its
    // model (compiler/memory_model.h); a GPU's the framework and NCCL share.
    d.reserved_bytes = g.cpu ? kCpuWorkerBaselineBytes : std::min(2e9, 0.1 * d.memory_bytes);
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
    d.packs_nodes = spec.cluster.share_nodes;
    if (spec.cluster.local) {
      d.packs_nodes = false;
      d.shared_node = true;
      d.nodes = g.gpus_per_node;  // the budget counts slots
      d.shared_cores = spec.cluster.local_cores;
    }
    out.push_back(d);
  }
  return out;
}

StatusOr<PinOverride> ParsePin(const std::string& text) {
  static const std::vector<std::string> kKeys = {"tp", "dp", "pp", "cp", "ep", "micro_batch"};
  const auto dot = text.find('.');
  const auto eq = text.find('=');
  if (dot == std::string::npos || eq == std::string::npos || dot == 0 || eq < dot + 2 || eq + 1 == text.size()) {
    return Status::InvalidArgument(fmt::format(
        "--pin '{}' must be SECTION.KEY=VALUE, e.g. --pin llm.dp=2 (KEY: tp, dp, pp, cp, ep, micro_batch)", text));
  }
  PinOverride p;
  p.text = text;
  p.section = text.substr(0, dot);
  p.key = text.substr(dot + 1, eq - dot - 1);
  const std::string value = text.substr(eq + 1);
  if (std::find(kKeys.begin(), kKeys.end(), p.key) == kKeys.end()) {
    return Status::InvalidArgument(
        fmt::format("--pin '{}': unknown key '{}'; pin one of tp, dp, pp, cp, ep, micro_batch{}", text, p.key,
                    Suggest(p.key, kKeys)));
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

StatusOr<RuntimeSupport> ParseRuntimeSupport(const std::string& list) {
  RuntimeSupport out;
  for (const auto& f : kSupportFlags) out.*(f.field) = list == "all";
  if (list == "all") return out;
  std::vector<std::string> names;
  for (const auto& f : kSupportFlags) names.push_back(f.name);
  names.push_back("cp");  // every CP row
  // An empty item ("dp,,tp_decoder", a trailing comma, "") is refused: a
  // feature lost to a typo would plan for a runtime without it.
  const std::string listed = fmt::format("features: {} (or all)", fmt::join(names, ", "));
  if (list.empty() || list.front() == ',' || list.back() == ',' || list.find(",,") != std::string::npos) {
    return Status::InvalidArgument(fmt::format(
        "--runtime-support '{}': an empty feature (a comma at an end, or two in a row); give a comma list of {}",
        PrintableText(list), listed));
  }
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "cp") {  // every CP row: decoders, encoders, with PP, fused (the one row before they were split)
      out.context_parallel_decoder = out.context_parallel_encoder = out.context_parallel_with_pipeline = true;
      out.context_parallel_fused = true;
      continue;
    }
    const auto it = std::find_if(std::begin(kSupportFlags), std::end(kSupportFlags),
                                 [&](const SupportFlag& f) { return item == f.name; });
    if (it == std::end(kSupportFlags)) {
      return Status::InvalidArgument(fmt::format("--runtime-support: unknown feature '{}'{}; {}", PrintableText(item),
                                                 Suggest(item, names), listed));
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

namespace {

// Applies --pin over the spec's pins.
Status ApplyPins(const std::vector<PinOverride>& pins, Spec& s) {
  std::vector<std::string> names;
  for (const auto& sec : s.sections) names.push_back(sec.name);
  for (const PinOverride& p : pins) {
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
    else if (p.key == "cp")
      sec.cp = p.value;
    else if (p.key == "ep")
      sec.ep = p.value;
    else if (p.key == "micro_batch")
      sec.micro_batch = p.value;
    else
      return Status::InvalidArgument(fmt::format("--pin '{}': unknown key '{}'", p.text, p.key));
  }
  return Status::Ok();
}

// Local mode on GPUs: the type of the machine's GPU named options.local_gpu
// (compiler/local_gpu_type.h): a spec's declaration of that type, else its
// built-in profile, else the default tables with the note.
StatusOr<GpuTypeSpec> LocalGpuTypeSpec(const CompileOptions& options, const Spec& s) {
  const LocalGpuType local = LocalGpuTypeOf(options.local_gpu);
  GpuTypeSpec g;
  bool declared = false;
  for (const auto& t : s.cluster.gpu_types) {
    if (!t.cpu && (t.name == local.type || t.type == local.type)) {
      g = t;
      declared = true;
      break;
    }
  }
  if (!declared) {
    g.name = local.type;
    auto profile = BuiltinDeviceProfile(local.has_profile ? local.type : kDefaultDeviceProfile);
    if (!profile.ok()) return profile.status();
    g.type = local.has_profile ? local.type : "";
    g.tflops_bf16 = profile->peak_flops / 1e12;
    g.kernels_origin = local.has_profile ? "builtin:" + local.type : fmt::format("default:{}", kDefaultDeviceProfile);
    g.kernels_note = local.note;
    g.kernels = std::make_shared<const DeviceProfile>(std::move(*profile));
  }
  if (options.local_gpu_memory_gb > 0) g.memory_gb = options.local_gpu_memory_gb;
  return g;
}

// Local mode: [cluster] becomes one node of options.local_ranks slots that
// every section runs on: the spec's first CPU type (else a synthetic "cpu"
// type), or the machine's GPUs (options.local_gpu).
Status MakeLocal(const CompileOptions& options, Spec& s) {
  if (options.allow_planner_only || options.support_given) {
    return Status::InvalidArgument(
        fmt::format("--local plans only what this build's runtime runs; drop {}",
                    options.allow_planner_only ? "--allow-planner-only" : "--runtime-support"));
  }
  const bool gpus = !options.local_gpu.empty();
  if (gpus && (options.local_grow || options.local_cores > 0)) {
    return Status::InvalidArgument(
        fmt::format("--local-gpu: {} shares CPU cores among ranks; GPUs are not shared (one rank each): drop it",
                    options.local_grow ? "--local-grow" : "--local-cores"));
  }
  const int sections = static_cast<int>(s.sections.size());
  // --local-grow: as many ranks as the sections need at the least (one each,
  // or what their pins ask) when the machine has fewer cores (`maestro run`
  // without --ranks); the ranks then share the cores.
  const int least = LeastRanks(s);
  const int ranks = options.local_grow ? std::max(options.local_ranks, least) : options.local_ranks;
  // Fewer GPUs than the sectioned plan needs: a workload of several sections
  // is planned fused on the GPUs there are (compile.cc PlanFusedOnly), unless
  // --grouping sectioned asks for the sectioned plan; one section's pins that
  // ask more GPUs than there are are the user's to change.
  const bool fused_only = gpus && least > ranks && sections > 1 && options.grouping != Grouping::kSectioned;
  if (gpus && least > ranks && !fused_only) {
    return Status::InvalidArgument(fmt::format(
        "{}the spec needs at least {} ranks ({} section(s), one GPU each{}) but {} GPU(s) of this machine are "
        "given (--local {} --local-gpu: what `maestro run` found, or its --ranks); a GPU is not shared between "
        "ranks: {}train on the CPU with `maestro run --device cpu` (the ranks share the cores), pin fewer ranks, or "
        "plan for a cluster (maestro-compile without --local)",
        sections > 1 ? "--grouping sectioned: " : "", least, sections,
        least > sections ? ", and more where the pins ask" : "", ranks, ranks,
        sections > 1 ? "drop --grouping sectioned (every component fused on each GPU), " : ""));
  }
  if (ranks < sections && !fused_only) {
    return Status::InvalidArgument(
        fmt::format("--local {}: the spec has {} sections and each needs at least one rank; "
                    "give --local {} or more",
                    options.local_ranks, sections, sections));
  }
  GpuTypeSpec slot;
  if (gpus) {
    MAESTRO_ASSIGN_OR_RETURN(slot, LocalGpuTypeSpec(options, s));
  } else {
    slot.name = "cpu";
    slot.cpu = true;
    slot.memory_gb = 4;
    slot.tflops_bf16 = 0.05;
    slot.intra_node_gbps = 5;
    slot.inter_node_gbps = 1;
    slot.mfu = 0.5;
    for (const auto& g : s.cluster.gpu_types) {
      if (g.cpu) {
        slot = g;
        break;
      }
    }
  }
  slot.nodes = 1;
  slot.gpus_per_node = ranks;
  s.cluster.nodes = 1;
  s.cluster.gpus_per_node = ranks;
  s.cluster.default_gpu = slot.name;
  s.cluster.gpu_types = {slot};
  s.cluster.local = true;
  s.cluster.local_cores = options.local_cores;
  for (auto& sec : s.sections) sec.gpu_type.clear();
  return Status::Ok();
}

}  // namespace

int LeastRanks(const Spec& s) {
  int least = 0;
  for (const auto& sec : s.sections) {
    least += std::max(1, sec.tp) * std::max(1, sec.pp) * std::max(1, sec.cp) * std::max(1, sec.dp);
  }
  return least;
}

bool LocalGpusTooFewForSections(const Spec& effective) {
  if (!effective.cluster.local || effective.cluster.gpu_types.size() != 1) return false;
  if (effective.cluster.gpu_types.front().cpu || effective.sections.size() < 2) return false;
  return LeastRanks(effective) > effective.cluster.gpus_per_node;
}

StatusOr<Spec> EffectiveSpec(const Spec& spec, const CompileOptions& options) {
  Spec s = spec;
  MAESTRO_RETURN_IF_ERROR(ApplyPins(options.pins, s));
  if (options.local_ranks <= 0) {
    if (options.local_cores > 0) return Status::InvalidArgument("--local-cores needs --local N");
    if (!options.local_gpu.empty()) return Status::InvalidArgument("--local-gpu needs --local N (the GPUs to use)");
    return s;
  }
  MAESTRO_RETURN_IF_ERROR(MakeLocal(options, s));
  return s;
}

Status CheckProfileSections(const Spec& spec, const std::vector<ProfileSpec>& profiles) {
  for (const auto& p : profiles) {
    if (spec.section_index(p.section) < 0) {
      std::vector<std::string> names;
      for (const auto& s : spec.sections) names.push_back(s.name);
      return Status::InvalidArgument(
          fmt::format("--profiles: a profile of unknown section '{}'{}", p.section, Suggest(p.section, names)));
    }
  }
  return Status::Ok();
}

namespace {

// Section `s` as the cost model sees it: its model, tokens per active sample,
// activation share, GPU type, pins and measured profiles.
// An encoder whose modality has a [[data.modality.mix]] (compiler/sample_mix.h):
// its mean sample's patches at the context that gives the mean's attention
// FLOPs (native images: rounded up to a multiple of 64, so CP degrees up to
// 32 split it as candidates require); its peak for memory; the draws for the
// simulation.
Status ApplyMix(const Spec& spec, SectionWork& sw) {
  MAESTRO_ASSIGN_OR_RETURN(const MixWork mix, ModalityMixWork(spec, sw.activation));
  if (mix.empty()) return Status::Ok();
  const auto mean = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(mix.mean_encoder_tokens - 1e-9)));
  constexpr int64_t kCpMultiple = 64;
  const bool native =
      sw.model.kind == plan::ModelKind::kVit && spec.data.image_resolution == plan::kImageResolutionNative;
  sw.tokens = native ? (mean + kCpMultiple - 1) / kCpMultiple * kCpMultiple : mean;
  sw.attention_context = mix.attention_context;
  sw.facts = ComputeModelFacts(sw.model, mix.attention_context);
  sw.peak_tokens = std::max(sw.tokens, mix.peak_encoder_tokens);
  sw.peak_context = mix.peak_sequence;
  sw.mix_cdf = mix.cdf;
  sw.mix_work = mix.relative_work;
  return Status::Ok();
}

StatusOr<SectionWork> SectionWorkOf(const Spec& spec, const SectionSpec& s, int default_device,
                                    const std::vector<ProfileSpec>& extra_profiles) {
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
  int64_t context = 0;  // tokens one attention sees, when not sw.tokens
  if (s.tokens > 0) {
    sw.tokens = s.tokens;
  } else if (sw.model.kind == plan::ModelKind::kProjector) {
    sw.tokens = modality_tokens > 0 ? modality_tokens : spec.data.seq_len;
  } else if (sw.model.kind == plan::ModelKind::kVit || sw.model.kind == plan::ModelKind::kAudioEncoder) {
    // A manifest's sample carries up to K images (max_images_per_sample) or
    // clips (max_audios_per_sample), each its own attention context: the plan
    // is for K (the memory a micro-batch of such samples needs; the edge
    // carries K items' rows, zero-padded, for every sample). docs/data.md,
    // "### Training on a manifest" and "## Audio".
    const int64_t k =
        sw.model.kind == plan::ModelKind::kVit ? spec.data.max_images_per_sample : spec.data.max_audios_per_sample;
    context = NaturalTokens(sw.model, spec.data.seq_len);
    sw.tokens = context * (spec.data.manifest.empty() ? 1 : std::max<int64_t>(1, k));
    if (sw.model.kind == plan::ModelKind::kVit && spec.data.image_resolution == plan::kImageResolutionNative) {
      // Native resolution (plan/native_vision.h): a sample's patches are m^2
      // per visual placeholder, the modality's mean placeholders when the
      // spec gives them (else every position of the sequence); an attention
      // spans an image at the ViT's image_size (the typical one); an edge
      // carries seq_len rows per sample, what the runtime moves.
      const int64_t merge = std::max<int64_t>(1, plan::SpatialMerge(sw.model));
      const int64_t placeholders =
          modality_tokens > 0 ? std::min(modality_tokens, spec.data.seq_len) : spec.data.seq_len;
      sw.tokens = std::max<int64_t>(1, placeholders) * merge * merge;
      sw.output_rows = plan::VisionRowsPerSample(sw.model, true, k, spec.data.seq_len);
    }
  } else {
    sw.tokens = NaturalTokens(sw.model, spec.data.seq_len);
  }
  sw.facts = ComputeModelFacts(sw.model, context > 0 ? context : sw.tokens);
  sw.attention_context = context > 0 ? context : sw.tokens;
  if (s.tokens <= 0 && (sw.model.kind == plan::ModelKind::kVit || sw.model.kind == plan::ModelKind::kAudioEncoder)) {
    MAESTRO_RETURN_IF_ERROR(ApplyMix(spec, sw));
  }
  sw.device = s.gpu_type.empty() ? default_device : DeviceIndex(spec, s.gpu_type);
  sw.pin_tp = s.tp;
  sw.pin_pp = s.pp;
  sw.pin_cp = s.cp;
  sw.pin_ep = s.ep;
  if (s.ep > 1 && sw.model.experts <= 0) {
    return Status::InvalidArgument(AtPos(spec.path, s.pos,
                                         fmt::format("section '{}': ep = {} but its model '{}' has no experts; expert "
                                                     "parallelism splits a MoE model's experts (remove ep)",
                                                     s.name, s.ep, s.model)));
  }
  sw.pin_dp = s.dp;
  sw.pin_micro_batch = s.micro_batch;
  sw.pin_recompute = s.recompute ? static_cast<int>(*s.recompute) : -1;
  for (const auto& p : spec.profiles) {
    if (p.section == s.name) sw.profiles.push_back(p);
  }
  for (const auto& p : extra_profiles) {
    if (p.section == s.name) sw.profiles.push_back(p);
  }
  return sw;
}

// Edge `e` between the sections `w` holds: the bytes per sample it carries
// (and the gradient back) over the slower side's link.
StatusOr<EdgeWork> EdgeWorkOf(const Spec& spec, const EdgeSpec& e, const Workload& w,
                              const std::vector<DeviceType>& devices) {
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
  } else if (const auto form = plan::TeacherRowsFormOf(e.tensor); form && up.model.kind == plan::ModelKind::kDecoder) {
    // A teacher sends its rows in fp32 (plan/teacher_rows.h): its final
    // hidden states (the student applies the teacher's head), or its top-K
    // or sampled logits; never the vocabulary.
    const auto& loss = spec.sections[static_cast<size_t>(ew.to)].loss;
    ew.bytes_per_sample = static_cast<double>(up.tokens) *
                          static_cast<double>(plan::TeacherRowsWidth(*form, up.model.hidden, loss)) * 4.0;
  } else {
    // The wire carries fp32 rows whatever the precision (runtime/edge_exchange.h).
    ew.bytes_per_sample = static_cast<double>(OutputTokens(up)) * static_cast<double>(up.facts.output_dim) * 4.0;
  }
  ew.active_fraction = std::min(up.active_fraction, down.active_fraction);
  ew.carries_gradient = up.trains();
  ew.fanout = e.fanout;
  ew.fanin = e.fanin;
  ew.link_bytes_per_s = std::min(devices[static_cast<size_t>(up.device)].inter_bytes_per_s,
                                 devices[static_cast<size_t>(down.device)].inter_bytes_per_s);
  return ew;
}

}  // namespace

StatusOr<Workload> BuildWorkload(const Spec& spec, const std::vector<DeviceType>& devices,
                                 const std::vector<ProfileSpec>& extra_profiles) {
  Workload w;
  const int default_device = DeviceIndex(spec, spec.cluster.default_gpu);
  for (const auto& s : spec.sections) {
    MAESTRO_ASSIGN_OR_RETURN(SectionWork sw, SectionWorkOf(spec, s, default_device, extra_profiles));
    w.sections.push_back(std::move(sw));
  }
  // A manifest's projector after a ViT maps every row the ViT hands on: K
  // images' rows per sample, padding included (docs/data.md).
  if (!spec.data.manifest.empty()) {
    for (const auto& e : spec.edges) {
      const int from = spec.section_index(e.from), to = spec.section_index(e.to);
      if (from < 0 || to < 0 || spec.sections[static_cast<size_t>(to)].tokens > 0) continue;
      const SectionWork& up = w.sections[static_cast<size_t>(from)];
      SectionWork& down = w.sections[static_cast<size_t>(to)];
      if (up.model.kind != plan::ModelKind::kVit || down.model.kind != plan::ModelKind::kProjector) continue;
      down.tokens = OutputTokens(up);
      down.facts = ComputeModelFacts(down.model, down.tokens);
    }
  }
  for (const auto& e : spec.edges) {
    MAESTRO_ASSIGN_OR_RETURN(EdgeWork ew, EdgeWorkOf(spec, e, w, devices));
    w.edges.push_back(ew);
  }
  // The graph's view of each section (runtime/section_build.cc): a section
  // with an edge out is no sink; a decoder fed by a decoder is a KD student
  // (with hidden rows it holds the teacher's head and runs the teacher
  // logits and the KL; with top-K or sampled rows the teacher runs its head
  // and the student only the KL: plan/teacher_rows.h); a training decoder
  // sink computes the LM head and the loss.
  for (const EdgeWork& ew : w.edges) {
    SectionWork& up = w.sections[static_cast<size_t>(ew.from)];
    SectionWork& down = w.sections[static_cast<size_t>(ew.to)];
    up.sink = false;
    if (up.model.kind == plan::ModelKind::kDecoder && down.model.kind == plan::ModelKind::kDecoder) {
      const auto& loss = spec.sections[static_cast<size_t>(ew.to)].loss;
      const auto form = plan::TeacherRowsFormOf(ew.tensor).value_or(plan::TeacherRowsForm::kHidden);
      down.kd_top_k = loss.top_k;
      down.kd_rows_width = plan::TeacherRowsWidth(form, up.model.hidden, loss);
      if (plan::StudentHoldsTeacherHead(form)) {
        down.kd_teacher_hidden = up.model.hidden;
      } else {
        down.kd_sparse_rows = true;
        up.teacher_rows_form = static_cast<int>(form);
        up.teacher_rows_width = down.kd_rows_width;
      }
    }
  }
  for (SectionWork& sw : w.sections) {
    sw.lm_loss = sw.sink && sw.trains() && sw.model.kind == plan::ModelKind::kDecoder;
  }
  return w;
}

StatusOr<std::vector<ProfileSpec>> ReadProfilesJson(const std::string& path) {
  MAESTRO_ASSIGN_OR_RETURN(auto points, plan::ReadProfileFile(path));
  return ProfilesFromPoints(points, path);
}

StatusOr<std::vector<ProfileSpec>> ProfilesFromPoints(const std::vector<plan::ProfilePoint>& points,
                                                      const std::string& path) {
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
