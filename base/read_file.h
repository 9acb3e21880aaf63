// SPDX-License-Identifier: Apache-2.0
// Reading a small input file whole, safely: what a user names as a spec, a
// Hugging Face config.json, a profile or a device file. A FIFO, a device
// (/dev/zero) or a socket is refused without blocking, a directory says it is
// one, and a file larger than the caller's limit is refused with the limit in
// the message, so no input can hang the tools or exhaust memory (issue #18).
//
// Owns: ReadSmallFile. May call: POSIX, fmt. Thread safety: reentrant.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace maestro {

// Limits of the inputs the tools read whole.
inline constexpr int64_t kMaxSpecBytes = int64_t{4} << 20;      // a TOML workload spec
inline constexpr int64_t kMaxConfigBytes = int64_t{16} << 20;   // an HF config.json, a device profile
inline constexpr int64_t kMaxProfileBytes = int64_t{64} << 20;  // measured profiles
inline constexpr int64_t kMaxPlanBytes = int64_t{256} << 20;    // plan.json

// The contents of `path`, a regular file of at most `max_bytes`. `what` names
// the input in messages ("the spec", "hf_config"). NotFound when it cannot be
// opened; InvalidArgument for a directory, a FIFO / device / socket, or a
// file over the limit (also one that grows past it while read).
StatusOr<std::string> ReadSmallFile(const std::string& path, int64_t max_bytes, const std::string& what);

}  // namespace maestro
