// SPDX-License-Identifier: Apache-2.0
// The CPU's issue cost into a device profile: `maestro profile --kernels`
// has maestro-kernel-profile time the issue probe (plan/issue_probe.h) and
// then divides its forward + backward seconds by the step model's count of
// that step's autograd-tracked kernels (compiler/step_sum.h), writing the
// quotient as "training_issue_us" (docs/step_model.md, "The CPU's issue
// cost"). On a GPU only: there the CPU's issuing overlaps the device's
// running, which is what the step model's bound assumes; on the CPU both
// are one thread's time, and the per-kernel floor stands for it.
// May call: compiler (step_model, device_profile), plan, base, nlohmann-json.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace maestro::cli {

// `profile`: a device profile as maestro-kernel-profile writes it. On a
// CUDA profile with an "issue_probe", adds "training_issue_us" (value and
// source) and returns true; otherwise leaves it as it is and returns false.
// InvalidArgument when the probe's record is malformed (names the field).
StatusOr<bool> AddIssueCost(nlohmann::json* profile);

// Reads the profile at `path`, AddIssueCost, and rewrites it (atomically)
// when it added the field. Errors name the file.
StatusOr<bool> AddIssueCostToFile(const std::string& path);

}  // namespace maestro::cli
