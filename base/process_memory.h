// SPDX-License-Identifier: Apache-2.0
// This process's memory as the kernel counts it: the resident set now, its
// high-water mark, and a reset of that mark. The one place that reads them
// (maestro-worker reports each rank's baseline and peak in metrics.jsonl;
// the memory model's CPU baseline was measured with them).
//
// Owns: ResidentBytes (/proc/self/statm, resident pages x page size),
// PeakResidentBytes (getrusage ru_maxrss: the high-water mark of the resident
// set since start or since the last reset), ResetPeakResident (writes "5" to
// /proc/self/clear_refs: Linux >= 4.0 resets the high-water mark to the
// resident set now, see proc(5)).
// May call: POSIX. Thread safety: any thread (the kernel answers).
#pragma once

#include <cstdint>

#include "base/status.h"

namespace maestro {

// Bytes resident now (VmRSS), or an error naming /proc/self/statm.
StatusOr<int64_t> ResidentBytes();
// The high-water mark of the resident set (VmHWM), from getrusage.
StatusOr<int64_t> PeakResidentBytes();
// From now on PeakResidentBytes starts again from ResidentBytes. Unavailable
// where the kernel refuses (then the mark keeps counting from start).
Status ResetPeakResident();

}  // namespace maestro
