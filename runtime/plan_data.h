// SPDX-License-Identifier: Apache-2.0
// A plan's data: the one place that picks the SampleSource a plan reads (the
// built-in demo data sets today; the Megatron and JSONL sources of #15 arrive
// here as further cases) and opens its run directory with the source's
// manifest ingested. Shared by the executor, the reference and the profiler.
// May call: datasets, datalayer, plan, base. Torch-free.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "datalayer/training_run.h"
#include "datasets/sample_source.h"
#include "plan/plan.h"

namespace maestro::runtime {

// The plan's samples: a Megatron corpus (plan.data.corpus, checked against
// the smallest vocabulary of the plan's decoders; plan.data.test_corpus, when
// set, is its test split), else the built-in dataset
// plan.data.dataset (or captions when a section activates on "image", else
// text). A plan with a JSONL manifest is refused until its source is wired.
StatusOr<std::unique_ptr<datasets::SampleSource>> OpenPlanDataset(const plan::Plan& plan);

// Opens (creating) the run directory's TrainingRun and ingests the source's
// manifest (written to <run_dir>/manifest.jsonl) the first time; a corpus's
// token ids are checked whole before that.
StatusOr<std::unique_ptr<datalayer::TrainingRun>> OpenPlanRun(const plan::Plan& plan,
                                                              const datasets::SampleSource& samples,
                                                              const std::string& run_dir);

}  // namespace maestro::runtime
