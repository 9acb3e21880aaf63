// SPDX-License-Identifier: Apache-2.0
#include "compiler/monolithic.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "base/units.h"
#include "compiler/config_text.h"
#include "compiler/memory_model.h"
#include "compiler/planner.h"

namespace maestro::compiler {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The configuration section `s` runs under when the monolithic trainer's is
// `c`. The pipeline stages partition the LLM's (or the student's and the
// teacher's) decoder layers; an encoder is a prefix module whose output LLM
// layer 0 needs, so it runs whole on pipeline stage 0 (Megatron-style MLLM
// trainers place it there), at the shared TP degree when the runtime can
// split it, else whole on every rank of its TP group; a projector runs
// whole.
plan::ParallelConfig SharedConfigOf(const SectionWork& s, const plan::ParallelConfig& c, const PlannerOptions& o) {
  plan::ParallelConfig sc = c;
  if (s.model.experts == 0 || s.model.experts % std::max(c.ep, 1) != 0) sc.ep = 1;  // EP splits a MoE's experts only
  if (s.model.kind == plan::ModelKind::kDecoder) {
    if (o.allow_planner_only) return sc;
    plan::ParallelConfig probe = c;
    probe.cp = 1;
    probe.set_recompute_granularity(plan::RecomputeGranularity::kNone);
    if (!ConfigOnlyFeatures(s.model, probe, o.support).empty()) {
      sc.tp = 1;
      sc.pp = 1;
    }
    return sc;
  }
  sc.pp = 1;
  sc.cp = 1;  // images and audio clips are not split over the LLM's context-parallel ranks
  // An encoder or projector the LLM's TP does not divide runs whole on every
  // TP rank (as a fused section's runner does).
  if (sc.tp > 1 && !TpSplitsHeads(s.model, sc.tp)) {
    sc.tp = 1;
    sc.set_recompute_granularity(plan::RecomputeGranularity::kNone);  // no attention, nothing worth recomputing
    return sc;
  }
  plan::ParallelConfig probe = sc;
  probe.cp = 1;
  probe.set_recompute_granularity(plan::RecomputeGranularity::kNone);
  if (!o.allow_planner_only && !PlannerOnlyFeatures(s.model, probe, o.support).empty()) sc.tp = 1;
  return sc;
}

// The expected largest count of active samples over `dp` replicas of `n`
// samples each, a share `p` active: Binomial(n, p), its expected maximum
// ~ n p + sqrt(n p (1 - p) * 2 ln dp).
double BusiestReplica(double n, double p, int dp) {
  if (p >= 1.0) return n;
  return std::min(n, n * p + std::sqrt(n * p * (1 - p) * 2.0 * std::log(std::max(1.0, double(dp)))));
}

// One replica of the shared configuration `c` on the GPUs `d`: every
// section's cost (the busiest replica's samples when fx.dp_straggler), the
// memory of all sections per GPU, the time of one micro-batch on pipeline
// stage 0 and the step. `planner_only` (when not null) gets the sections'
// features the runtime lacks.
struct ReplicaStep {
  std::vector<SectionCost> sections;
  MemoryBreakdown memory;
  double stage0_seconds = 0;
  double step_seconds = 0;
  bool fits = true;
};

ReplicaStep EvaluateReplica(const CostModel& model, const Workload& w, const MonolithicDevice& d,
                            const plan::ParallelConfig& c, const PlannerOptions& o, const MonolithicEffects& fx,
                            double per_replica, double microbatches, std::string* planner_only) {
  ReplicaStep out;
  const DeviceType& dev = model.devices()[static_cast<size_t>(d.device)];
  MemoryBreakdown& memory = out.memory;
  double on_stage0 = 0, split = 0, sync = 0;
  for (const auto& s : w.sections) {
    SectionWork sw = s;
    sw.device = d.device;
    // One process runs every section of a micro-batch, forward then backward
    // through all of them (the reference's autograd), before the next: no
    // section keeps another micro-batch's graph or rows (memory_model.h).
    sw.sink = true;
    const plan::ParallelConfig sc_config = SharedConfigOf(s, c, o);
    const double p = s.active_fraction;
    // Synchronous DP waits for the replica that drew the most active
    // samples (dp_straggler); the sectioned plan's scheduler spreads
    // active samples evenly instead.
    const double busiest = fx.dp_straggler ? BusiestReplica(per_replica, p, c.dp) : per_replica * p;
    SectionCost sc = model.EvaluateWith(sw, sc_config, microbatches, busiest / microbatches);
    double stage = sc.stage_seconds;
    if (!fx.encoder_tp && IsEncoder(s.model) && c.tp * c.cp > 1) {
      // Ideal: its single-GPU time spread over the TP x CP group.
      plan::ParallelConfig one = sc_config;
      one.tp = 1;
      one.cp = 1;
      stage = model.EvaluateWith(sw, one, microbatches, busiest / microbatches).stage_seconds / (c.tp * c.cp);
    }
    // Memory: the fullest micro-batch (every sample of it active), not
    // the mean: a trainer that sizes for the mean runs out of memory on
    // the micro-batch that drew an image for every sample.
    const double fullest = std::min<double>(c.micro_batch, per_replica);
    MemoryBreakdown mem = model.EvaluateWith(sw, sc_config, microbatches, fullest).memory;
    // An encoder whole on every CP rank has its gradients summed over DP x
    // CP with the decoders' (the runtime's fused section syncs every
    // parameter in one bucketed pass: docs/fused_context_parallel.md,
    // docs/gradient_sync.md), so it holds that sync's transient, as a
    // section at CP > 1 does. Measured: tests/runtime/memory_run_test.cc
    // FusedSectionAtCp2...
    if (s.trains() && c.cp > 1 && sc_config.cp == 1) {
      mem.activations = std::max(mem.activations, GradientSyncBytes(mem.gradients, c, dev.cpu));
    }
    if (!fx.colocated_memory && mem.total() > dev.memory_bytes) out.fits = false;
    memory.weights += mem.weights;
    memory.gradients += mem.gradients;
    memory.optimizer += mem.optimizer;
    memory.activations += mem.activations;
    memory.reserved = std::max(memory.reserved, mem.reserved);
    sc.memory = mem;
    (sc_config.pp < c.pp ? on_stage0 : split) += stage;
    if (s.trains()) sync += sc.dp_sync_seconds + sc.optimizer_seconds;
    const std::string f = PlannerOnlyFeatures(s.model, sc_config, o.support);
    if (!f.empty() && planner_only) *planner_only += (planner_only->empty() ? "" : "; ") + s.name + ": " + f;
    out.sections.push_back(std::move(sc));
  }
  if (fx.colocated_memory && memory.total() > dev.memory_bytes) out.fits = false;
  // 1F1B: (micro-batches + PP - 1) stage times at the pace of the slowest
  // stage, stage 0 when it also runs the encoders (stage0_bottleneck);
  // without the effect the encoders' work would be spread over the stages.
  out.stage0_seconds = on_stage0 + split;
  const double pace = fx.stage0_bottleneck ? out.stage0_seconds : on_stage0 / c.pp + split;
  out.step_seconds = (microbatches + c.pp - 1) * pace + sync;
  return out;
}

}  // namespace

