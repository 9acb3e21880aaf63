// SPDX-License-Identifier: Apache-2.0
// job.sbatch: the Slurm heterogeneous job of a plan, one het component per
// node group (plan::NodeGroupsOf: a section's own, or several sections'
// sharing nodes), and the batch script that runs the training step (srun over every
// component), forwards USR1/TERM to it, works around the Slurm 22.05 pmix
// hang, and requeues the job when the step asks for it (exit kExitRequeue).
//
// Owns: RenderSbatch. Every line goes through base/shell.h's
// ShellScriptWriter: a user string that reaches the script is shell-quoted
// or was rejected by the spec reader, a control character in a line is
// refused (InvalidArgument), and in a comment (the spec's file name) escaped.
// May call: base (shell quoting, the script writer, exit codes), plan, compiler/spec.h,
// compiler/compile_options.h. Thread safety: pure functions.
#pragma once

#include <string>

#include "base/status.h"
#include "compiler/compile_options.h"
#include "compiler/spec.h"
#include "plan/plan.h"

namespace maestro::compiler {

// The job script of a plan (exposed for tests), or InvalidArgument when a
// line would hold a control character (an --out folder, --worker or
// --worker-arg with a newline).
StatusOr<std::string> RenderSbatch(const plan::Plan& plan, const Spec& spec, const CompileOptions& options);

}  // namespace maestro::compiler
