// SPDX-License-Identifier: Apache-2.0
// Versions of the communication libraries the launcher is linked against.
#pragma once
#include <string>
namespace maestro::launcher {
std::string PmixVersion();  // e.g. "OpenPMIx 4.2.2 ..."
std::string MpiVersion();   // e.g. "Open MPI v4.1.4 ..."
std::string NcclVersion();  // "2.28.x", or "not built" without CUDA
}  // namespace maestro::launcher
