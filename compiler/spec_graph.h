// SPDX-License-Identifier: Apache-2.0
// The checks across the spec's tables, once every table is read: the
// section graph and the names it refers to.
//
// Owns: unknown models, modalities, GPU types and sections (with a
// suggestion), sections declared twice, edges a section cannot have (to
// itself, a fan-out that pinned dp values break), cycles, and a section's
// `loss` (only a training sink; kd needs a frozen decoder teacher with the
// same vocabulary). The checks that need the cost model live in
// compiler/compile.cc.
// May call: compiler/spec_types.h, compiler/toml_reader.h (Diagnostics), base/graph.h (FindCycle),
// plan (EdgeDpRuleHolds), fmt. Internal to maestro_compiler: include it only
// from compiler/*.cc.
// Thread safety: pure function of the spec (errors go to `d`).
#pragma once

#include "compiler/spec_types.h"
#include "compiler/toml_reader.h"

namespace maestro::compiler::internal {

// Reports every problem of the section graph to `d`. Cluster defaults must
// already be applied (default_gpu set when a GPU type exists).
void CheckGraph(Diagnostics& d, const Spec& spec);

}  // namespace maestro::compiler::internal
