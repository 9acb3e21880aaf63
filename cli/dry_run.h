// SPDX-License-Identifier: Apache-2.0
// `maestro run --dry-run`'s account of what a run would start (issue #43):
// the devices compiled for, the compiled plan in brief, the device each rank
// binds, the backend each group and link gets, the environment the ranks get
// and the exact mpirun command line, shell-quoted. Nothing is started. The
// binding comes from the launcher's own rule (launcher::PlaceRank, under the
// variables mpirun gives rank r on one machine), the backends from
// launcher::NcclSections / NcclLink: what the ranks will do, not a copy of it.
//
// Owns: DryRunText.
// May call: base, plan, launcher (launch_env, communicators), cli/local_devices.
// Thread safety: pure function.
#pragma once

#include <string>
#include <vector>

#include "cli/local_devices.h"
#include "launcher/communicators.h"
#include "plan/plan.h"

namespace maestro::cli {

struct DryRunInput {
  const plan::Plan* plan = nullptr;
  std::string plan_path;
  LocalDevices devices;
  std::vector<std::string> command;                                  // what would run (mpirun ..., or the reference)
  launcher::BackendChoice backend = launcher::BackendChoice::kAuto;  // MAESTRO_COMM_BACKEND
  // CUDA_VISIBLE_DEVICES as the ranks would see it (nullptr: unset).
  const char* child_visible = nullptr;
};

// The account, several lines, each ending in '\n'. A rank the launcher would
// refuse (a GPU list too short) says why in place of its device.
std::string DryRunText(const DryRunInput& in);

}  // namespace maestro::cli
