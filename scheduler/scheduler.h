// SPDX-License-Identifier: Apache-2.0
// Placeholder: the wavefront scheduler lands here (issue 5).
#pragma once
namespace maestro::scheduler {
const char* SchedulerName();
}  // namespace maestro::scheduler
