// SPDX-License-Identifier: Apache-2.0
// What maestro-compile (and `maestro run`'s local mode) asks of one compile:
// the command line's choices, before any spec is read.
//
// Owns: PinOverride (one --pin), CompileOptions.
// May call: compiler/spec.h, compiler/runtime_support.h. Thread safety: plain
// data.
#pragma once

#include <string>
#include <vector>

#include "compiler/runtime_support.h"
#include "compiler/spec.h"

namespace maestro::compiler {

// One `--pin SECTION.KEY=VALUE`: overrides (or adds) a pin of the spec.
struct PinOverride {
  std::string section;
  std::string key;  // tp | dp | pp | cp | ep | micro_batch
  int value = 0;
  std::string text;  // as given, for messages
};

// How components are grouped into sections (--grouping). kAuto: the faster
// of the sectioned plan (one component per section, the planner's
// configuration for each) and the fused plan (every component in one
// section on every GPU: the monolithic baseline's configuration, which the
// runtime runs as a fused section), by their simulated steps. kSectioned and
// kFused force one (kFused fails when the runtime cannot run the fused plan).
enum class Grouping { kAuto, kSectioned, kFused };

struct CompileOptions {
  Grouping grouping = Grouping::kAuto;
  std::string out_dir = ".";              // as given: job.sbatch names plan.json through it
  std::string worker = "maestro-worker";  // the step's program (a stub in Slurm tests)
  std::vector<std::string> worker_args;   // appended (shell-quoted) to the worker's command line
  bool allow_planner_only = false;
  // What the target runtime runs (--runtime-support); this build's table by
  // default. Local mode always plans for this build's runtime.
  RuntimeSupport support = kRuntimeSupport;
  bool support_given = false;               // --runtime-support was used
  std::vector<ProfileSpec> extra_profiles;  // from --profiles (measured by the runtime)
  std::vector<PinOverride> pins;            // from --pin, applied over the spec's pins
  // > 0: local mode (`maestro run`): ignore [cluster]'s node and GPU counts and
  // plan for this machine: one node of `local_ranks` CPU slots that every
  // section shares (no whole-node rule), only configurations the runtime runs.
  int local_ranks = 0;
  // Local mode: raise local_ranks to the number of sections when it is
  // smaller (--local-grow; `maestro run` without --ranks on a small machine).
  bool local_grow = false;
  // Local mode: the cores those ranks share (--local-cores; 0: one each).
  // Fewer cores than ranks makes the step simulation share them
  // (plan.shared_cores), as the operating system does.
  int local_cores = 0;
  // Local mode on GPUs (--local-gpu NAME; `maestro run` on a machine with
  // GPUs): the local_ranks slots are GPUs named `local_gpu` (CUDA's name or a
  // device profile's, compiler/local_gpu_type.h), one rank each, never
  // shared: a spec of several sections that needs more ranks than that is
  // planned fused on them (unless kSectioned, which is refused; compile.cc
  // PlanFusedOnly), one section pinned wider is refused. A spec's
  // [cluster.gpu.*] of that type (by name or `type`) gives its numbers and
  // kernels; otherwise the type's built-in profile, else the default tables
  // with the report's note. "" = CPU slots.
  std::string local_gpu;
  double local_gpu_memory_gb = 0;  // per GPU (--local-gpu-memory-gb); 0: the type's default
};

}  // namespace maestro::compiler
