// SPDX-License-Identifier: Apache-2.0
// From a spec and the command line's choices to the cost model's inputs:
// the effective spec (--pin, --local), the GPU types as DeviceTypes, measured
// profiles (--profiles), the runtime features planned for
// (--runtime-support), and the Workload (tokens per section, activation
// shares, edge bytes).
//
// Owns: ParsePin, ParseRuntimeSupport / RuntimeSupportText, EffectiveSpec,
// DevicesOf, DeviceIndex, BuildWorkload, ReadProfilesJson / ProfilesFromPoints,
// CheckProfileSections. Their messages are user-facing (maestro-compile
// prints them as they are).
// May call: base, plan (profile files), compiler/spec.h, compiler/model.h,
// compiler/cost_model.h, compiler/planner.h (Workload). Thread safety: pure
// functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "compiler/compile_options.h"
#include "compiler/cost_model.h"
#include "compiler/planner.h"
#include "compiler/runtime_support.h"
#include "compiler/spec.h"
#include "plan/profile.h"

namespace maestro::compiler {

// Parses "SECTION.KEY=VALUE" (KEY one of tp, dp, pp, micro_batch; VALUE a
// positive integer). InvalidArgument with the fix otherwise.
StatusOr<PinOverride> ParsePin(const std::string& text);

// Parses --runtime-support: a comma list of the features the target runtime
// has (RuntimeSupportText of "all" lists them; cp = every cp_ row); or
// "all". InvalidArgument names an unknown one and refuses an empty one
// ("dp,,tp_decoder", "").
StatusOr<RuntimeSupport> ParseRuntimeSupport(const std::string& list);
std::string RuntimeSupportText(const RuntimeSupport& support);

// The spec's GPU types as the cost model sees them (local mode: one shared
// node whose budget counts slots).
std::vector<DeviceType> DevicesOf(const Spec& spec);

// The index of GPU type `name` in the spec's [cluster] (0 when unknown).
int DeviceIndex(const Spec& spec, const std::string& name);

// The spec as compiled under `options`: --pin applied (an unknown section is
// InvalidArgument), and in local mode [cluster] replaced by one node of
// options.local_ranks slots of the spec's first CPU type (else a synthetic
// "cpu" type: 4 GB, 0.05 TFLOP/s) that every section runs on.
StatusOr<Spec> EffectiveSpec(const Spec& spec, const CompileOptions& options);

// The ranks a spec needs at the least: one per section, or what its pins ask.
int LeastRanks(const Spec& spec);

// GPU local mode (--local N --local-gpu) on fewer GPUs than the sectioned
// plan needs (LeastRanks of a spec of several sections; a GPU is not shared
// between ranks): Compile then plans the workload fused on the N GPUs.
// `effective` is EffectiveSpec's result.
bool LocalGpusTooFewForSections(const Spec& effective);

// InvalidArgument when a --profiles entry names a section the spec lacks.
Status CheckProfileSections(const Spec& spec, const std::vector<ProfileSpec>& profiles);

StatusOr<Workload> BuildWorkload(const Spec& spec, const std::vector<DeviceType>& devices,
                                 const std::vector<ProfileSpec>& extra_profiles = {});

// Reads a JSON array of {"section","gpus","micro_batch","seconds"} objects
// (what the runtime writes) into profiles.
StatusOr<std::vector<ProfileSpec>> ReadProfilesJson(const std::string& path);
// The same from points already read (`path` names them in messages): each
// point's values are checked (positive gpus, micro_batch and seconds,
// forward_seconds in [0, seconds], optimizer_seconds >= 0).
StatusOr<std::vector<ProfileSpec>> ProfilesFromPoints(const std::vector<plan::ProfilePoint>& points,
                                                      const std::string& path);

}  // namespace maestro::compiler
