// SPDX-License-Identifier: Apache-2.0
// Plans priced over the whole job (issue #41 item 5): how long the job is
// (`[job] epochs` or `steps`; the dataset's size from `[data] samples` or
// counted where that is cheap and exact), and each way the job can run its
// frozen sections across epochs, priced in seconds for the whole job:
//   sectioned             the sectioned plan; from epoch 1 its frozen
//                         sections that keep a spool read their rows back
//                         for the share of the dataset the spool holds;
//   sectioned-every-epoch the same plan, the spool keeping nothing across
//                         epochs (`maestro run --no-spool-reuse` runs it);
//   fused-every-epoch     the fused plan, every epoch computing the teacher
//                         (`maestro run --grouping fused --no-spool-reuse`);
//   cached                the fused plan, from epoch 1 skipping its frozen
//                         components' forward for the rows the spool holds;
//   offline               the fused plan in two phases (plan.
//                         offline_spool_pass): its frozen components alone
//                         at its configuration over the data fill the
//                         spool, then training reads it from step 0.
// The baseline gets the fused options (every epoch, cached, offline) at its
// own configuration. The
// formulas and their sources: docs/planner.md, "Plans priced over the job".
//
// Owns: DatasetSizeOf, JobLengthOf, SpoolBytesPerSample, PriceJob,
// ChooseOverJob, JobText, AddJobJson (the values: compiler/job_alternatives.h).
// May call: plan (teacher_rows.h, plan.h), compiler/spec.h,
// compiler/cost_model.h, compiler/monolithic.h, compiler/step_simulation.h,
// compiler/compile_result.h, datasets/demo_data.h (the built-in sets' sizes),
// nlohmann-json, fmt, the C++ file streams.
// Thread safety: pure functions (DatasetSizeOf reads the spec's files).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/compile_options.h"
#include "compiler/compile_result.h"
#include "compiler/cost_model.h"
#include "compiler/job_alternatives.h"
#include "compiler/planner.h"
#include "compiler/spec.h"
#include "plan/plan.h"

namespace maestro::compiler {

// `[data] samples` when given; else a JSONL manifest's non-empty lines; a
// Megatron corpus's samples from its .idx header and .bin size (exact for
// "pack", tokens / seq_len for "split": an estimate); the built-in sets'
// train samples (datasets::DemoTrainSamples: the text's, read from this
// machine); unknown otherwise (an unreadable file).
DatasetSize DatasetSizeOf(const Spec& spec);

// InvalidArgument for `[job] epochs` without a known dataset size.
StatusOr<JobLength> JobLengthOf(const Spec& spec);

// Bytes one sample's rows take in section `section`'s spool of `p` (a KD
// teacher's rows by their form, any other section's out edge's fp32 wire
// values in the spool dtype), and what they are ("topk rows (K = 128, bf16
// values)") into `rows` when non-null. REQUIRES: plan::KeepsSpool(p, section).
double SpoolBytesPerSample(const plan::Plan& p, int section, std::string* rows);

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
// Returns whether the chosen alternative reuses spooled rows (JobPricing::spool_reuse).
bool ChooseOverJob(const CompileOptions& options, JobPricing& job, CompileResult& r);

// The report's `job:` lines and its --json `job_pricing` object and `job_alternatives` array.
std::string JobText(const JobPricing& job, int64_t global_batch);
void AddJobJson(const JobPricing& job, nlohmann::json& js);

}  // namespace maestro::compiler
