// SPDX-License-Identifier: Apache-2.0
// What the cost model (compiler/cost_model.h) and the memory model
// (compiler/memory_model.h) price: a GPU type with its numbers in SI units,
// one section and one edge of the workload as the planner sees them. Values
// only; the workload builder (compiler/workload_builder.h) fills them from a
// spec.
//
// Owns: ParamPrecision, DeviceType, SectionWork, EdgeWork.
// May call: plan, compiler/device_profile.h (a GPU type's kernel tables),
// compiler/model.h (ModelFacts), compiler/spec_types.h (ProfileSpec).
// Thread safety: values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "compiler/device_profile.h"
#include "compiler/model.h"
#include "compiler/spec_types.h"
#include "plan/plan.h"

namespace maestro::compiler {

// What the runtime holds per trained parameter on a device (the memory
// model follows it): kFp32 = fp32 weights, grads and both AdamW moments
// (maestro-worker on the CPU, --precision fp32); kMixedBf16 = what
// maestro-worker runs on a GPU (--precision auto/bf16,
// runtime/section_runner.h "Device and precision"): fp32 master weights,
// gradients and moments, the forward under autocast to bf16 with the bf16
// copies of the matmul weights cached for the step, bf16 activations, and
// bf16 weights in forward-only sections; kPureBf16 = all four in bf16 (the
// H100 measurements' configuration, ../shared/research/h100-measurements.md
// section 1; no maestro-worker setting runs it: a planning what-if).
enum class ParamPrecision { kFp32, kMixedBf16, kPureBf16 };

// A GPU type with its numbers in SI units.
struct DeviceType {
  std::string name;
  bool cpu = false;
  ParamPrecision precision = ParamPrecision::kMixedBf16;
  // The step model's measured tables (compiler/step_model.h): GEMM and
  // attention efficiency, memory bandwidth, launch floor. Null: the legacy
  // efficiency curve below (mfu x two saturating curves) prices compute.
  std::shared_ptr<const DeviceProfile> kernels;
  // Where `kernels` came from, for the report: "builtin:h100_sxm",
  // "file:<path>", or "" when none (then `kernels_note` says why).
  std::string kernels_origin, kernels_note;
  double memory_bytes = 0;
  double reserved_bytes = 0;  // framework, NCCL buffers, fragmentation
  double peak_flops = 0;      // per GPU
  double mfu = 0.55;
  // GEMM size (tokens x hidden per GPU) at which kernels reach half of mfu.
  double half_efficiency_size = double(1 << 19);
  // Per-GPU matrix width (hidden / TP) at which GEMMs reach half of mfu:
  // kernels tile the output in 128-256-wide blocks, so a GEMM only a few
  // tiles wide (a small model split by TP) loses to tile-edge waste and
  // wave quantization. An estimate (w = 896 -> 0.88, w = 3584 -> 0.97);
  // 0 turns the effect off (CPU slots: no basis for a number).
  double half_efficiency_width = 128.0;
  double intra_bytes_per_s = 0;  // per GPU
  double inter_bytes_per_s = 0;  // per GPU
  int gpus_per_node = 1;
  int nodes = 1;
  std::string partition, constraint;
  // Local mode: one node whose `gpus_per_node` slots the sections share
  // (no whole-node rule). Then `nodes` is the budget in slots, and NodesFor
  // returns the slots a section holds.
  bool shared_node = false;
  // Sections of this type share nodes ([cluster] share_nodes, plan schema 3):
  // a section holds any count of GPUs, the planner counts GPUs (the budget
  // is nodes * gpus_per_node) and the plan holds the whole nodes its
  // node groups fill (compiler/assignment.h PackNodeGroups).
  bool packs_nodes = false;
  // What the planner counts and the budget of it: whole nodes, or GPUs (slots)
  // where sections share nodes (packs_nodes, shared_node).
  int budget_units() const { return packs_nodes ? nodes * gpus_per_node : nodes; }
  // Local mode: the cores of this machine that those slots (processes)
  // share; 0 = as many as slots. The step simulation shares them among the
  // processes computing at each moment (scheduler::Problem::shared_cores).
  int shared_cores = 0;
};

// One section as the cost model sees it.
struct SectionWork {
  std::string name;
  plan::ModelDesc model;
  ModelFacts facts;  // at `tokens`
  plan::SectionMode mode = plan::SectionMode::kTrain;
  std::string activation = "always";
  double active_fraction = 1.0;   // share of the samples that activate it
  int64_t tokens = 1;             // tokens per active sample
  int64_t attention_context = 0;  // tokens one attention spans (a ViT: one image's patches); 0 = tokens
  // Rows per sample an edge leaving it carries when they are not its
  // tokens' (a native-resolution ViT: plan::VisionRowsPerSample); 0 = by tokens.
  int64_t output_rows = 0;
  // A [[data.modality.mix]] on this encoder's modality (compiler/sample_mix.h):
  // `tokens`, `attention_context` and `facts` price its mean sample; memory
  // prices micro-batches of its largest (peak_tokens, with its longest
  // attention sequence peak_context); the simulation draws each sample's
  // kind (mix_cdf) and charges it mix_work[kind] mean samples.
  int64_t peak_tokens = 0, peak_context = 0;  // 0: tokens, facts.seq_len
  std::vector<double> mix_cdf, mix_work;
  bool lm_loss = false;  // a decoder sink that trains: LM head + cross-entropy run here
  int device = 0;        // index into the DeviceType list
  // Pins (0 = free).
  // pin_recompute: -1 free, else a plan::RecomputeGranularity (0 none, 1 selective, 2 full).
  int pin_tp = 0, pin_pp = 0, pin_cp = 0, pin_ep = 0, pin_dp = 0, pin_micro_batch = 0, pin_recompute = -1;
  std::vector<ProfileSpec> profiles;
  // Its place in the graph (compiler/memory_model.h, compiler/step_model.h):
  // no edge leaves it (a training decoder computes its logits and loss here),
  // and for a KD student (a decoder fed by a decoder: runtime/section_build.cc
  // holds the teacher's head there) the teacher's hidden width (the head, the
  // teacher logits and the KL run and live on the student) and the KD loss's
  // top_k (0: whole vocabulary).
  bool sink = true;
  // The schedule's cap on the micro-batches a training section that feeds
  // others keeps between forward and backward (Workload::max_in_flight, set
  // by SetInFlightCap); 0 = none: it keeps every micro-batch of its replica.
  int in_flight_cap = 0;
  int64_t kd_teacher_hidden = 0;
  int kd_top_k = 0;
  // KD rows (plan/teacher_rows.h): a student's received rows' width per
  // position (the teacher's hidden size, 2K, or draws + 1) and whether its
  // KL reads top-K or sampled rows (no teacher head; kd_teacher_hidden 0);
  // a teacher that makes such rows runs its head and the form's vocabulary
  // passes (teacher_rows_form: -1 none, else a plan::TeacherRowsForm).
  int64_t kd_rows_width = 0;
  bool kd_sparse_rows = false;
  int teacher_rows_form = -1;
  int64_t teacher_rows_width = 0;  // the rows it sends a position (teacher_rows_form >= 0)
  // A forward-only section the planner runs 2 or more global batches ahead
  // where the runtime streams its pipeline across steps (compiler/run_ahead.h
  // MarkPipelineStreams; runtime/run_ahead.h), at most this many batches
  // (its pin, else plan::kMaxRunAhead; 0: it does not stream): at PP > 1 its
  // step pays no fill beyond max(0, PP - 1 - (batches - 1) x micro-batches),
  // the stages the stream cannot cover (EP > 1 keeps no spool and never
  // runs ahead: it pays the fill).
  int pipeline_streams_ahead = 0;
  bool trains() const { return mode == plan::SectionMode::kTrain; }
};

struct EdgeWork {
  int from = -1, to = -1;  // section indices
  std::string tensor;
  double bytes_per_sample = 0;   // activation bytes per active sample
  double active_fraction = 1.0;  // share of samples that send on this edge
  bool carries_gradient = false;
  int fanout = 0, fanin = 0;    // pins (0 = free)
  double link_bytes_per_s = 1;  // one link's bandwidth (the slower network side)
};

}  // namespace maestro::compiler
