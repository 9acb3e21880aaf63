// SPDX-License-Identifier: Apache-2.0
// The report of one compile: built ONCE as a model (BuildReport: the GPU
// budgets, one row per section and per edge, the totals, both simulations,
// the monolithic comparison with its named terms, the planner-only
// sections), then written as the human text (report.txt, what
// maestro-compile prints) and as JSON (--json), so the two cannot disagree.
//
// Owns: Report and its parts, BuildReport, ReportText, ReportJson,
// PredictedUtilization (plan.json's predicted_utilization is the report's).
// May call: base (units), plan, compiler/compile_result.h (CompileResult),
// compiler/compile_options.h, compiler/cost_model.h, compiler/planner.h,
// compiler/step_simulation.h, compiler/workload_builder.h, compiler/job_pricing.h
// (RuntimeSupportText), nlohmann-json, fmt.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/checkpoint_cost.h"
#include "compiler/compile_options.h"
#include "compiler/compile_result.h"
#include "compiler/cost_model.h"
#include "compiler/planner.h"
#include "compiler/spec.h"
#include "compiler/step_simulation.h"
#include "plan/plan.h"

namespace maestro::compiler {

// The share of its GPUs' peak FLOP/s a section's useful work fills over a
// step of `step_seconds` (0 without a step or GPUs).
double PredictedUtilization(const SectionCost& c, const DeviceType& d, double step_seconds);

// One GPU type of the budget and the nodes (local mode: slots) the plan holds.
struct ReportBudget {
  DeviceType device;
  int nodes_held = 0;
};

// One section of the sectioned plan.
struct ReportSection {
  std::string name;
  plan::ModelKind kind = plan::ModelKind::kDecoder;
  int64_t params = 0;
  plan::SectionMode mode = plan::SectionMode::kTrain;
  double active_fraction = 1.0;
  int64_t tokens_per_sample = 0;
  int gpus = 0;
  int nodes = 0;  // 1 on a shared (local) node
  std::string gpu_type;
  plan::ParallelConfig config;
  double step_seconds = 0;
  double share_of_step = 0;  // of the bottleneck's step
  MemoryBreakdown memory;    // per GPU
  double memory_capacity = 0;
  double flops_forward_per_sample = 0;
  double flops_backward_per_sample = 0;
  double utilization = 0;
  bool measured_profile = false;
  std::string planner_only;  // "" when the runtime runs it
  int run_ahead = 0;         // global batches computed ahead (forward-only; compiler/run_ahead.h)
  // A [[data.modality.mix]] on its modality (compiler/sample_mix.h): its
  // kinds of sample (0: none), the attention context its mean sample is
  // priced at, and the largest sample memory is priced at.
  int mix_kinds = 0;
  int64_t attention_context = 0;
  int64_t peak_tokens_per_sample = 0, peak_attention_sequence = 0;
};

// One edge: the fan-out (fan-in) the DP degrees give it and its transfer.
struct ReportEdge {
  std::string from, to, tensor;
  int dp_from = 0, dp_to = 0;
  double bytes_per_sample = 0;
  bool carries_gradient = false;
  double seconds_per_step = 0;
};

// The monolithic baseline and the speed-up over it.
struct ReportMonolithic {
  MonolithicPlan plan;                      // plan.found false: no baseline (plan.why_not)
  std::vector<std::string> gpu_type_names;  // of plan.devices, in order
  std::string description;                  // DescribeMonolithic: the terms as lines
  SimulatedStep simulated;                  // FIFO
  bool speedup_simulated = false;           // the speed-up compares simulated step times
  double speedup = 0, speedup_analytic = 0, speedup_per_gpu = 0, speedup_per_peak_flops = 0;
  // The sectioned plan's speed-up when the fused plan was chosen (the plan
  // is then the baseline's configuration, its speed-up 1, or the best
  // configuration the spec's pins allow, its speed-up the baseline's
  // simulated step over its own).
  double sectioned_speedup = 0;
  plan::ParallelConfig fused_config;  // the fused plan's (when chosen)
  std::string fused_pins;             // the pins it honours, "" when none
};

// The ideal split (issue #16): the GPUs the plan holds, divided among the
// sections in proportion to their work, with no whole nodes, no rounding of
// samples to replicas and micro-batches, and frozen sections running ahead
// (no pipeline fill), at the plan's own per-GPU times. Work of a section =
// its GPUs x (its active samples / (DP x micro-batch) stage times + DP sync
// + optimizer + a training section's 1F1B fill and drain, (PP - 1) stage
// times: per step, whatever the split, as its weights change between steps).
// Per GPU type (sections do not move across types): the bound is the
// largest of sum(work on the type) / GPUs held of the type.
// Whose per-GPU times price the work: the chosen sectioned plan's; the
// sectioned plan's when a fused plan was chosen (its sections' widths and
// micro-batches: a stricter bound than the fused plan's own times, which
// split without rounding would give the fused step back); the fused plan's
// own step when it beats that bound (every GPU on every component).
enum class SplitBoundBasis { kPlan, kSectionedPlan, kFusedPlan };
const char* SplitBoundBasisName(SplitBoundBasis b);  // "plan", "sectioned_plan", "fused_plan"

struct SplitBound {
  double step_seconds = 0;  // 0: no bound (nothing held)
  double fraction = 0;      // step_seconds / the plan's predicted (simulated) step
  int gpus_held = 0;
  SplitBoundBasis basis = SplitBoundBasis::kPlan;
};
SplitBound SplitBoundOf(const CostModel& model, const Workload& w, const Assignment& a, double plan_step_seconds);

// A section that keeps a spool of its output rows (plan::KeepsSpool): what a
// sample's rows take in it (plan/teacher_rows.h) and how many samples its
// share of [job] spool_gib holds.
struct ReportSpool {
  std::string section;
  std::string rows;  // e.g. "topk rows (K = 128, bf16 values)"
  double bytes_per_sample = 0;
  double budget_bytes = 0;
  int64_t samples_fit = 0;
};

struct Report {
  std::string job, spec_path;
  int64_t global_batch = 0, seq_len = 0;
  std::vector<ReportBudget> budgets;
  std::vector<ReportSection> sections;
  std::vector<ReportEdge> edges;
  double step_seconds = 0;        // analytic steady state: the slowest section or edge
  double samples_per_second = 0;  // analytic
  int gpus = 0;
  std::vector<int> nodes_per_gpu_type;
  StepPrediction prediction;
  SimulatedStep simulated;  // the sectioned plan's
  ReportMonolithic monolithic;
  GroupingChoice grouping;
  SplitBound split_bound;
  std::string run_ahead_log;  // ChooseRunAhead's lines (sectioned plans)
  // Sectioned plans: the schedule's in-flight cap (0: none) and the line on
  // the caps tried (CompileResult::in_flight_log; "" when none was).
  int max_in_flight = 0;
  std::string in_flight_log;
  // Set when --runtime-support planned for another runtime (a text line only).
  std::string planned_runtime_support;
  // The checkpoint's state and predicted write (compiler/checkpoint_cost.h),
  // and whether periodic ones are written in the background.
  CheckpointCost checkpoint;
  bool checkpoint_async = true;
  std::vector<ReportSpool> spools;
  JobPricing job_pricing;  // the job's alternatives (compiler/job_pricing.h)
  // Lines that warn about the spec (each also goes to stderr).
  std::vector<std::string> warnings;
};

// The report of `r` (its workload, assignment, simulations and baseline).
Report BuildReport(const Spec& spec, const CostModel& model, const CompileResult& r, const CompileOptions& options);

// report.txt: the budget, the section table, the edges, the step (analytic
// and simulated), the monolithic comparison, the planner-only sections.
std::string ReportText(const Report& report);

// The same as one JSON object (2-space indent).
std::string ReportJson(const Report& report);

}  // namespace maestro::compiler
