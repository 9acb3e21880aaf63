// SPDX-License-Identifier: Apache-2.0
// Plans priced over the whole job (issue #41 item 5): how long the job is
// (`[job] epochs` or `steps`; the dataset's size from `[data] samples` or
// counted where that is cheap and exact), and each way the job can run its
// frozen sections across epochs, priced in seconds for the whole job:
//   sectioned             the sectioned plan; from epoch 1 its frozen
//                         sections that keep a spool read their rows back
//                         for the share of the dataset the spool holds;
//   sectioned-every-epoch the same plan, the spool keeping nothing across
//                         epochs (plan::Plan::spool_reuse = false);
//   fused-every-epoch     the fused plan, every epoch computing the teacher;
//   cached                the fused plan, from epoch 1 skipping its frozen
//                         components' forward for the rows the spool holds;
//   offline               planner-only (the runtime does not run it): a
//                         first phase runs the frozen sections alone on all
//                         the job's GPUs over the data and fills the spool,
//                         then the trained sections train alone reading it.
// The baseline gets the fused options at its own configuration. The
// formulas and their sources: docs/planner.md, "Plans priced over the job".
//
// Owns: DatasetSize, JobLength, JobAlternative, JobPricing, DatasetSizeOf,
// JobLengthOf, SpoolBytesPerSample, PriceJob, ChooseOverJob, JobText,
// JobJson.
// May call: plan (teacher_rows.h, plan.h), compiler/spec.h,
// compiler/cost_model.h, compiler/monolithic.h, compiler/step_simulation.h,
// compiler/compile_result.h (the .cc only), nlohmann-json, fmt, POSIX files.
// Thread safety: pure functions (DatasetSizeOf reads the spec's files).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/compile_options.h"
#include "compiler/cost_model.h"
#include "compiler/planner.h"
#include "compiler/spec.h"
#include "plan/plan.h"

namespace maestro::compiler {

struct CompileResult;  // compiler/compile_result.h (which holds a JobPricing)

// The training set's size in samples. known = false: none of the ways
// below gives it (the report says how to give it: `[data] samples`).
struct DatasetSize {
  int64_t samples = 0;
  bool known = false;
  bool estimate = false;  // known, but not exact (a Megatron corpus cut by "split")
  std::string source;     // one phrase: where the number comes from, or why it is unknown
};
// `[data] samples` when given; else a JSONL manifest's non-empty lines; a
// Megatron corpus's samples from its .idx header and .bin size (exact for
// "pack", tokens / seq_len for "split": an estimate); the built-in captions
// set's size; unknown otherwise (the built-in text, an unreadable file).
DatasetSize DatasetSizeOf(const Spec& spec);

// How long the job is: `steps` optimizer steps, the first `first_epoch_steps`
// of them computing every row (epoch 0), the rest in later epochs.
struct JobLength {
  DatasetSize data;
  int64_t steps = 0;              // 0: unknown (no `steps`, dataset size unknown)
  int64_t steps_per_epoch = 0;    // ceil(samples / global_batch); 0 when unknown
  int64_t epochs = 0;             // passes (the last one may be partial); 0 when unknown
  int64_t first_epoch_steps = 0;  // min(steps, steps_per_epoch); steps when unknown
  int64_t later_steps() const { return steps - first_epoch_steps; }
};
// InvalidArgument for `[job] epochs` without a known dataset size.
StatusOr<JobLength> JobLengthOf(const Spec& spec);

// Bytes one sample's rows take in section `section`'s spool of `p` (a KD
// teacher's rows by their form, any other section's out edge's fp32 wire
// values in the spool dtype), and what they are ("topk rows (K = 128, bf16
// values)") into `rows` when non-null. REQUIRES: plan::KeepsSpool(p, section).
double SpoolBytesPerSample(const plan::Plan& p, int section, std::string* rows);

struct JobAlternative {
  std::string name;                // "sectioned", "sectioned-every-epoch", "fused-every-epoch", "cached", "offline"
  double seconds = 0;              // the whole job (one step's when its length is unknown)
  bool runtime_supported = true;   // false: planner-only (offline)
  bool pays = true;                // false: spools for later epochs that the job does not have
  bool chosen = false;
  bool spool_reuse = false;        // the plan's spool_reuse flag for it
  double first_step_seconds = 0;   // an epoch-0 step (offline: phase 1's step)
  double later_step_seconds = 0;   // a later epoch's step, reads included (offline: phase 2's)
  double spool_io_seconds = 0;     // the job's spool writes and reads
  std::string note;                // one phrase for the report
};

struct JobPricing {
  JobLength length;
  bool spooled = false;                  // some plan priced keeps a spool
  double spool_bytes_per_sample = 0;     // the spooling sections' rows together
  double fraction_fits = 1;              // of the dataset's samples the spool's shares hold (the least over sections)
  std::vector<JobAlternative> alternatives;
  // The baseline over the job: its fused plan every epoch, or cached where
  // its configuration keeps a spool, whichever is less (`baseline_option`).
  double baseline_seconds = 0;
  std::string baseline_option;
  double speedup = 0;  // baseline_seconds / the chosen alternative's (0: no baseline)
};

// Prices every alternative of `r` (after the grouping is chosen): the
// sectioned plan `sectioned` (nullptr: none was made) and the fused plan
// `fused` (nullptr: the runtime cannot run one), built from `r` by the
// caller (compile.cc BuildPlan). Marks nothing chosen.
JobPricing PriceJob(const Spec& spec, const CostModel& model, const PlannerOptions& po, const CompileResult& r,
                    const JobLength& length, const plan::Plan* sectioned, const plan::Plan* fused);

// The alternative the job runs: the least job time among those the runtime
// runs and that pay, within the grouping `--grouping` forces; on a tie the
// grouping `r` chose by step and no spool reuse. Marks it chosen, sets the
// job speed-up, and updates r.grouping when the job's choice changes it.
// Returns the plan's spool_reuse flag.
bool ChooseOverJob(const CompileOptions& options, JobPricing& job, CompileResult& r);

// The report's `job:` lines and its --json `job` object (with `job_alternatives`).
std::string JobText(const JobPricing& job, int64_t global_batch);
void AddJobJson(const JobPricing& job, nlohmann::json& js);

}  // namespace maestro::compiler