MonolithicPlan EvaluateMonolithic(const CostModel& model, const Workload& w, const std::vector<MonolithicDevice>& on,
                                  const plan::ParallelConfig& c, const PlannerOptions& o, const MonolithicEffects& fx) {
  MonolithicPlan out;
  out.config = c;
  out.devices = on;
  const int mp = c.tp * c.pp * c.cp;
  for (const MonolithicDevice& d : on) {
    out.gpus += d.gpus;
    out.peak_flops += d.gpus * model.devices()[static_cast<size_t>(d.device)].peak_flops;
    if (mp <= 0 || d.gpus % mp != 0) {
      out.why_not = fmt::format("TP x PP x CP = {} does not divide the {} GPUs of type '{}'", mp, d.gpus,
                                model.devices()[static_cast<size_t>(d.device)].name);
      return out;
    }
  }
  if (on.empty() || c.dp * mp != out.gpus) {
    out.why_not = fmt::format("DP {} x {} is not the {} GPUs", c.dp, mp, out.gpus);
    return out;
  }
  const double B = static_cast<double>(model.global_batch());
  const double per_replica = std::ceil(B / c.dp - 1e-9);
  const double microbatches = std::max(1.0, std::ceil(per_replica / c.micro_batch - 1e-9));
  std::string only;
  bool fits = true;
  double slowest = -1, rate = 0;  // rate: samples/s if each type ran at its own pace
  for (const MonolithicDevice& d : on) {
    // The planner-only features are those of the first type's replica.
    ReplicaStep r = EvaluateReplica(model, w, d, c, o, fx, per_replica, microbatches, slowest < 0 ? &only : nullptr);
    fits = fits && r.fits;
    rate += c.dp * (static_cast<double>(d.gpus) / out.gpus) * per_replica / r.step_seconds;
    if (r.memory.total() > out.memory.total()) out.memory = r.memory;
    if (r.step_seconds > slowest) {
      slowest = r.step_seconds;
      out.sections = std::move(r.sections);
      out.stage0_seconds = r.stage0_seconds;
    }
  }
  out.planner_only = only;
  // gpu_type_lockstep: every replica gets the same samples, so the slowest
  // type paces the step; without it, samples in proportion to speed.
  out.step_seconds = fx.gpu_type_lockstep || on.size() < 2 ? slowest : B / rate;
  out.throughput = out.step_seconds > 0 ? B / out.step_seconds : 0;
  out.found = fits;
  if (!fits) out.why_not = fmt::format("needs {} GiB per GPU", GiBText(out.memory.total()));
  return out;
}

