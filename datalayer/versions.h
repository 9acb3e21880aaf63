// SPDX-License-Identifier: Apache-2.0
// Versions of the storage libraries the datalayer is linked against.
#pragma once
#include <string>
namespace maestro::datalayer {
std::string SqliteVersion();  // e.g. "3.40.1"
std::string Hdf5Version();    // e.g. "1.10.8"
}  // namespace maestro::datalayer
