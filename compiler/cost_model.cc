// SPDX-License-Identifier: Apache-2.0
#include "compiler/cost_model.h"

#include <algorithm>
#include <cmath>

#include "compiler/memory_model.h"
#include "compiler/runtime_support.h"
#include "compiler/step_model.h"
#include "plan/model_desc.h"
#include "plan/profile.h"

namespace maestro::compiler {

namespace {

constexpr double kBf16 = 2.0;

double Layers(const plan::ModelDesc& m) {
  return m.kind == plan::ModelKind::kProjector ? 1.0 : static_cast<double>(std::max<int64_t>(m.layers, 1));
}
double Hidden(const plan::ModelDesc& m) {
  return m.kind == plan::ModelKind::kProjector ? static_cast<double>(std::max(m.in_dim, m.out_dim))
                                               : static_cast<double>(m.hidden);
}
double KvWidth(const plan::ModelDesc& m) {
  if (m.kind != plan::ModelKind::kDecoder) return Hidden(m);
  const double hd = m.head_dim > 0 ? static_cast<double>(m.head_dim) : static_cast<double>(m.hidden / m.heads);
  return static_cast<double>(m.kv_heads) * hd;
}

// A section's measured time at `samples` samples per micro-batch on replicas
// of `gpus` GPUs: the curve through the profile's points
// (plan::ProfileCurveAt: piecewise linear, extended by the nearest segment,
// floored outside the points), so a partial micro-batch of a data-dependent
// section costs what its samples cost. seconds = 0: no profile for `gpus`.
struct MeasuredStage {
  double seconds = 0, forward_share = 0, optimizer_seconds = 0;
};
MeasuredStage InterpolateProfiles(const std::vector<ProfileSpec>& profiles, int gpus, double samples) {
  std::vector<const ProfileSpec*> points;
  for (const auto& p : profiles) {
    if (p.gpus == gpus) points.push_back(&p);
  }
  MeasuredStage out;
  if (points.empty() || !(samples > 0)) return out;
  std::sort(points.begin(), points.end(),
            [](const ProfileSpec* a, const ProfileSpec* b) { return a->micro_batch < b->micro_batch; });
  const auto at = [](const ProfileSpec* p, bool forward) { return forward ? p->forward_seconds : p->seconds; };
  const auto line = [&](bool forward) {
    std::vector<std::pair<double, double>> curve;
    for (const ProfileSpec* p : points) curve.push_back({static_cast<double>(p->micro_batch), at(p, forward)});
    return plan::ProfileCurveAt(curve, samples);
  };
  out.seconds = std::max(line(false), 1e-12);
  const bool have_forward =
      std::all_of(points.begin(), points.end(), [](const ProfileSpec* p) { return p->forward_seconds > 0; });
  if (have_forward) out.forward_share = std::clamp(line(true) / out.seconds, 0.0, 1.0);
  for (const ProfileSpec* p : points) out.optimizer_seconds = std::max(out.optimizer_seconds, p->optimizer_seconds);
  return out;
}

// The micro-batch the runtime runs for section `s` under `c`.
PassShape PassShapeOf(const SectionWork& s, const plan::ParallelConfig& c, double samples, const DeviceType& dev) {
  PassShape shape;
  shape.samples = samples;
  shape.tokens_per_sample = static_cast<double>(s.tokens);
  shape.attention_context = static_cast<double>(s.attention_context);
  shape.train = s.trains();
  shape.recompute = c.recompute;
  shape.recompute_attention_core = c.recompute_granularity() == plan::RecomputeGranularity::kSelective;
  shape.lm_loss = s.lm_loss;
  shape.kd_teacher_hidden = s.kd_teacher_hidden;
  shape.kd_sparse_rows = s.kd_sparse_rows;
  shape.teacher_rows_form = s.teacher_rows_form;
  shape.tp = c.tp;
  shape.cp = c.cp;
  shape.pp = c.pp;
  shape.ep = s.model.experts > 0 ? std::max(c.ep, 1) : 1;
  shape.activation_bytes = dev.precision == ParamPrecision::kFp32 ? 4 : 2;
  // AdamW and the .grad accumulation touch the masters: fp32 unless the
  // parameters themselves are bf16 (runtime/section_runner.h, "Device and
  // precision").
  shape.param_bytes = dev.precision == ParamPrecision::kPureBf16 ? 2 : 4;
  // ZeRO-1 steps a flat shard of 1/(DP x CP) (runtime/parallel/distributed_optimizer.h,
  // docs/gradient_sync.md).
  if (c.zero_stage >= 1 && c.dp * c.cp > 1) shape.optimizer_shards = c.dp * c.cp;
  // The kernels this build's runtime runs: the model changes with it.
  shape.fused.gqa_in_sdpa = kRuntimeSupport.gqa_in_sdpa;
  shape.fused.rms_norm = kRuntimeSupport.fused_rms_norm;
  shape.fused.adamw = kRuntimeSupport.fused_adamw;
  return shape;
}

// The modelled compute of one micro-batch on one pipeline stage (no
// communication): the step model from parts when the device has kernel
// tables (compiler/step_model.h), else the efficiency curve.
struct ModelledCompute {
  double stage_seconds = 0, forward_share = 0, optimizer_seconds = 0;
  bool step_model = false;
};
ModelledCompute ModelCompute(const SectionWork& s, const plan::ParallelConfig& c, const DeviceType& dev,
                             double samples_per_mb, double microbatches, double flops_per_sample_run,
                             double teacher_head) {
  ModelledCompute out;
  const bool train = s.trains();
  const double tp = c.tp, pp = c.pp, cp = c.cp;
  const double tokens = static_cast<double>(s.tokens);
  const double h = Hidden(s.model);
  if (dev.kernels && samples_per_mb > 0) {
    PassShape shape = PassShapeOf(s, c, samples_per_mb, dev);
    shape.keep_terms = false;  // only the times are read here
    auto pass = PredictSectionPass(s.model, shape, *dev.kernels);
    if (pass.ok()) {
      const double compute = pass->forward_seconds + pass->backward_seconds;
      out.stage_seconds = compute;
      out.forward_share = compute > 0 ? pass->forward_seconds / compute : 0;
      if (train) {
        out.optimizer_seconds = pass->optimizer_seconds + std::max(0.0, microbatches - 1) * pass->accumulate_seconds;
      }
      out.step_model = true;
      return out;
    }
  }
  const double gemm = samples_per_mb * tokens / cp * h / tp;
  const double width = h / tp;
  const double width_eff = dev.half_efficiency_width > 0 ? width / (width + dev.half_efficiency_width) : 1.0;
  const double eff = dev.mfu * gemm / (gemm + dev.half_efficiency_size) * width_eff;
  // The teacher head is not split by TP (every rank holds it whole).
  out.stage_seconds = samples_per_mb * (flops_per_sample_run / (tp * pp * cp) + teacher_head / (pp * cp)) /
                      (dev.peak_flops * std::max(eff, 1e-6));
  return out;
}

// The profiled GPU count nearest `gpus` (by ratio; the smaller on a tie), 0
// when the section has no profile.
int NearestProfiledGpus(const std::vector<ProfileSpec>& profiles, int gpus) {
  int best = 0;
  double best_distance = 0;
  for (const auto& p : profiles) {
    const double distance = std::abs(std::log(static_cast<double>(p.gpus) / gpus));
    if (best == 0 || distance < best_distance - 1e-12 ||
        (std::abs(distance - best_distance) <= 1e-12 && p.gpus < best)) {
      best = p.gpus;
      best_distance = distance;
    }
  }
  return best;
}

// For a section without a profile at its own GPU count: *stage (the
// modelled compute of one micro-batch on one stage) and out's forward share,
// optimizer step and calibration scaled to the nearest measured count. A
// section measured on this machine at other GPU counts (maestro
// profile; --gpu-counts adds TP degrees) is priced by the model
// scaled to the nearest measured count: the model's ratio between the two
// configurations, the measurement's level. Unscaled, a configuration the
// profile did not cover would be priced on the model's own footing beside
// measured ones (on a CPU 2-2.5x optimistic, docs/e2e.md), and the search
// (the monolithic baseline's too) would pick it for that alone.
void ScaleToNearestProfiledGpus(const SectionWork& s, const plan::ParallelConfig& c, const DeviceType& dev,
                                double samples_per_mb, double microbatches, double flops_per_sample_run,
                                double teacher_head, double* stage, SectionCost* out) {
  const bool train = s.trains();
  const double tp = c.tp, pp = c.pp;
  const int measured_gpus = NearestProfiledGpus(s.profiles, c.tp * c.pp * c.cp);
  if (measured_gpus > 0) {
    const MeasuredStage m0 = InterpolateProfiles(s.profiles, measured_gpus, samples_per_mb);
    plan::ParallelConfig c0 = c;  // how maestro profile measures a GPU count: TP over it
    c0.tp = measured_gpus;
    c0.pp = c0.cp = 1;
    const ModelledCompute mc0 =
        ModelCompute(s, c0, dev, samples_per_mb, microbatches, flops_per_sample_run, teacher_head);
    if (m0.seconds > 0 && mc0.stage_seconds > 0) {
      out->calibration_scale = m0.seconds / mc0.stage_seconds;
      out->calibrated_at_gpus = measured_gpus;
      *stage *= out->calibration_scale;
      if (m0.forward_share > 0) out->forward_share = m0.forward_share;
      // The optimizer steps the parameters this rank holds: the measured
      // step's, per parameter.
      if (train && m0.optimizer_seconds > 0) {
        out->optimizer_seconds = m0.optimizer_seconds * measured_gpus / (tp * pp);
      }
    }
  }
}

// The communication of one micro-batch on one pipeline stage that the
// modelled compute leaves out (a measured profile includes it), added to
// `stage` in this order: TP all-reduces, EP all-to-alls, CP exchanges of K
// and V, PP sends. `gpus`: the section's GPUs (PP sends leave the node past
// one node's worth).
double AddModelParallelTraffic(double stage, const SectionWork& s, const plan::ParallelConfig& c, const DeviceType& dev,
                               double samples_per_mb, int gpus) {
  const bool train = s.trains();
  const double tp = c.tp, pp = c.pp, cp = c.cp;
  const double tokens = static_cast<double>(s.tokens);
  const double h = Hidden(s.model);
  const double layers = Layers(s.model);
  const int gpn = dev.gpus_per_node;
  const double mp_bw = (c.tp * c.cp <= gpn) ? dev.intra_bytes_per_s : dev.inter_bytes_per_s;
  const double act_bytes = samples_per_mb * tokens / cp * h * kBf16;
  if (c.tp > 1) {
    const double allreduces = (train ? 4.0 : 2.0) + (train && c.recompute ? 2.0 : 0.0);
    stage += allreduces * layers / pp * 2.0 * (tp - 1) / tp * act_bytes / mp_bw;
  }
  if (c.ep > 1 && s.model.experts > 0) {
    // Expert parallelism: every routed slot's row (k per token) goes to its
    // expert's rank and comes back (dispatch, combine), and the transposes
    // in backward: 4 all-to-alls per MoE layer in training, 2 forward only.
    // (ep-1)/ep of the rows leave the rank; an EP group is tp*cp*ep
    // consecutive ranks, on one node when they fit.
    const double ep = c.ep;
    const double k = static_cast<double>(std::max<int64_t>(s.model.experts_per_token, 1));
    const double ep_bw = (c.tp * c.cp * c.ep <= gpn) ? dev.intra_bytes_per_s : dev.inter_bytes_per_s;
    const double moe_layers = static_cast<double>(plan::MoeLayerCount(s.model));
    stage += (train ? 4.0 : 2.0) * moe_layers / pp * (ep - 1) / ep * act_bytes * k / ep_bw;
  }
  if (c.cp > 1) {
    // What the runtime does (runtime/parallel/context_parallel.h
    // GatherSequence, docs/context_parallel.md): per layer an all-gather of
    // this rank's K and V in forward (again under full recomputation; a
    // selective one recomputes the core after the gather) and a
    // reduce-scatter of their gradients in backward, in the activations'
    // dtype, not overlapped with compute. A ring all-gather or
    // reduce-scatter moves (cp - 1) of the cp blocks through each rank
    // (NCCL's bus bandwidth: algbw * (n - 1) / n; Thakur et al., 2005).
    const double exchanges = train ? (c.recompute ? 3.0 : 2.0) : 1.0;
    const double kv_bytes = samples_per_mb * tokens / cp * KvWidth(s.model) * 2.0 * BytesOf(dev.precision).activation;
    stage += exchanges * layers / pp * (cp - 1) * kv_bytes / tp / mp_bw;
  }
  if (c.pp > 1) {
    const double pp_bw = gpus > gpn ? dev.inter_bytes_per_s : dev.intra_bytes_per_s;
    stage += (train ? 2.0 : 1.0) * act_bytes / tp / pp_bw;
  }
  return stage;
}

// The gradient sync's seconds per step over the dp * cp ranks of a training
// section with params_per_gpu parameters per GPU on `gpus` GPUs.
double GradientSyncSeconds(const plan::ParallelConfig& c, const DeviceType& dev, double params_per_gpu, int gpus) {
  const double cp = c.cp, dp = c.dp;
  const double n = dp * cp;
  const double bw = gpus > dev.gpus_per_node ? dev.inter_bytes_per_s : dev.intra_bytes_per_s;
  // Gradients in their dtype (fp32 under mixed precision); ZeRO-1
  // all-gathers the parameters it steps (fp32 masters unless pure bf16).
  const double grad_bytes = BytesOf(dev.precision).gradient;
  const double param_bytes = dev.precision == ParamPrecision::kPureBf16 ? 2.0 : 4.0;
  const double bytes_per_param = c.zero_stage >= 1 ? grad_bytes + param_bytes : 2.0 * grad_bytes;
  return (n - 1) / n * bytes_per_param * params_per_gpu / bw;
}

}  // namespace

CostModel::CostModel(std::vector<DeviceType> devices, int64_t global_batch)
    : devices_(std::move(devices)), global_batch_(std::max<int64_t>(global_batch, 1)) {}

double PipelineFillStages(int pp, int batches_ahead, double microbatches) {
  if (batches_ahead < 2) return pp - 1;
  return std::max(0.0, pp - 1 - (batches_ahead - 1) * std::floor(microbatches));
}

int CostModel::NodesFor(int device, int gpus) const {
  const int gpn = devices_[static_cast<size_t>(device)].gpus_per_node;
  if (gpus <= 0 || gpn <= 0) return 0;
  if (devices_[static_cast<size_t>(device)].shared_node) return gpus <= gpn ? gpus : 0;
  if (devices_[static_cast<size_t>(device)].packs_nodes)
    return gpus <= devices_[static_cast<size_t>(device)].budget_units() ? gpus : 0;
  if (gpus <= gpn) return gpn % gpus == 0 ? 1 : 0;
  return gpus % gpn == 0 ? gpus / gpn : 0;
}

SectionCost CostModel::Evaluate(const SectionWork& s, const plan::ParallelConfig& c) const {
  const double active = static_cast<double>(global_batch_) * s.active_fraction;
  const double per_replica = std::ceil(active / c.dp - 1e-9);
  const double microbatches = std::max(1.0, std::ceil(per_replica / c.micro_batch - 1e-9));
  // A replica with fewer samples than micro-batches x mb runs partial ones.
  const double fill = std::min<double>(c.micro_batch, std::max(1.0, per_replica / microbatches));
  return EvaluateWith(s, c, microbatches, fill);
}

SectionCost CostModel::EvaluateWith(const SectionWork& s, const plan::ParallelConfig& c, double microbatches,
                                    double samples_per_mb) const {
  const DeviceType& dev = devices_[static_cast<size_t>(s.device)];
  SectionCost out;
  out.config = c;
  out.gpus = c.ranks();
  out.nodes = NodesFor(s.device, out.gpus);
  const bool train = s.trains();
  const double tp = c.tp, pp = c.pp, cp = c.cp, dp = c.dp;
  const double tokens = static_cast<double>(s.tokens);

  // FLOPs. A KD student also runs the frozen teacher head (hidden_t -> vocab)
  // on the teacher's hidden state, forward only (runtime/section_forward.cc).
  const double model_forward = tokens * s.facts.flops_per_token;
  const double teacher_head =
      tokens * 2.0 * static_cast<double>(s.kd_teacher_hidden) * static_cast<double>(s.model.vocab);
  out.flops_forward_per_sample = model_forward + teacher_head;
  out.flops_backward_per_sample = train ? 2.0 * model_forward : 0.0;
  // Recomputation runs a forward again in backward: full, the whole model's
  // (the blocks dominate); selective, the attention core's (Korthikanti et
  // al. 2022, section 5: 2.7% of the FLOPs of GPT-3 175B's layers).
  const bool selective = c.recompute_granularity() == plan::RecomputeGranularity::kSelective;
  const double recomputed = !train        ? 0.0
                            : c.recompute ? model_forward
                            : selective   ? tokens * s.facts.attention_flops_per_token
                                          : 0.0;
  const double flops_per_sample_run = model_forward * (train ? 3.0 : 1.0) + recomputed;
  out.microbatches = microbatches;
  out.useful_flops_per_step = static_cast<double>(global_batch_) * s.active_fraction *
                              (out.flops_forward_per_sample + out.flops_backward_per_sample);

  // Memory per GPU (compiler/memory_model.h).
  const double params_per_gpu = static_cast<double>(s.facts.params) / (tp * pp);
  out.memory = EstimateSectionMemory(s, c, microbatches, samples_per_mb, dev);
  if (s.model.kind == plan::ModelKind::kDecoder && c.pp > 1) {
    for (int stage = 0; stage < c.pp; ++stage) {
      out.stages.push_back(EstimateStageMemory(s, c, stage, microbatches, samples_per_mb, dev));
    }
  }
  out.fits = out.memory.total() <= dev.memory_bytes;

  // Time of one micro-batch on one pipeline stage.
  double stage = 0.0;
  const MeasuredStage m = InterpolateProfiles(s.profiles, c.tp * c.pp * c.cp, samples_per_mb);
  const bool measured = m.seconds > 0;
  if (measured) {
    stage = m.seconds / pp;
    out.forward_share = m.forward_share;
    out.optimizer_seconds = m.optimizer_seconds;
  } else {
    const ModelledCompute mc =
        ModelCompute(s, c, dev, samples_per_mb, microbatches, flops_per_sample_run, teacher_head);
    stage = mc.stage_seconds;
    out.forward_share = mc.forward_share;
    out.optimizer_seconds = mc.optimizer_seconds;
    out.step_model = mc.step_model;
    // Measured at other GPU counts: the model at the measurement's level.
    ScaleToNearestProfiledGpus(s, c, dev, samples_per_mb, microbatches, flops_per_sample_run, teacher_head, &stage,
                               &out);
    stage = AddModelParallelTraffic(stage, s, c, dev, samples_per_mb, out.gpus);
  }
  out.measured = measured;
  out.stage_seconds = stage;
  // The gradient sync spans DP x CP in one group (docs/gradient_sync.md):
  // CP ranks hold the same parameters and each computed the gradient of its
  // own share of the sequence. Over the n = dp * cp ranks the runtime runs a
  // (bucketed) all-reduce of the gradients, or, under ZeRO-1, a reduce-scatter
  // of the gradients and an all-gather of the updated parameters. A ring
  // all-reduce moves 2 (n - 1) / n of the bytes through each rank, a ring
  // reduce-scatter or all-gather (n - 1) / n (Thakur et al., 2005).
  if (train && dp * cp > 1) out.dp_sync_seconds = GradientSyncSeconds(c, dev, params_per_gpu, out.gpus);
  // 1F1B fills and drains once per step; a forward-only section streaming
  // ahead (up to plan::kMaxRunAhead batches, compiler/run_ahead.h) only
  // where those batches hold fewer micro-batches of a replica than stages.
  out.fill_stages = PipelineFillStages(c.pp, c.ep <= 1 ? s.pipeline_streams_ahead : 0, microbatches);
  out.step_seconds = (microbatches + out.fill_stages) * stage + out.dp_sync_seconds + out.optimizer_seconds;
  return out;
}

double CostModel::EdgeSeconds(const EdgeWork& e, int dp_from, int dp_to) const {
  const double bytes =
      static_cast<double>(global_batch_) * e.active_fraction * e.bytes_per_sample * (e.carries_gradient ? 2.0 : 1.0);
  const double links = std::max(1, std::min(dp_from, dp_to));
  return bytes / links / std::max(e.link_bytes_per_s, 1.0);
}

}  // namespace maestro::compiler