namespace {

// Can every section run under the shared configuration `c`: the runtime
// runs it (unless o.allow_planner_only: CP and recomputation only where the
// runtime has them, TP and PP runnable for at least one section), the PP stages split every decoder's
// layers evenly (as CandidateConfigs does), TP splits the heads of every
// section it splits and CP the tokens?
bool SharedConfigRuns(const Workload& w, const plan::ParallelConfig& c, const PlannerOptions& o) {
  // Every option the runtime has (docs/monolithic.md): CP and recomputation
  // when its table (or --runtime-support) has them.
  // CP splits the decoders' sequences only (SharedConfigOf: encoders run whole on each CP rank).
  if (!o.allow_planner_only && c.cp > 1 && !o.support.context_parallel_decoder) return false;
  if (!o.allow_planner_only && c.cp > 1 && c.pp > 1 && !o.support.context_parallel_with_pipeline) return false;
  if (!o.allow_planner_only && c.recompute_granularity() != plan::RecomputeGranularity::kNone &&
      !o.support.activation_recompute) {
    return false;
  }
  if (!o.allow_planner_only) {
    bool any = false;  // TP/PP must be runnable for at least the decoders
    for (const auto& s : w.sections) any = any || ConfigOnlyFeatures(s.model, c, o.support).empty();
    if (!any) return false;
  }
  bool valid = true;
  for (const auto& s : w.sections) {
    const plan::ModelDesc& m = s.model;
    if (m.kind == plan::ModelKind::kProjector) continue;
    if (m.kind == plan::ModelKind::kDecoder && m.layers % c.pp != 0) valid = false;
    if (m.kind != plan::ModelKind::kDecoder && SharedConfigOf(s, c, o).tp == 1) continue;  // replicated
    if (!TpSplitsHeads(m, c.tp)) valid = false;
    if (c.cp > 1 && s.tokens % (2 * c.cp) != 0) valid = false;
  }
  return valid;
}

// The GPUs of `on` that a configuration of `mp` = TP x PP x CP GPUs a
// replica runs on: all of them (DP = their count / mp), or, on one GPU type
// whose GPUs are more than the global batch's replicas can fill (DP above
// the global batch: 100,000 nodes of 1,024 GPUs, issue #41), the most that
// DP <= global batch fills in whole nodes or a divisor of one (any count
// where sections share nodes), as a single-model trainer leaves the rest
// idle; {} when `mp` does not divide them or fills none.
std::vector<MonolithicDevice> FillableGpus(const CostModel& model, const std::vector<MonolithicDevice>& on, int mp) {
  int gpus = 0;
  for (const MonolithicDevice& d : on) gpus += d.gpus;
  const int64_t batch = std::max<int64_t>(1, model.global_batch());
  if (gpus % mp == 0 && gpus / mp <= batch) return on;
  if (on.size() != 1 || gpus / mp < batch) return {};  // several types run in lockstep on all their GPUs
  const DeviceType& dev = model.devices()[static_cast<size_t>(on.front().device)];
  const int gpn = std::max(1, dev.gpus_per_node);
  for (int64_t dp = batch; dp >= 1; --dp) {
    const int64_t g = dp * mp;
    if (g > gpus) continue;
    if (dev.shared_node || dev.packs_nodes || g % gpn == 0 || gpn % g == 0) {
      return {MonolithicDevice{on.front().device, static_cast<int>(g)}};
    }
  }
  return {};
}

// The best configuration on `on` under `fx` (found = false: none fits;
// least_memory gets the smallest per-GPU memory seen).
MonolithicPlan SearchMonolithic(const CostModel& model, const Workload& w, const std::vector<MonolithicDevice>& on,
                                const PlannerOptions& o, const MonolithicEffects& fx, double* least_memory,
                                const std::function<bool(const plan::ParallelConfig&)>& admit = nullptr) {
  MonolithicPlan best;
  int gpus = 0, gpn = std::numeric_limits<int>::max();
  for (const MonolithicDevice& d : on) {
    gpus += d.gpus;
    gpn = std::min(gpn, model.devices()[static_cast<size_t>(d.device)].gpus_per_node);
  }
  best.gpus = gpus;
  best.devices = on;
  int64_t min_layers = std::numeric_limits<int64_t>::max();
  for (const auto& s : w.sections) {  // the decoders' layers make the pipeline stages
    if (s.model.kind == plan::ModelKind::kDecoder) min_layers = std::min(min_layers, s.model.layers);
  }
  if (min_layers == std::numeric_limits<int64_t>::max()) min_layers = 1;
  int max_ep = 1;  // the most experts of a section, when EP may be used
  for (const auto& s : w.sections) {
    if (o.allow_planner_only || o.support.expert_parallel)
      max_ep = std::max<int>(max_ep, static_cast<int>(s.model.experts));
  }
  for (int tp = 1; tp <= gpn; tp *= 2) {
    for (int pp = 1; pp <= std::min<int64_t>(min_layers, o.max_pp); ++pp) {
      for (int cp = 1; cp <= o.max_cp; cp *= 2) {
        const int mp = tp * pp * cp;
        const std::vector<MonolithicDevice> used = FillableGpus(model, on, mp);
        if (used.empty()) continue;
        int held = 0;
        for (const MonolithicDevice& d : used) held += d.gpus;
        const int dp = held / mp;
        for (int mb : o.micro_batches) {
          if (mb > 1 && mb * dp > model.global_batch()) break;
          // Activation recomputation of every training component's blocks:
          // none, selective or full (the same choice the sectioned planner has).
          for (auto rc : {plan::RecomputeGranularity::kNone, plan::RecomputeGranularity::kSelective,
                          plan::RecomputeGranularity::kFull}) {
            // EP (docs/moe.md) out of the DP ranks, when a section has experts
            // and the runtime has it (or planner-only is allowed).
            for (int ep = 1; ep <= std::min(dp, max_ep); ep *= 2) {
              if (dp % ep != 0) break;
              plan::ParallelConfig c = ConfigOf(tp, pp, cp, dp, mb, /*recompute=*/false, o.support);
              c.set_recompute_granularity(rc);
              c.ep = ep;
              if (!SharedConfigRuns(w, c, o)) continue;
              if (admit && !admit(c)) continue;
              MonolithicPlan cand = EvaluateMonolithic(model, w, used, c, o, fx);
              if (least_memory) *least_memory = std::min(*least_memory, cand.memory.total());
              if (!cand.found) continue;
              if (!best.found || cand.throughput > best.throughput) best = std::move(cand);
            }
          }
        }
      }
    }
  }
  return best;
}

std::string DevicesText(const CostModel& model, const std::vector<MonolithicDevice>& on) {
  std::string t;
  for (const MonolithicDevice& d : on) {
    t += fmt::format("{}{} {}", t.empty() ? "" : " + ", d.gpus, model.devices()[static_cast<size_t>(d.device)].name);
  }
  return t;
}

}  // namespace

