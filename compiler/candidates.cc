// SPDX-License-Identifier: Apache-2.0
#include "compiler/candidates.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "compiler/model.h"
#include "plan/tensor_parallel_split.h"

namespace maestro::compiler {

namespace {

// The GPU counts a section of `dev` may hold that are multiples of `mp`
// (TP x PP x CP) with DP = count / mp at most `max_dp`, ascending: the
// divisors of a node's GPUs, then whole nodes (any count of slots on a
// shared node, any count of GPUs where sections share nodes). Only these:
// the budget can be far larger than the workload can fill (100,000 nodes of
// 1,024 GPUs, issue #41), and listing every count of it cost seconds and
// hundreds of MiB per call.
std::vector<int> GpuCountsFor(const DeviceType& dev, int mp, int max_dp) {
  const int64_t gpn = dev.gpus_per_node;
  const int64_t most = static_cast<int64_t>(mp) * max_dp;
  std::vector<int> out;
  if (dev.shared_node || dev.packs_nodes) {
    const int64_t cap = std::min<int64_t>(
        most, dev.shared_node ? std::min<int64_t>(gpn, dev.nodes) : static_cast<int64_t>(dev.budget_units()));
    for (int64_t g = mp; g <= cap; g += mp) out.push_back(static_cast<int>(g));
    return out;
  }
  for (int64_t g = mp; g < gpn && g <= most; g += mp) {
    if (gpn % g == 0) out.push_back(static_cast<int>(g));
  }
  // Whole nodes whose GPUs mp divides: every (mp / gcd(mp, gpn))-th node.
  const int64_t step = mp / std::gcd(static_cast<int64_t>(mp), gpn);
  for (int64_t k = step; k <= dev.nodes && k * gpn <= most; k += step) out.push_back(static_cast<int>(k * gpn));
  return out;
}

}  // namespace

bool IsEncoder(const plan::ModelDesc& m) {
  return m.kind != plan::ModelKind::kDecoder;
}

bool EdgeDpsAllowed(int from_dp, int to_dp, int fanout, int fanin, const PlannerOptions& options) {
  if (!plan::EdgeDpRuleHolds(from_dp, to_dp, fanout, fanin)) return false;
  if (from_dp % to_dp == 0 || to_dp % from_dp == 0) return true;
  // DpSlots's lcm without its vector: the planner asks this of every pair of
  // two sections' DP options.
  return !options.nested_dp_edges &&
         std::lcm(static_cast<int64_t>(std::max(from_dp, 1)), static_cast<int64_t>(std::max(to_dp, 1))) <= kMostDpSlots;
}

int64_t DpSlots(const std::vector<int>& dps) {
  int64_t l = 1;
  for (int dp : dps) {
    l = std::lcm(l, static_cast<int64_t>(std::max(dp, 1)));
    if (l > kMostDpSlots) return kMostDpSlots + 1;
  }
  return l;
}

bool TpSplitsHeads(const plan::ModelDesc& m, int tp) {
  // The runtime's rule, from its one home (runtime/models/decoder.cc and
  // encoders.cc call it too).
  return plan::CheckTensorParallelSplit(m, tp).ok();
}

plan::ParallelConfig ConfigOf(int tp, int pp, int cp, int dp, int micro_batch, bool recompute,
                              const RuntimeSupport& support) {
  plan::ParallelConfig c;
  c.tp = tp;
  c.pp = pp;
  c.cp = cp;
  c.dp = dp;
  c.micro_batch = micro_batch;
  c.recompute = recompute;
  c.zero_stage = support.zero1_optimizer_sharding ? 1 : 0;
  return c;
}

int MaxUsefulDp(const CostModel& model, const SectionWork& s) {
  const double active = static_cast<double>(model.global_batch()) * s.active_fraction;
  return std::max(1, static_cast<int>(std::ceil(active - 1e-9)));
}

namespace {

// PlannerOnlyFeatures of `m`, its experts counted only when `with_experts`
// (ConfigOnlyFeatures: no copy of the model description, which the
// planner's candidate loops would pay millions of times).
std::string MissingFeatures(const plan::ModelDesc& m, bool with_experts, const plan::ParallelConfig& c,
                            const RuntimeSupport& rs) {
  const int64_t experts = with_experts ? m.experts : 0;
  std::vector<std::string> f;
  const bool enc = IsEncoder(m);
  if (c.tp > 1 && !(enc ? rs.tensor_parallel_encoder : rs.tensor_parallel_decoder)) {
    f.push_back(fmt::format("TP={} on {}", c.tp, plan::ModelKindName(m.kind)));
  }
  if (c.pp > 1 && !(enc ? rs.pipeline_parallel_encoder : rs.pipeline_parallel_decoder)) {
    f.push_back(fmt::format("PP={} on {}", c.pp, plan::ModelKindName(m.kind)));
  }
  // Encoder CP runs in ViT sections (docs/context_parallel_vit.md); the
  // audio encoder's stem is not split yet.
  const bool cp_runs =
      !enc ? rs.context_parallel_decoder : rs.context_parallel_encoder && m.kind != plan::ModelKind::kAudioEncoder;
  if (c.cp > 1 && !cp_runs) {
    f.push_back(fmt::format("CP={} ({})", c.cp,
                            !enc                                       ? "decoder"
                            : m.kind == plan::ModelKind::kAudioEncoder ? "audio_encoder"
                                                                       : "encoder"));
  } else if (c.cp > 1 && c.pp > 1 && !rs.context_parallel_with_pipeline) {
    f.push_back(fmt::format("CP={} with PP={}", c.cp, c.pp));
  }
  // The MoE load-balancing term is per sample over all its tokens; the
  // runtime refuses it at CP > 1 (docs/context_parallel.md).
  if (c.cp > 1 && experts > 0 && ExtraValue(m, "router_aux_loss_coef", 0) > 0) {
    f.push_back(fmt::format("CP={} with the MoE load-balancing loss", c.cp));
  }
  if (c.ep > 1 && !rs.expert_parallel) f.push_back(fmt::format("EP={}", c.ep));
  // The runtime does not combine them yet (plan/runtime_support.h).
  if (c.cp > 1 && c.ep > 1) f.push_back(fmt::format("CP={} with EP={}", c.cp, c.ep));
  if (c.recompute_granularity() != plan::RecomputeGranularity::kNone && !rs.activation_recompute) {
    f.push_back(c.recompute ? "recompute" : "selective recompute");
  }
  if (c.zero_stage >= 1 && c.dp > 1 && !rs.zero1_optimizer_sharding) f.push_back("ZeRO-1");
  if (experts > 0 && !rs.mixture_of_experts) f.push_back("MoE");
  if (c.dp > 1 && !rs.data_parallel) f.push_back("DP");
  if (c.micro_batch > 1 && !rs.micro_batching) f.push_back("micro-batching");
  std::string out;
  for (const auto& x : f) out += (out.empty() ? "" : ", ") + x;
  return out;
}

}  // namespace

std::string ConfigOnlyFeatures(const plan::ModelDesc& m, const plan::ParallelConfig& c, const RuntimeSupport& rs) {
  return MissingFeatures(m, /*with_experts=*/false, c, rs);
}

std::string PlannerOnlyFeatures(const plan::ModelDesc& m, const plan::ParallelConfig& c, const RuntimeSupport& rs) {
  return MissingFeatures(m, /*with_experts=*/true, c, rs);
}

std::vector<plan::ParallelConfig> CandidateConfigs(const CostModel& model, const SectionWork& s,
                                                   const PlannerOptions& o) {
  std::vector<plan::ParallelConfig> out;
  const DeviceType& dev = model.devices()[static_cast<size_t>(s.device)];
  const int gpn = dev.gpus_per_node;
  const plan::ModelDesc& m = s.model;
  const bool projector = m.kind == plan::ModelKind::kProjector;
  const int64_t layers = projector ? 1 : m.layers;

  std::vector<int> tps;
  for (int tp = 1; tp <= gpn; tp *= 2) {
    if (tp > 1 && !TpSplitsHeads(m, tp)) continue;
    tps.push_back(tp);
  }
  std::vector<int> pps;
  for (int pp = 1; pp <= std::min<int64_t>(layers, o.max_pp); ++pp) {
    if (layers % pp == 0) pps.push_back(pp);
  }
  std::vector<int> cps;
  for (int cp = 1; cp <= o.max_cp; cp *= 2) {
    if (cp > 1 && (s.tokens % (2 * cp) != 0 || projector)) continue;
    cps.push_back(cp);
  }
  // No more replicas than samples to give them, nor than the placement slots
  // a plan may have (compile.cc refuses a plan whose DP degrees' lcm passes
  // kMostDpSlots: a section's DP alone is its lcm).
  const int max_dp = static_cast<int>(std::min<int64_t>(MaxUsefulDp(model, s), kMostDpSlots));
  std::vector<int> mbs;
  for (int mb : o.micro_batches) {
    if (mb <= max_dp || mb == 1) mbs.push_back(mb);
  }
  // Activation recomputation, trained sections only: none, selective, full
  // (plan::RecomputeGranularity; a projector has no attention to recompute).
  std::vector<plan::RecomputeGranularity> rcs = {plan::RecomputeGranularity::kNone};
  if (s.trains()) {
    if (!projector) rcs.push_back(plan::RecomputeGranularity::kSelective);
    rcs.push_back(plan::RecomputeGranularity::kFull);
  }

  for (int tp : tps) {
    if (s.pin_tp && tp != s.pin_tp) continue;
    for (int pp : pps) {
      if (s.pin_pp && pp != s.pin_pp) continue;
      for (int cp : cps) {
        if (s.pin_cp && cp != s.pin_cp) continue;
        const int mp = tp * pp * cp;
        for (int g : GpuCountsFor(dev, mp, max_dp)) {
          const int dp = g / mp;
          if (s.pin_dp && dp != s.pin_dp) continue;
          for (int mb : mbs) {
            if (s.pin_micro_batch && mb != s.pin_micro_batch) continue;
            for (plan::RecomputeGranularity rc : rcs) {
              if (s.pin_recompute >= 0 && static_cast<int>(rc) != s.pin_recompute) continue;
              // Expert parallelism (MoE): EP groups carved out of the DP
              // ranks, so ep divides dp and the expert count (docs/moe.md).
              for (int ep = 1; ep <= dp; ep *= 2) {
                if (ep > 1 && (m.experts == 0 || dp % ep != 0 || m.experts % ep != 0)) break;
                if (s.pin_ep && ep != s.pin_ep) continue;
                plan::ParallelConfig c = ConfigOf(tp, pp, cp, dp, mb, /*recompute=*/false, o.support);
                c.set_recompute_granularity(rc);
                c.ep = ep;
                if (!o.allow_planner_only && !ConfigOnlyFeatures(m, c, o.support).empty()) continue;
                out.push_back(c);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace maestro::compiler
