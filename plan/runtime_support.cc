// SPDX-License-Identifier: Apache-2.0
#include "plan/runtime_support.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/checks.h"
#include "plan/model_desc.h"
#include "plan/mrope.h"
#include "plan/native_vision.h"
#include "plan/tensor_parallel_split.h"

namespace maestro::plan {

namespace {

bool IsDecoder(const SectionPlan& s) {
  return s.model.kind == ModelKind::kDecoder;
}

bool RunsOnEverySample(const SectionPlan& s) {
  return s.activation.empty() || s.activation == "always";
}

const SectionPlan& Upstream(const Plan& plan, const EdgePlan& e) {
  return plan.sections[static_cast<size_t>(plan.section_index(e.from))];
}

bool FeedsAnother(const Plan& plan, const SectionPlan& s) {
  return std::any_of(plan.edges.begin(), plan.edges.end(), [&](const EdgePlan& e) { return e.from == s.name; });
}

// A table row that is off, refused by name.
Status Unsupported(const SectionPlan& s, const std::string& what, const char* row) {
  return Status::FailedPrecondition(
      fmt::format("section '{}': this runtime does not run {} (plan/runtime_support.h: {} = false); recompile the spec "
                  "without --runtime-support, so that the planner emits only what this runtime runs",
                  s.name, what, row));
}

// A fused section's component, as the runner builds it (runtime/fused_section.cc):
// decoders with the section's TP, PP stage and CP; encoders and projectors
// at its TP when it divides them, else whole, on the first stage, whole
// over CP.
SectionPlan AsFusedComponent(const SectionPlan& component, const SectionPlan& fused) {
  SectionPlan c = component;
  c.config = fused.config;
  if (!IsDecoder(c)) {
    if (!CheckEncoderTensorParallelSplit(c.model, c.config.tp).ok()) c.config.tp = 1;
    c.config.pp = 1;
    c.config.cp = 1;
  }
  if (c.config.pp > 1) c.config.pp = 1;  // its stages: FusedPipelineRefusal, at the section's level
  return c;
}

}  // namespace

Status CheckSectionRuns(const Plan& plan, const SectionPlan& s, const RuntimeSupport& support) {
  MAESTRO_RETURN_IF_ERROR(CheckModelRuns(s));
  MAESTRO_RETURN_IF_ERROR(CheckSectionWiring(plan, s));
  MAESTRO_RETURN_IF_ERROR(CheckSectionData(plan, s));
  MAESTRO_RETURN_IF_ERROR(CheckTensorParallelRuns(s, support));
  MAESTRO_RETURN_IF_ERROR(CheckPipelineRuns(s, support));
  MAESTRO_RETURN_IF_ERROR(CheckContextParallelRuns(plan, s, support));
  MAESTRO_RETURN_IF_ERROR(CheckExpertParallelRuns(s, support));
  return CheckTrainingFeaturesRun(s, support);
}

Status CheckModelRuns(const SectionPlan& s) {
  const std::string where = fmt::format("section '{}'", s.name);
  MAESTRO_RETURN_IF_ERROR(ValidateModelDesc(s.model, where));
  return CheckMrope(s.model, where);
}

Status CheckSectionWiring(const Plan& plan, const SectionPlan& s) {
  int teachers = 0;
  for (const EdgePlan& e : plan.edges) {
    if (e.to != s.name) continue;
    const SectionPlan& up = Upstream(plan, e);
    if (s.mode == SectionMode::kForward && up.mode == SectionMode::kTrain) {
      return Status::InvalidArgument(fmt::format(
          "edge '{}' -> '{}': a training section feeds a forward-only one, so its gradient has nowhere to come from "
          "(make '{}' train, or '{}' forward-only)",
          up.name, s.name, s.name, up.name));
    }
  }
  for (const EdgePlan& e : plan.edges) {
    if (e.to != s.name) continue;
    const SectionPlan& up = Upstream(plan, e);
    if (IsDecoder(up)) {
      if (!IsDecoder(s)) {
        return Status::InvalidArgument(
            fmt::format("edge '{}' -> '{}': decoder hidden states can only feed a decoder (KD)", up.name, s.name));
      }
      if (++teachers > 1) {
        return Status::InvalidArgument(fmt::format("section '{}': more than one teacher edge", s.name));
      }
      if (up.model.vocab != s.model.vocab) {
        return Status::InvalidArgument(fmt::format("KD edge '{}' -> '{}': teacher vocab {} != student vocab {}",
                                                   up.name, s.name, up.model.vocab, s.model.vocab));
      }
    } else if (s.model.kind == ModelKind::kVit || s.model.kind == ModelKind::kAudioEncoder) {
      return Status::InvalidArgument(
          fmt::format("section '{}' ({}) reads its inputs from the data, not from edge "
                      "'{}' -> '{}'",
                      s.name, ModelKindName(s.model.kind), up.name, s.name));
    }
  }
  if (s.loss.kind == "kd" && teachers == 0) {
    return Status::InvalidArgument(fmt::format(
        "section '{}': loss kind 'kd' needs an input edge from a forward-only decoder (the teacher)", s.name));
  }
  // The load-balancing loss joins a sink's loss (docs/moe.md); a training MoE
  // section whose hidden states go on has no loss of its own to add it to.
  if (s.mode == SectionMode::kTrain && RouterAuxLossCoef(s.model) > 0 && FeedsAnother(plan, s)) {
    return Status::InvalidArgument(
        fmt::format("section '{}': the MoE load-balancing loss (router_aux_loss_coef = {}) is added to a sink's "
                    "loss, and this section sends its output on; set router_aux_loss_coef = 0 in its model or make "
                    "it the last section",
                    s.name, RouterAuxLossCoef(s.model)));
  }
  return Status::Ok();
}

Status CheckSectionData(const Plan& plan, const SectionPlan& s) {
  if (s.model.kind == ModelKind::kAudioEncoder && (plan.data.manifest.empty() || plan.data.audio_token_id < 0)) {
    return Status::FailedPrecondition(
        fmt::format("section '{}': an audio encoder reads the audio clips of a JSONL manifest (the built-in datasets "
                    "and corpora carry none); set [data] manifest and audio_token_id (docs/data.md, \"## Audio\")",
                    s.name));
  }
  if (s.model.kind == ModelKind::kVit) {
    if (const Status native = CheckNativeResolution(plan.data, s.model, "section '" + s.name + "'"); !native.ok()) {
      return Status::FailedPrecondition(native.message());
    }
  }
  if (MropeOf(s.model)) {
    if (const SectionPlan* vision = MropeVisionSection(plan, s)) {
      if (auto grid = MropeImageGrid(vision->model); !grid.ok()) {
        return Status::FailedPrecondition(fmt::format("section '{}' (M-RoPE) reads images from section '{}': {}",
                                                      s.name, vision->name, grid.status().message()));
      }
    }
  }
  return Status::Ok();
}

Status CheckTensorParallelRuns(const SectionPlan& s, const RuntimeSupport& support) {
  if (s.config.tp == 1 || s.fused()) return Status::Ok();  // a fused section: its components, one by one
  if (!(IsDecoder(s) ? support.tensor_parallel_decoder : support.tensor_parallel_encoder)) {
    return Unsupported(s, fmt::format("TP = {} on a {}", s.config.tp, ModelKindName(s.model.kind)),
                       IsDecoder(s) ? "tensor_parallel_decoder" : "tensor_parallel_encoder");
  }
  if (const Status split = CheckTensorParallelSplit(s.model, s.config.tp); !split.ok()) {
    return Status(split.code(), fmt::format("section '{}': {} (set the section's tp in the spec or --pin {}.tp=1)",
                                            s.name, split.message(), s.name));
  }
  return Status::Ok();
}

Status CheckPipelineRuns(const SectionPlan& s, const RuntimeSupport& support) {
  if (s.config.pp == 1) return Status::Ok();
  if (s.fused()) {
    if (!support.pipeline_parallel_fused) {
      return Unsupported(s, fmt::format("a fused section at PP = {}", s.config.pp), "pipeline_parallel_fused");
    }
    if (const std::string why = FusedPipelineRefusal(s); !why.empty()) return Status::FailedPrecondition(why);
    return Status::Ok();
  }
  if (!IsDecoder(s) || !support.pipeline_parallel_decoder) {
    if (IsDecoder(s)) return Unsupported(s, fmt::format("PP = {}", s.config.pp), "pipeline_parallel_decoder");
    if (!support.pipeline_parallel_encoder) {
      return Status::FailedPrecondition(
          fmt::format("section '{}': the runtime pipelines decoder sections only (plan has pp {}); recompile with "
                      "--pin {}.pp=1",
                      s.name, s.config.pp, s.name));
    }
  }
  if (s.config.pp > s.model.layers) {
    return Status::InvalidArgument(fmt::format("section '{}': pp {} is more than its {} layers (set pp <= {})", s.name,
                                               s.config.pp, s.model.layers, s.model.layers));
  }
  return Status::Ok();
}

std::string FusedPipelineReason(const SectionPlan& fused) {
  const int pp = fused.config.pp;
  if (pp <= 1) return "";
  int trained = 0, frozen = 0;
  for (const auto& c : fused.components) {
    if (!IsDecoder(c)) continue;
    (c.mode == SectionMode::kTrain ? trained : frozen) += 1;
    if (!RunsOnEverySample(c)) {
      return fmt::format(
          "fused section '{}': decoder '{}' runs on some samples only (activation '{}'); a pipelined fused section "
          "needs its decoders on every sample",
          fused.name, c.name, c.activation);
    }
    if (c.model.layers < pp) {
      return fmt::format("fused section '{}': pp {} is more than decoder '{}''s {} layers", fused.name, pp, c.name,
                         c.model.layers);
    }
    bool feeds_another = false;
    for (const auto& e : fused.component_edges) feeds_another = feeds_another || e.from == c.name;
    if (c.mode == SectionMode::kTrain && feeds_another) {
      return fmt::format(
          "fused section '{}': training decoder '{}' feeds another component; with pp {} the runtime pipelines a "
          "fused section whose trained decoder is its last",
          fused.name, c.name, pp);
    }
  }
  if (trained != 1 || frozen > 1) {
    return fmt::format(
        "fused section '{}': {} training and {} forward-only decoder(s); with pp {} the runtime pipelines one "
        "training decoder, fed by encoders, projectors and at most one forward-only teacher",
        fused.name, trained, frozen, pp);
  }
  return "";
}

std::string FusedPipelineRefusal(const SectionPlan& fused) {
  const std::string why = FusedPipelineReason(fused);
  if (why.empty()) return "";
  return why +
         " (recompile with --grouping sectioned, or without --runtime-support: the planner emits only what this "
         "runtime runs)";
}

std::string ContextParallelSplitError(int64_t seq_len, int cp_size) {
  if (cp_size < 1) return "context parallelism needs cp >= 1, got " + std::to_string(cp_size);
  if (cp_size == 1) return "";
  if (seq_len % (2 * cp_size) != 0) {
    return "a sequence of " + std::to_string(seq_len) +
           " tokens does not split into 2*cp = " + std::to_string(2 * cp_size) +
           " equal chunks (context parallelism's load-balanced causal split)";
  }
  return "";
}

Status CheckContextParallelRuns(const Plan& plan, const SectionPlan& s, const RuntimeSupport& support) {
  const int cp = s.config.cp;
  if (cp == 1) return Status::Ok();
  if (s.fused()) {
    // docs/fused_context_parallel.md: decoder CP inside, encoders whole on
    // every CP rank; not with PP (compiler/compile.cc FusedPlanBlocker states
    // the same for the planner). Each decoder component is held to the
    // decoder rules below (CheckPlanRuns).
    if (!support.context_parallel_fused) {
      return Unsupported(s, fmt::format("a fused section at CP = {}", cp), "context_parallel_fused");
    }
    if (s.config.pp > 1 && !support.context_parallel_with_pipeline) {
      return Status::FailedPrecondition(fmt::format(
          "fused section '{}': the runtime does not combine context and pipeline parallelism (plan has cp {} x pp "
          "{}; docs/fused_context_parallel.md); recompile with --grouping sectioned",
          s.name, cp, s.config.pp));
    }
    return Status::Ok();
  }
  const bool vit = s.model.kind == ModelKind::kVit;
  if (!vit && !IsDecoder(s)) {
    return Status::FailedPrecondition(fmt::format(
        "section '{}': the runtime runs context parallelism for decoder and ViT sections (the {} has cp {}); "
        "recompile with --pin {}.cp=1 or let the planner choose",
        s.name, ModelKindName(s.model.kind), cp, s.name));
  }
  if (!(vit ? support.context_parallel_encoder : support.context_parallel_decoder)) {
    return Unsupported(s, fmt::format("CP = {} on a {}", cp, ModelKindName(s.model.kind)),
                       vit ? "context_parallel_encoder" : "context_parallel_decoder");
  }
  if (s.config.pp > 1 && !support.context_parallel_with_pipeline) {
    return Status::FailedPrecondition(fmt::format(
        "section '{}': the runtime does not combine context and pipeline parallelism (plan has cp {} x pp {}; "
        "docs/context_parallel.md); recompile with --pin {}.pp=1 or --pin {}.cp=1",
        s.name, cp, s.config.pp, s.name, s.name));
  }
  if (vit) return Status::Ok();
  if (const std::string error = ContextParallelSplitError(plan.data.seq_len, cp); !error.empty()) {
    return Status::InvalidArgument(
        fmt::format("section '{}': {} (data.seq_len {}); choose a cp with 2*cp dividing the sequence, or --pin {}.cp=1",
                    s.name, error, plan.data.seq_len, s.name));
  }
  if (s.mode == SectionMode::kTrain && RouterAuxLossCoef(s.model) > 0) {
    return Status::FailedPrecondition(fmt::format(
        "section '{}': the MoE load-balancing term is a per-sample statistic over all of a sample's tokens, and "
        "context parallelism (cp {}) gives each rank a part of them; set router_aux_loss_coef = 0 or --pin {}.cp=1",
        s.name, cp, s.name));
  }
  if (s.config.ep > 1) {
    return Status::FailedPrecondition(fmt::format(
        "section '{}': the runtime does not combine context and expert parallelism (plan has cp {} x ep {}); "
        "recompile with --pin {}.cp=1",
        s.name, cp, s.config.ep, s.name));
  }
  return Status::Ok();
}

Status CheckExpertParallelRuns(const SectionPlan& s, const RuntimeSupport& support) {
  if (s.config.ep == 1) return Status::Ok();
  if (s.fused() || !IsDecoder(s) || s.model.experts <= 0) {
    return Status::FailedPrecondition(
        fmt::format("section '{}': expert parallelism is for MoE decoder sections (plan has ep {}; "
                    "docs/moe.md); set its ep to 1 in plan.json, or recompile the spec",
                    s.name, s.config.ep));
  }
  if (!support.expert_parallel) return Unsupported(s, fmt::format("EP = {}", s.config.ep), "expert_parallel");
  if (const Status split = CheckExpertParallelSplit(s.model, s.config.ep); !split.ok()) {
    return Status(split.code(), fmt::format("section '{}': {} (set its ep to 1 in plan.json, or recompile the spec)",
                                            s.name, split.message()));
  }
  return Status::Ok();
}

Status CheckTrainingFeaturesRun(const SectionPlan& s, const RuntimeSupport& support) {
  const ParallelConfig& c = s.config;
  if (c.dp > 1 && !support.data_parallel) return Unsupported(s, "DP", "data_parallel");
  if (c.micro_batch > 1 && !support.micro_batching) return Unsupported(s, "micro-batching", "micro_batching");
  if (s.mode == SectionMode::kTrain && c.zero_stage >= 1 && c.dp > 1 && !support.zero1_optimizer_sharding) {
    return Unsupported(s, "ZeRO-1", "zero1_optimizer_sharding");
  }
  if (c.recompute_granularity() != RecomputeGranularity::kNone && !support.activation_recompute) {
    return Unsupported(s, "activation recomputation", "activation_recompute");
  }
  if (s.model.experts > 0 && !support.mixture_of_experts) return Unsupported(s, "MoE layers", "mixture_of_experts");
  return Status::Ok();
}

namespace {

// CheckRunAheadRuns for section `s` of `plan`.
Status RunAheadRuns(const Plan& plan, const SectionPlan& s, const RuntimeSupport& support) {
  if (s.run_ahead <= 0) return Status::Ok();
  const bool model_parallel = s.config.tp > 1 || s.config.pp > 1 || s.config.cp > 1;
  std::string why;
  if (!support.run_ahead) {
    why = "this runtime does not run ahead (plan/runtime_support.h: run_ahead = false)";
  } else if (s.mode != SectionMode::kForward || s.fused()) {
    why = "only a forward-only section that is not fused runs ahead";
  } else if (!FeedsAnother(plan, s)) {
    why = "it feeds no other section: nothing waits for its rows";
  } else if (s.config.ep > 1) {
    why = fmt::format("with EP = {} a spool hit would skip an all-to-all its EP peers wait for", s.config.ep);
  } else if (model_parallel &&
             std::any_of(plan.edges.begin(), plan.edges.end(), [&](const EdgePlan& e) { return e.to == s.name; })) {
    why = fmt::format(
        "with TP = {} PP = {} CP = {} the runtime runs ahead only a section without upstream sections (its "
        "replica computes the rows its spool lacks from the samples alone)",
        s.config.tp, s.config.pp, s.config.cp);
  } else if ((s.config.tp > 1 || s.config.pp > 1) && !support.run_ahead_model_parallel) {
    why = "this runtime runs ahead no TP or PP section (plan/runtime_support.h: run_ahead_model_parallel = false)";
  } else if (s.config.cp > 1 && !support.run_ahead_context_parallel) {
    why = "this runtime runs ahead no CP section (plan/runtime_support.h: run_ahead_context_parallel = false)";
  }
  if (why.empty()) return Status::Ok();
  return Status::FailedPrecondition(fmt::format(
      "section '{}': run_ahead = {} but {}; recompile without `run_ahead` for it (the planner only sets it where "
      "the runtime runs it) or set run_ahead = 0 in plan.json",
      s.name, s.run_ahead, why));
}

}  // namespace

Status CheckRunAheadRuns(const Plan& plan, const RuntimeSupport& support) {
  for (const auto& s : plan.sections) MAESTRO_RETURN_IF_ERROR(RunAheadRuns(plan, s, support));
  return Status::Ok();
}

Status CheckPlanRuns(const Plan& plan, const RuntimeSupport& support, std::string* refused_section) {
  const auto refused = [&](const SectionPlan& s, Status status) {
    if (refused_section != nullptr) *refused_section = s.name;
    return status;
  };
  const Plan expanded = ExpandFusedSections(plan);
  for (const SectionPlan& s : plan.sections) {
    if (!s.fused()) {
      if (Status runs = CheckSectionRuns(plan, s, support); !runs.ok()) return refused(s, runs);
      continue;
    }
    for (Status runs : {CheckPipelineRuns(s, support), CheckContextParallelRuns(plan, s, support),
                        CheckExpertParallelRuns(s, support)}) {
      if (!runs.ok()) return refused(s, runs);
    }
    for (const SectionPlan& component : s.components) {
      const Status runs = CheckSectionRuns(expanded, AsFusedComponent(component, s), support);
      if (!runs.ok()) return refused(component, runs.WithContext(fmt::format("fused section '{}'", s.name)));
    }
  }
  for (const SectionPlan& s : plan.sections) {
    if (Status runs = RunAheadRuns(plan, s, support); !runs.ok()) return refused(s, runs);
  }
  return Status::Ok();
}

}  // namespace maestro::plan