MonolithicPlan PlanMonolithicOn(const CostModel& model, const Workload& w, const std::vector<MonolithicDevice>& on,
                                const PlannerOptions& o) {
  double least_memory = kInf;
  MonolithicPlan best = SearchMonolithic(model, w, on, o, MonolithicEffects{}, &least_memory);
  if (!best.found) {
    const DeviceType& dev = model.devices()[static_cast<size_t>(on.empty() ? 0 : on.front().device)];
    best.why_not =
        fmt::format("no single configuration fits all sections on one '{}' GPU (least memory {} GiB of {} GiB)",
                    dev.name, GiBText(least_memory), GiBText(dev.memory_bytes));
    return best;
  }
  // The terms: the same configuration without one effect at a time;
  // colocated_memory: the best configuration if each section had the
  // memory to itself.
  const auto without = [&](auto off) {
    MonolithicEffects fx;
    off(fx);
    return EvaluateMonolithic(model, w, best.devices, best.config, o, fx).step_seconds;
  };
  bool encoders = false, data_dependent = false;
  for (const auto& s : w.sections) {
    encoders = encoders || IsEncoder(s.model);
    data_dependent = data_dependent || s.active_fraction < 1.0;
  }
  const plan::ParallelConfig& c = best.config;
  if (encoders && c.pp > 1) {
    best.terms.push_back({"stage0_bottleneck",
                          best.step_seconds - without([](MonolithicEffects& f) { f.stage0_bottleneck = false; }),
                          fmt::format("the encoders run whole on pipeline stage 0 ({:.4g} s per micro-batch), which "
                                      "paces all {} stages",
                                      best.stage0_seconds, c.pp)});
  }
  if (encoders && c.tp * c.cp > 1) {
    best.terms.push_back(
        {"encoder_tp", best.step_seconds - without([](MonolithicEffects& f) { f.encoder_tp = false; }),
         fmt::format("the encoders run at the LLM's TP {}{}: {}", c.tp,
                     c.cp > 1 ? fmt::format(", whole on each of its {} context-parallel ranks", c.cp) : "",
                     o.allow_planner_only || o.support.tensor_parallel_encoder
                         ? "narrow GEMMs and per-layer all-reduces"
                         : "whole on every TP rank (the runtime cannot split them)")});
  }
  if (data_dependent && c.dp > 1) {
    best.terms.push_back({"dp_straggler",
                          best.step_seconds - without([](MonolithicEffects& f) { f.dp_straggler = false; }),
                          fmt::format("the data order dealt round-robin over {} DP replicas; the step waits for the "
                                      "one that drew the most samples of each modality",
                                      c.dp)});
  }
  {
    MonolithicEffects fx;
    fx.colocated_memory = false;
    const MonolithicPlan alone = SearchMonolithic(model, w, on, o, fx, nullptr);
    if (w.sections.size() > 1 && alone.found) {
      const plan::ParallelConfig& a = alone.config;
      best.terms.push_back(
          {"colocated_memory", best.step_seconds - alone.step_seconds,
           a.tp == c.tp && a.pp == c.pp && a.micro_batch == c.micro_batch &&
                   a.recompute_granularity() == c.recompute_granularity()
               ? fmt::format("all sections' states share each GPU ({} GiB per GPU); the same configuration would "
                             "win without that",
                             GiBText(best.memory.total()))
               : fmt::format("all sections' states share each GPU ({} GiB per GPU): without that, TP {} PP {} "
                             "micro-batch {}{} would win",
                             GiBText(best.memory.total()), a.tp, a.pp, a.micro_batch, RecomputeText(a))});
    }
  }
  if (on.size() > 1) {
    best.terms.push_back({"gpu_type_lockstep",
                          best.step_seconds - without([](MonolithicEffects& f) { f.gpu_type_lockstep = false; }),
                          fmt::format("one configuration on {} GPUs gives every DP replica the same samples: the "
                                      "slowest type paces the step",
                                      DevicesText(model, on))});
  }
  return best;
}

