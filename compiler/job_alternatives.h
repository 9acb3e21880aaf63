// SPDX-License-Identifier: Apache-2.0
// The values of a job's pricing (compiler/job_pricing.h computes them): the
// dataset's size, the job's length, each alternative's job time. Apart from
// the functions so that compiler/compile_result.h can hold them.
//
// Owns: DatasetSize, JobLength, JobAlternative, JobPricing.
// May call: nothing (values).
// Thread safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace maestro::compiler {

// The training set's size in samples. known = false: none of the ways
// below gives it (the report says how to give it: `[data] samples`).
struct DatasetSize {
  int64_t samples = 0;
  bool known = false;
  bool estimate = false;  // known, but not exact (a Megatron corpus cut by "split")
  std::string source;     // one phrase: where the number comes from, or why it is unknown
};
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
struct JobAlternative {
  std::string name;               // "sectioned", "sectioned-every-epoch", "fused-every-epoch", "cached", "offline"
  double seconds = 0;             // the whole job (one step's when its length is unknown)
  bool runtime_supported = true;  // false: planner-only (none today; offline runs since plan.offline_spool_pass)
  bool pays = true;               // false: spools for later epochs that the job does not have
  bool chosen = false;
  bool spool_reuse = false;       // the plan's spool_reuse flag for it
  double first_step_seconds = 0;  // an epoch-0 step (offline: phase 1's step)
  double later_step_seconds = 0;  // a later epoch's step, reads included (offline: phase 2's)
  double spool_io_seconds = 0;    // the job's spool writes and reads
  std::string note;               // one phrase for the report
};

struct JobPricing {
  JobLength length;
  bool spooled = false;               // some plan priced keeps a spool
  double spool_bytes_per_sample = 0;  // the spooling sections' rows together
  double fraction_fits = 1;           // of the dataset's samples the spool's shares hold (the least over sections)
  std::vector<JobAlternative> alternatives;
  // The baseline over the job: its fused plan every epoch, or cached where
  // its configuration keeps a spool, whichever is less (`baseline_option`).
  double baseline_seconds = 0;
  std::string baseline_option;
  double speedup = 0;  // baseline_seconds / the chosen alternative's (0: no baseline)
  // The chosen alternative reads spooled rows in later epochs. The runtime
  // reads every spooled row it has whatever this says (a flag to run a plan
  // without reuse, for fused-every-epoch, is not in the plan yet): an
  // alternative without reuse is chosen only where reuse cannot pay.
  bool spool_reuse = true;
};

}  // namespace maestro::compiler
