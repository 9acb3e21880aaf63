// SPDX-License-Identifier: Apache-2.0
#include "scheduler/scheduler.h"
namespace maestro::scheduler {
const char* SchedulerName() { return "wavefront"; }
}  // namespace maestro::scheduler