MonolithicPlan PlanMonolithic(const CostModel& model, const Workload& w, int device, const PlannerOptions& o) {
  const DeviceType& dev = model.devices()[static_cast<size_t>(device)];
  const int budget = dev.shared_node ? dev.gpus_per_node : dev.nodes * dev.gpus_per_node;
  bool several_types = false;
  for (const auto& s : w.sections) several_types = several_types || s.device != w.sections.front().device;
  if (several_types) {
    // The fair comparison: the nodes the sectioned plan holds of each type
    // (the refinement by simulation keeps every section's nodes).
    const PlanOutcome held = PlanSections(model, w, o);
    if (held.ok()) {
      std::vector<MonolithicDevice> all;
      std::vector<std::vector<MonolithicDevice>> choices;
      for (size_t d = 0; d < held.assignment.nodes_per_device.size(); ++d) {
        const int nodes = held.assignment.nodes_per_device[d];
        if (nodes <= 0) continue;
        const DeviceType& t = model.devices()[d];
        const MonolithicDevice md{static_cast<int>(d), t.shared_node ? nodes : nodes * t.gpus_per_node};
        all.push_back(md);
        choices.push_back({md});
      }
      if (all.size() > 1) choices.push_back(all);
      MonolithicPlan best;
      std::string tried;
      for (const auto& on : choices) {
        MonolithicPlan m = PlanMonolithicOn(model, w, on, o);
        tried += fmt::format("{}{}: {}", tried.empty() ? "" : ", ", DevicesText(model, on),
                             m.found ? fmt::format("{:.4g} s/step", m.step_seconds) : std::string("does not fit"));
        if (m.found && (!best.found || m.throughput > best.throughput)) best = std::move(m);
      }
      if (best.found) {
        best.basis = fmt::format(
            "the GPUs the sectioned plan holds ({}), as one single-model trainer could use them (each type alone, "
            "or all in lockstep): {}",
            DevicesText(model, all), tried);
        return best;
      }
    }
  }
  MonolithicPlan m = PlanMonolithicOn(model, w, {{device, budget}}, o);
  if (!m.found || m.gpus > budget) m.gpus = budget;
  m.basis = m.gpus < budget
                ? fmt::format(
                      "{} of the {} GPUs of '{}' (the budget of the default GPU type; DP at most the "
                      "global batch of {} fills no more at TP x PP x CP = {})",
                      m.gpus, budget, dev.name, model.global_batch(), m.config.tp * m.config.pp * m.config.cp)
                : fmt::format("all {} GPUs of '{}' (the budget of the default GPU type)", budget, dev.name);
  return m;
}

MonolithicPlan PlanMonolithicAdmitting(const CostModel& model, const Workload& w,
                                       const std::vector<MonolithicDevice>& on, const PlannerOptions& o,
                                       const std::function<bool(const plan::ParallelConfig&)>& admit) {
  double least_memory = kInf;
  MonolithicPlan best = SearchMonolithic(model, w, on, o, MonolithicEffects{}, &least_memory, admit);
  if (!best.found) {
    const DeviceType& dev = model.devices()[static_cast<size_t>(on.empty() ? 0 : on.front().device)];
    best.why_not = least_memory < kInf ? fmt::format(
                                             "no configuration the pins allow fits all sections on one '{}' GPU (least "
                                             "memory {} GiB of {} GiB)",
                                             dev.name, GiBText(least_memory), GiBText(dev.memory_bytes))
                                       : fmt::format("no configuration of {} GPU(s) has what the pins ask", best.gpus);
  }
  return best;
}

std::string DescribeMonolithic(const MonolithicPlan& m) {
  std::string t;
  if (!m.basis.empty()) t += "  on " + m.basis + "\n";
  for (const MonolithicTerm& term : m.terms) {
    if (term.seconds <= 0) continue;  // an effect that costs nothing here is not news (the JSON lists every term)
    t += fmt::format("  {}: +{:.4g} s/step ({})\n", term.name, term.seconds, term.why);
  }
  return t;
}
}  // namespace maestro::compiler
